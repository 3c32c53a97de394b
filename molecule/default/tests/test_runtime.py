"""State checks of the nvidia_driver and container_runtime roles on the converged node."""

from __future__ import annotations

import json

import pytest

DRIVER_PACKAGES = [
    "nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-persistenced"]
TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
TOOLKIT_VERSION = "1.17.8-1"


def _selection(host, package: str) -> str:
    out = host.check_output("dpkg --get-selections %s", package)
    return out.split()[-1]


@pytest.mark.parametrize("package", DRIVER_PACKAGES)
def test_debian_driver_package_installed_and_held(host, package):
    pkg = host.package(package)
    assert pkg.is_installed
    assert pkg.version.startswith("535.")
    assert _selection(host, package) == "hold"


def test_driver_dependencies_of_the_same_build_are_held_too(host):
    # The exact-version siblings (alternatives, firmware, ptxjitcompiler) move only with the driver.
    for package in ["nvidia-alternative", "firmware-nvidia-gsp", "libnvidia-ptxjitcompiler1"]:
        assert _selection(host, package) == "hold"


@pytest.mark.parametrize("package", TOOLKIT_PACKAGES)
def test_toolkit_pinned_to_one_version_and_held(host, package):
    pkg = host.package(package)
    assert pkg.is_installed
    # The test repository also offers 1.17.9-1: the pin, not "latest", decides.
    assert pkg.version == TOOLKIT_VERSION
    assert _selection(host, package) == "hold"


def test_toolkit_repository_is_a_deb822_source_signed_by_the_checked_key(host):
    if host.backend.hostname == "onecat-node2":
        pytest.skip("the existing host keeps its own entry (test_existing_host.py)")
    keyring = "/etc/apt/keyrings/onecat-nvidia-container-toolkit.asc"
    source = host.file("/etc/apt/sources.list.d/onecat-nvidia-container-toolkit.sources")
    assert source.content_string.splitlines()[1:] == [
        "Types: deb", "URIs: file:///opt/onecat-test/apt", "Suites: /", f"Signed-By: {keyring}"]
    assert not host.file("/etc/apt/sources.list.d/onecat-nvidia-container-toolkit.list").exists
    assert "BEGIN PGP PUBLIC KEY BLOCK" in host.file(keyring).content_string


def test_fresh_host_gets_the_distribution_engine_held(host):
    if host.backend.hostname == "onecat-node2":
        pytest.skip("the existing host keeps docker-ce (test_existing_host.py)")
    # Docker's repository cannot be reached here, so source auto falls back to docker.io.
    assert host.package("docker.io").is_installed
    for package in ["docker.io", "containerd", "runc"]:
        assert _selection(host, package) == "hold"
    conf = host.file("/etc/apt/apt.conf.d/51onecat-container-runtime").content_string
    assert '"^docker[.]io$";' in conf
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert '"^nvidia-container-toolkit$";' in dump


def test_dev_char_symlink_rule_installed(host):
    rule = host.file("/etc/udev/rules.d/71-nvidia-dev-char.rules").content_string
    assert ('ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
            'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"') in rule


def test_driver_family_pinned_to_the_locked_version(host):
    from conftest import read_lock
    locked = read_lock()["nvidia_driver"]["Debian-12/distro/535/proprietary"]
    pref = host.file("/etc/apt/preferences.d/onecat-nvidia-driver").content_string.splitlines()
    assert f"Pin: version {locked['version']}" in pref
    assert "Pin-Priority: 1001" in pref
    for package, version in locked["packages"].items():
        assert host.package(package).version == version, package


def test_nouveau_blacklisted(host):
    content = host.file("/etc/modprobe.d/onecat-blacklist-nouveau.conf").content_string
    assert "blacklist nouveau" in content.splitlines()
    assert "options nouveau modeset=0" in content.splitlines()


def test_unattended_upgrades_excludes_the_driver(host):
    content = host.file("/etc/apt/apt.conf.d/51onecat-nvidia-driver").content_string
    assert "Unattended-Upgrade::Package-Blacklist {" in content
    assert '"^nvidia-(?!container)";' in content
    assert '"^libcuda1";' in content
    # apt itself must parse the snippet.
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert 'Unattended-Upgrade::Package-Blacklist:: "^libnvidia-(?!container)";' in dump


def test_persistence_daemon_enabled(host):
    assert host.service("nvidia-persistenced").is_enabled


def test_daemon_json_merged_keeps_user_keys(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    assert config["live-restore"] is True
    if host.backend.hostname == "onecat-node1":  # node2's drop-in passes --exec-opt itself
        assert config["exec-opts"] == ["native.cgroupdriver=cgroupfs"]
    # Planted by prepare.yml before the roles ran.
    assert config["log-driver"] == "json-file"
    assert config["log-opts"] == {"max-size": "10m", "max-file": "3"}


def test_daemon_json_backup_kept(host):
    backups = host.check_output("ls /etc/docker").split()
    backups = [name for name in backups if name.startswith("daemon.json.") and name.endswith("~")]
    assert len(backups) == 1
    planted = json.loads(host.file("/etc/docker/" + backups[0]).content_string)
    assert "runtimes" not in planted
    assert planted["log-driver"] == "json-file"


def test_docker_active_with_the_merged_configuration(host):
    assert host.service("docker").is_running
    assert host.service("docker").is_enabled
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert "nvidia" in info["Runtimes"]
    assert info["CgroupDriver"] == "cgroupfs"
    assert info["LoggingDriver"] == "json-file"


def test_no_reboot_marker_after_a_clean_install(host):
    assert not host.file("/run/onecat/nvidia-driver-reboot-pending").exists
