"""onecat-node2 is an "existing host": before onecat ran, Docker's and NVIDIA's repositories were
set up the way their own instructions do it (other keyring paths, deb822 and one-line files),
docker-ce was installed from Docker's (test) repository, and a drop-in passes --exec-opt."""

from __future__ import annotations

import json

import pytest

NODE = "onecat-node2"
RUNTIME = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/runtime.yml"
OVERRIDE = "/etc/systemd/system/docker.service.d/override.conf"


@pytest.fixture(autouse=True)
def _only_node2(host):
    if host.backend.hostname != NODE:
        pytest.skip("the existing host is onecat-node2")


def test_the_installed_engine_is_kept_and_held(host):
    for package in ["docker-ce", "docker-ce-cli", "containerd.io"]:
        assert host.package(package).is_installed, package
        assert host.check_output("dpkg --get-selections %s", package).split()[-1] == "hold"
    assert not host.package("docker.io").is_installed
    assert host.service("docker").is_running
    conf = host.file("/etc/apt/apt.conf.d/51onecat-container-runtime").content_string
    assert '"^docker-ce$";' in conf and '"^containerd[.]io$";' in conf


def test_the_users_repositories_and_keys_are_used_not_duplicated(host):
    assert "Signed-By: /etc/apt/keyrings/docker.asc" in host.file(
        "/etc/apt/sources.list.d/docker.sources").content_string
    assert "signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" in host.file(
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list").content_string
    assert host.file("/etc/apt/keyrings/docker.asc").exists
    assert host.file("/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg").exists
    for name in ["onecat-docker", "onecat-nvidia-container-toolkit"]:
        assert not host.file(f"/etc/apt/sources.list.d/{name}.sources").exists
        assert not host.file(f"/etc/apt/sources.list.d/{name}.list").exists
    # apt still runs: no second entry with another Signed-By for the same repository.
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "Conflicting values" not in update.stderr


def test_daemon_json_leaves_the_cgroup_driver_to_the_drop_in(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert "exec-opts" not in config  # dockerd refuses a directive given as flag and in the file
    assert config["live-restore"] is True
    assert config["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    assert config["log-driver"] == "json-file"
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["CgroupDriver"] == "cgroupfs"
    assert info["LiveRestoreEnabled"] is True


def test_a_drop_in_that_contradicts_the_cgroup_driver_is_refused(host, run_playbook):
    original = host.file(OVERRIDE).content_string
    daemon_before = host.file("/etc/docker/daemon.json").content_string
    host.run(f"sed -i 's/cgroupdriver=cgroupfs/cgroupdriver=systemd/' {OVERRIDE}"
             " && systemctl daemon-reload")
    try:
        run = run_playbook(RUNTIME, "--limit", NODE)
        flat = " ".join(run.output.split())
        assert run.rc == 2, run.output[-3000:]
        assert "Its --exec-opt flags (native.cgroupdriver=systemd) decide the cgroup driver" in flat
        assert OVERRIDE in flat
        assert host.file("/etc/docker/daemon.json").content_string == daemon_before
    finally:
        host.run(f"cat > {OVERRIDE} <<'EOF'\n{original}EOF\nsystemctl daemon-reload")
    assert host.file(OVERRIDE).content_string == original
