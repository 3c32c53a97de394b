"""The driver and runtime stamps see the host state their stages set outside files and packages:
persistence mode of every GPU (the driver stage's: nvidia-persistenced keeps it on) and the NVIDIA
devices' /dev/char links (the runtime stage's: GPU containers keep their devices across a
daemon-reload only with them). A host where either was undone by hand runs that stage again,
and the runtime stage puts a lost link back.

Real ansible-playbook, the real stage_stamp module and the roles' own lists of what they manage
(tasks/managed.yml); the GPUs are the project's nvidia-smi double (tests/kernel_doubles), the
device folder is a temporary one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from .ansible_run import REPO, host_outcome, run_playbook

NVIDIA_SMI = REPO / "tests" / "kernel_doubles" / "nvidia-smi"
DRIVER = "535.216.01"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def host(tmp_path: Path) -> dict:
    """A node's edge: a loaded driver with nvidia-persistenced's persistence mode (the double's
    /run), its nvidia-smi first on PATH, and a device folder with the NVIDIA devices' links."""
    run = tmp_path / "run"
    (run / "sys" / "module" / "nvidia").mkdir(parents=True)
    (run / "sys" / "module" / "nvidia" / "version").write_text(DRIVER + "\n")
    (run / "persistence-mode").write_text("Enabled\n")
    # The double asks dpkg-query for the driver package's version and id for root (-pm).
    stubs = tmp_path / "stubs"
    _script(stubs / "dpkg-query", f"echo {DRIVER}-1")
    _script(stubs / "id", "echo 0")
    smi = _script(tmp_path / "bin" / "nvidia-smi",
                  f'PATH="{stubs}:$PATH" ONECAT_TEST_RUN_DIR="{run}" exec "{NVIDIA_SMI}" "$@"')
    dev = tmp_path / "dev"
    (dev / "char").mkdir(parents=True)
    for index in (0, 1):
        (dev / f"nvidia{index}").touch()
        (dev / "char" / f"195:{index}").symlink_to(f"../nvidia{index}")
    (dev / "nvidiactl").touch()
    (dev / "char" / "195:255").symlink_to("../nvidiactl")
    (dev / "null").touch()
    (dev / "char" / "1:3").symlink_to("../null")
    hvars = {"container_runtime_dev_dir": str(dev),
             "nvidia_driver_sysfs_root": str(run / "sys"),
             "container_runtime_sysfs_root": str(run / "sys"),
             "nvidia_driver_reboot_marker": str(tmp_path / "reboot-pending")}
    return {"tmp": tmp_path, "bin": smi.parent, "smi": smi, "dev": dev, "vars": hvars}


def _stamps(host: dict, action: str) -> dict:
    data = run_playbook("stamp_host_state.yml", {"h": {**host["vars"], "stamp_action": action}},
                        host["tmp"], check=False, path_first=host["bin"])
    outcome = host_outcome(data, "h")
    assert outcome["failed_task"] is None, outcome
    if action == "record":
        return json.loads((host["tmp"] / "h.managed.json").read_text())
    return {stage: json.loads((host["tmp"] / f"{stage}.check.json").read_text())
            for stage in ("driver", "runtime")}


def test_the_roles_hand_persistence_mode_and_the_dev_char_links_to_their_stamps(host) -> None:
    managed = _stamps(host, "record")
    assert managed["driver"]["gpus"] == ["persistence_mode"]
    assert managed["runtime"]["links"] == [f"{host['dev']}/char -> {host['dev']}/nvidia*"]
    stamp = json.loads((host["tmp"] / "stamps" / "driver.json").read_text())
    assert stamp["fingerprint"]["gpu:persistence_mode"] == "0 Enabled, 1 Enabled"
    stamp = json.loads((host["tmp"] / "stamps" / "runtime.json").read_text())
    assert stamp["fingerprint"][f"link:{managed['runtime']['links'][0]}"] == (
        "3 links: 195:0 -> ../nvidia0, 195:1 -> ../nvidia1, 195:255 -> ../nvidiactl")
    verdicts = _stamps(host, "check")
    assert verdicts["driver"]["current"] and verdicts["runtime"]["current"], verdicts


def test_persistence_mode_turned_off_runs_the_driver_stage_again(host) -> None:
    _stamps(host, "record")
    off = subprocess.run([str(host["smi"]), "-pm", "0", "-i", "1"], capture_output=True,
                         text=True, check=True)
    assert "Disabled persistence mode for GPU 1." in off.stdout
    verdicts = _stamps(host, "check")
    assert not verdicts["driver"]["current"], verdicts
    assert ("gpu:persistence_mode: 0 Enabled, 1 Enabled -> 0 Enabled, 1 Disabled"
            in verdicts["driver"]["reason"]), verdicts
    assert verdicts["runtime"]["current"], verdicts  # not the runtime stage's business
    subprocess.run([str(host["smi"]), "-pm", "1", "-i", "1"], capture_output=True, check=True)
    assert _stamps(host, "check")["driver"]["current"]


