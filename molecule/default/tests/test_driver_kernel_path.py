"""onecat-node1 takes a real host's driver path: the kernel module is managed, against the
kernel-edge doubles of tests/kernel_doubles (laid by prepare.yml, unknown to the role).

The planned reboot (nvidia_driver_reboot: true: the driver stage reboots the node itself into the
installed module) is proven once, on fleet-a in molecule/fleet's
test_a_rollout_reboots_one_node_and_restarts_docker_on_the_other_with_no_failed_stream, with the
gateway's hold and the gate and burn-in after it; this file proves the path without it (REBOOT
PENDING, held from serve until a reboot)."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import LOADED_MODULE, driver_userspace, wait_booted

NODE = "onecat-node1"
DRIVER = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/driver.yml"
SERVE = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/serve.yml"
MARKER = "/run/onecat/nvidia-driver-reboot-pending"
UNIT = "/etc/systemd/system/vllm.service"
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/onecat-persistence-mode.conf"


@pytest.fixture(autouse=True)
def _only_node1(host):
    if host.backend.hostname != NODE:
        pytest.skip("the kernel path runs on onecat-node1")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_module_built_for_the_kernel_and_loaded(host):
    kernel = host.file("/etc/onecat-test/kernel-release").content_string.strip()
    userspace = driver_userspace(host)
    built = host.file(f"/var/lib/onecat-test/modules/{kernel}/nvidia-current")
    assert built.content_string.strip() == userspace
    assert host.file(LOADED_MODULE).content_string.strip() == userspace
    assert not host.file(MARKER).exists
    # DKMS needs the running kernel's headers, and the flavour's metapackage brings the next one's.
    assert host.package(f"linux-headers-{kernel}").is_installed
    assert host.package("linux-headers-amd64").is_installed
    assert "GPU 1: Tesla V100" in host.check_output("nvidia-smi -L")


def test_persistence_mode_is_on(host):
    dropin = host.file(DROPIN).content_string.splitlines()
    assert "ExecStart=" in dropin
    exec_start = "ExecStart=/usr/bin/nvidia-persistenced --user nvpd --persistence-mode --verbose"
    assert exec_start in dropin
    assert host.service("nvidia-persistenced").is_running
    modes = host.check_output("nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader")
    assert modes.splitlines() == ["0, Enabled", "1, Enabled"]


def test_reboot_pending_holds_the_host_from_serve_until_it_reboots(host, run_playbook):
    unit_before = host.file(UNIT).content_string
    userspace = driver_userspace(host)
    # The kernel still runs the previous build, as after the packages moved without a reboot.
    host.run(f"echo 535.216.01 > {LOADED_MODULE}")
    run = run_playbook(DRIVER, "--limit", NODE)
    flat = _flat(run.output)
    assert run.rc == 0, run.output[-3000:]
    assert f"Driver/library version mismatch on {NODE}: kernel module 535.216.01 is loaded" in flat
    assert f"REBOOT PENDING on {NODE}" in flat
    marker = host.file(MARKER)
    assert marker.exists
    assert "loaded=535.216.01" in marker.content_string
    assert f"installed={userspace}" in marker.content_string

    # A separate serve.yml run knows nothing of the driver run but the marker: it holds the host.
    run = run_playbook(SERVE, "--limit", NODE)
    flat = _flat(run.output)
    assert run.rc == 2, run.output[-3000:]
    assert f"{NODE} is held out of the rollout: REBOOT PENDING" in flat
    assert host.file(UNIT).content_string == unit_before

    # The reboot (a real restart of the node: /run is a tmpfs) clears the marker, and the boot
    # loads the module built for the running kernel (udev's modalias load): the installed one.
    subprocess.run(["docker", "restart", NODE], check=True, timeout=180, capture_output=True)
    wait_booted(host, 120)
    assert not host.file(MARKER).exists
    assert host.file(LOADED_MODULE).content_string.strip() == userspace

    run = run_playbook(DRIVER, "--limit", NODE)
    assert run.rc == 0, run.output[-3000:]
    assert "REBOOT PENDING" not in run.output
    assert host.file(LOADED_MODULE).content_string.strip() == userspace
    assert "Enabled" in host.check_output(
        "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")

    run = run_playbook(SERVE, "--limit", NODE)
    assert run.rc == 0, run.output[-3000:]
    assert host.run("curl -fsS http://127.0.0.1:8000/health").rc == 0


def test_a_gpu_switched_out_of_persistence_mode_is_switched_back(host, run_playbook):
    """`nvidia-smi -pm 0` by hand (or a repair cut short): the daemon applies its flag at start
    only, so the GPU stays off; the driver stage's stamp sees it and the stage turns it back on."""
    host.run("nvidia-smi -pm 0 -i 1")
    query = "nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader"
    assert host.check_output(query).splitlines() == ["0, Enabled", "1, Disabled"]
    run = run_playbook(DRIVER, "--limit", NODE)
    assert run.rc == 0, run.output[-3000:]
    assert "Turn persistence mode back on for the GPUs that lost it." in run.output
    assert re.search(r"TASK \[nvidia_driver : Turn persistence mode back on[^\n]*\nchanged: "
                     rf"\[{NODE}\]", run.output), run.output[-3000:]
    assert host.check_output(query).splitlines() == ["0, Enabled", "1, Enabled"]
