"""nvidia_driver on Ubuntu: every installed kernel gets a module that matches the locked driver.

Real apt-cache, apt-get and dpkg-query, pointed at a throwaway apt root (APT_CONFIG) that serves
placeholder packages with Ubuntu's names and dependency shapes (linux-restricted-modules: one
linux-modules-nvidia-<branch>-server-<kernel> per kernel ABI, versioned by the kernel, depending on
nvidia-kernel-common-<branch>-server (>= the driver it was built against)), and at a throwaway dpkg
database (DPKG_ADMINDIR) in which two kernels are installed. Nothing of this machine's apt or dpkg
state is read or changed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .ansible_run import OS, host_outcome, run_playbook

LOCKED = "580.95.05-0ubuntu0.24.04.2"
NEWER = "580.105.08-0ubuntu0.24.04.1"
RUNNING = "6.8.0-49-generic"  # OS["ubuntu24"]'s kernel: Ubuntu built modules for it at LOCKED
NEXT = "6.8.0-50-generic"  # installed by an update, its modules built against NEWER only
MODULES = "linux-modules-nvidia-580-server-"


def _deb(repo: Path, name: str, version: str, depends: str = "") -> None:
    root = repo.parent / "build" / f"{name}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {name}", f"Version: {version}", "Architecture: all",
               "Maintainer: onecat test data <noreply@example.invalid>"]
    if depends:
        control.append(f"Depends: {depends}")
    control.append(f"Description: TEST DATA - placeholder for {name} {version}")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root),
                    str(repo / f"{name}_{version}_all.deb")], check=True, capture_output=True)


def _apt_root(tmp: Path, *, next_headers: bool) -> dict[str, str]:
    """A file: repository and an apt/dpkg state of their own; the environment that selects them."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    for version in (LOCKED, NEWER):
        common = f"nvidia-kernel-common-580-server (= {version})"
        _deb(repo, "nvidia-kernel-common-580-server", version)
        _deb(repo, "nvidia-headless-no-dkms-580-server", version, common)
        _deb(repo, "nvidia-utils-580-server", version)
        _deb(repo, "nvidia-dkms-580-server", version, common)
    upstream = {v: v.split("-")[0] for v in (LOCKED, NEWER)}
    # The running kernel's ABI package was respun: +1 against LOCKED, +2 against NEWER.
    _deb(repo, MODULES + RUNNING, "6.8.0-49.49+1",
         f"nvidia-kernel-common-580-server (>= {upstream[LOCKED]})")
    _deb(repo, MODULES + RUNNING, "6.8.0-49.49+2",
         f"nvidia-kernel-common-580-server (>= {upstream[NEWER]})")
    _deb(repo, MODULES + NEXT, "6.8.0-50.50+1",
         f"nvidia-kernel-common-580-server (>= {upstream[NEWER]})")
    # The flavour metapackage follows the newest kernel and driver (what apt upgrades).
    _deb(repo, "linux-modules-nvidia-580-server-generic", "6.8.0-50.50+1",
         f"{MODULES}{NEXT} (= 6.8.0-50.50+1), "
         f"nvidia-kernel-common-580-server (>= {upstream[NEWER]})")
    if next_headers:
        _deb(repo, f"linux-headers-{NEXT}", "6.8.0-50.50")
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=repo, check=True,
                              capture_output=True, text=True).stdout
    (repo / "Packages").write_text(packages)

    etc = tmp / "etc"
    for sub in ("apt.conf.d", "preferences.d", "sources.list.d"):
        (etc / sub).mkdir(parents=True)
    (etc / "sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    for sub in ("state/lists/partial", "cache/archives/partial", "dpkg/updates", "dpkg/info"):
        (tmp / sub).mkdir(parents=True)
    # Two kernels installed (a third one removed, its configuration left: not a kernel to serve).
    (tmp / "dpkg" / "status").write_text("".join(
        f"Package: linux-image-{kernel}\nStatus: {status}\nVersion: 1\nArchitecture: amd64\n"
        "Maintainer: onecat test data <noreply@example.invalid>\nDescription: TEST DATA\n\n"
        for kernel, status in ((RUNNING, "install ok installed"), (NEXT, "install ok installed"),
                               ("6.8.0-45-generic", "deinstall ok config-files"))))
    (tmp / "dpkg" / "available").write_text("")
    conf = tmp / "apt.conf"
    conf.write_text("".join(f'{key} "{value}";\n' for key, value in {
        "Dir::State": tmp / "state", "Dir::State::status": tmp / "dpkg" / "status",
        "Dir::Cache": tmp / "cache", "Dir::Etc::sourcelist": etc / "sources.list",
        "Dir::Etc::sourceparts": etc / "sources.list.d",
        "Dir::Etc::preferences": etc / "preferences",
        "Dir::Etc::preferencesparts": etc / "preferences.d", "Dir::Etc::parts": etc / "apt.conf.d",
        "APT::Architecture": "amd64", "Debug::NoLocking": "true"}.items()))
    env = {"APT_CONFIG": str(conf), "DPKG_ADMINDIR": str(tmp / "dpkg")}
    subprocess.run(["apt-get", "update", "-q"], env={**os.environ, **env}, check=True,
                   capture_output=True)
    return env


def _host(tmp: Path, **extra) -> dict:
    lock = tmp / "onecat.lock.json"
    lock.write_text(json.dumps({"nvidia_driver": {"Ubuntu-24/distro/580/prebuilt": {
        "version": LOCKED, "version_package": "nvidia-utils-580-server",
        "packages": {"nvidia-headless-no-dkms-580-server": LOCKED,
                     "nvidia-utils-580-server": LOCKED},
        "locked_at": "2026-01-01T00:00:00Z"}}}))
    return {"fake_facts": OS["ubuntu24"], "nvidia_driver_lock_file": str(lock),
            "nvidia_driver_apt_preferences_file": str(tmp / "etc" / "preferences.d" / "onecat"),
            **extra}


def _run(tmp: Path, monkeypatch, env: dict, hosts: dict, check: bool = False) -> dict:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return run_playbook("modules.yml", hosts, tmp, check=check)


def _simulate(env: dict, packages: list[str]) -> subprocess.CompletedProcess:
    """apt-get's own answer, under the role's pin, to installing these packages."""
    return subprocess.run(["apt-get", "-s", "-q", "install", *packages],
                          env={**os.environ, **env}, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("prebuilt", ["auto", True])
def test_each_installed_kernel_gets_its_module_at_the_locked_driver_or_dkms(
        tmp_path, monkeypatch, prebuilt):
    env = _apt_root(tmp_path, next_headers=True)
    # What the archive's newest packages would do under the pin (the old path installed the
    # running kernel's module package and the flavour metapackage at apt's candidates):
    # nvidia-kernel-common is held at LOCKED, so apt refuses; the test data is the real conflict.
    hosts = {"node": _host(tmp_path, nvidia_driver_prebuilt_modules=prebuilt)}
    data = _run(tmp_path, monkeypatch, env, hosts)
    outcome = host_outcome(data, "node")
    old = _simulate(env, ["nvidia-headless-no-dkms-580-server", MODULES + RUNNING,
                          "linux-modules-nvidia-580-server-generic"])
    assert old.returncode != 0 and "nvidia-kernel-common-580-server" in old.stdout, old.stdout

    if prebuilt is True:
        # DKMS is not allowed: the run stops, naming the host, the kernel and the fix.
        assert outcome["failed_task"] == (
            "Stop where a kernel has no prebuilt module at the locked driver and DKMS is not "
            "allowed."), outcome
        message = " ".join(outcome["msg"].split())
        assert f"node has kernel(s) {NEXT} installed" in message
        assert "built against the locked driver 580.95.05" in message
        assert f"apt purge linux-image-{NEXT}" in message
        assert "nvidia_driver_prebuilt_modules: auto" in message
        assert RUNNING not in message and "6.8.0-45" not in message
        assert not (tmp_path / "node.json").exists()
        return

    assert outcome["failed_task"] is None, outcome
    chosen = json.loads((tmp_path / "node.json").read_text())
    assert chosen["dkms_kernels"] == [NEXT]
    assert sorted(chosen["wanted"]) == sorted([
        f"nvidia-headless-no-dkms-580-server={LOCKED}", f"nvidia-utils-580-server={LOCKED}",
        # The running kernel's package at the respin built against the locked driver, not +2.
        f"{MODULES}{RUNNING}=6.8.0-49.49+1",
        # The next kernel has none at 580.95.05: DKMS at the locked version, with its headers.
        f"nvidia-dkms-580-server={LOCKED}", f"linux-headers-{NEXT}=6.8.0-50.50"])
    # apt agrees under the role's pin: the whole set installs, the driver stays at LOCKED.
    sim = _simulate(env, chosen["wanted"])
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert f"Inst nvidia-kernel-common-580-server ({LOCKED}" in sim.stdout
    assert NEWER not in sim.stdout

    # A check-mode run afterwards changes nothing (the pin is in place, the lock holds).
    pin = Path(hosts["node"]["nvidia_driver_apt_preferences_file"])
    before = {p: p.stat().st_mtime_ns for p in (pin, tmp_path / "onecat.lock.json")}
    again = host_outcome(_run(tmp_path, monkeypatch, env, hosts, check=True), "node")
    assert again["failed_task"] is None and again["changed"] == [], again
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_a_kernel_without_module_or_headers_stops_the_run_naming_it(tmp_path, monkeypatch):
    env = _apt_root(tmp_path, next_headers=False)
    data = _run(tmp_path, monkeypatch, env, {"node": _host(tmp_path)})
    outcome = host_outcome(data, "node")
    assert outcome["failed_task"] == (
        "Stop where a kernel has neither a prebuilt module at the locked driver nor headers for "
        "DKMS."), outcome
    message = " ".join(outcome["msg"].split())
    assert f"node has kernel {NEXT} installed" in message
    assert f"nor linux-headers-{NEXT} for DKMS" in message
    assert f"apt purge linux-image-{NEXT}" in message and "Nothing was installed." in message


def test_every_kernel_with_its_module_at_the_locked_driver_needs_no_dkms(tmp_path, monkeypatch):
    env = _apt_root(tmp_path, next_headers=False)
    # Only the running kernel is installed: its package at the locked driver, no DKMS at all.
    status = Path(env["DPKG_ADMINDIR"]) / "status"
    status.write_text(status.read_text().replace(
        f"linux-image-{NEXT}\nStatus: install ok installed", f"linux-image-{NEXT}\nStatus: "
        "deinstall ok config-files"))
    data = _run(tmp_path, monkeypatch, env, {"node": _host(tmp_path)})
    assert host_outcome(data, "node")["failed_task"] is None, host_outcome(data, "node")
    chosen = json.loads((tmp_path / "node.json").read_text())
    assert chosen["dkms_kernels"] == []
    assert f"{MODULES}{RUNNING}=6.8.0-49.49+1" in chosen["wanted"]
    assert not [w for w in chosen["wanted"] if w.startswith(("nvidia-dkms", "linux-headers"))]