def test_a_kernel_installed_since_runs_the_driver_stage_again(host) -> None:
    """unattended-upgrades installs a kernel between runs: it needs its NVIDIA module before it
    boots (Ubuntu's prebuilt module package, tasks/modules.yml), so the driver stage runs."""
    kernels = host["tmp"] / "dpkg-kernels"
    kernels.write_text("linux-image-6.1.0-28-amd64\t6.1.119-1\tii \n")
    # dpkg-query answers for this machine's packages, plus the host's kernel packages.
    _script(host["bin"] / "dpkg-query", f'cat "{kernels}"; exec /usr/bin/dpkg-query "$@"')
    managed = _stamps(host, "record")
    assert "linux-image-[0-9]*" in managed["driver"]["packages"], managed
    assert _stamps(host, "check")["driver"]["current"]
    with kernels.open("a") as more:
        more.write("linux-image-6.1.0-31-amd64\t6.1.128-1\tii \n")
    verdicts = _stamps(host, "check")
    assert not verdicts["driver"]["current"], verdicts
    assert "linux-image-6.1.0-31-amd64 ii 6.1.128-1" in verdicts["driver"]["reason"], verdicts
    assert verdicts["runtime"]["current"], verdicts


def test_a_removed_dev_char_link_runs_the_runtime_stage_again(host) -> None:
    _stamps(host, "record")
    (host["dev"] / "char" / "195:1").unlink()
    verdicts = _stamps(host, "check")
    assert not verdicts["runtime"]["current"], verdicts
    assert "-> 2 links: 195:0 -> ../nvidia0, 195:255 -> ../nvidiactl" in (
        verdicts["runtime"]["reason"]), verdicts
    assert verdicts["driver"]["current"], verdicts
    # Another device's link is udev's business, not the stage's.
    (host["dev"] / "char" / "195:1").symlink_to("../nvidia1")
    (host["dev"] / "char" / "1:3").unlink()
    assert _stamps(host, "check")["runtime"]["current"]


NVIDIA_CTK = """echo "$@" >> {calls}
# As nvidia-ctk does: a /dev/char/<major>:<minor> link for each NVIDIA device file.
find "{dev}" -maxdepth 2 -type c -path "{dev}/nvidia*" | while read -r device; do
  set -- $(stat -c '%t %T' "$device")
  ln -sfn "../${{device#{dev}/}}" "{dev}/char/$((0x$1)):$((0x$2))"
done"""


@pytest.mark.skipif(os.geteuid() != 0, reason="device files need root (mknod)")
def test_the_runtime_stage_puts_a_lost_dev_char_link_back(tmp_path) -> None:
    # The stamp runs the stage again when a link was removed; the stage must then make it, not
    # only when its udev rule is new (nvidia-ctk is a double that makes the links it would).
    sysfs = tmp_path / "sys"
    (sysfs / "module" / "nvidia").mkdir(parents=True)
    dev = tmp_path / "dev"
    (dev / "char").mkdir(parents=True)
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        os.mknod(dev / name, 0o600 | stat.S_IFCHR, os.makedev(195, minor))
    calls = tmp_path / "calls"
    _script(tmp_path / "bin" / "nvidia-ctk", NVIDIA_CTK.format(calls=calls, dev=dev))
    hosts = {"h": {"container_runtime_sysfs_root": str(sysfs),
                   "container_runtime_dev_dir": str(dev),
                   "container_runtime_dev_char_rule_file": str(tmp_path / "rules" / "71.rules")}}
    made = "Create the /dev/char links now, not only at the driver's next bind."

    def run() -> list[str]:
        data = run_playbook("dev_char.yml", hosts, tmp_path, check=False,
                            path_first=tmp_path / "bin")
        outcome = host_outcome(data, "h")
        assert outcome["failed_task"] is None, outcome
        return outcome["changed"]

    assert made in run()  # the rule is new
    links = sorted(p.name for p in (dev / "char").iterdir())
    assert links == ["195:0", "195:1", "195:255"]
    assert made not in run()  # nothing to do
    (dev / "char" / "195:1").unlink()
    assert made in run()  # a device without its link
    assert os.readlink(dev / "char" / "195:1") == "../nvidia1"
    assert calls.read_text().splitlines() == ["system create-dev-char-symlinks --create-all"] * 2
