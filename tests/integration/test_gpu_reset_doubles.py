"""A GPU reset, a reboot and a fault that returns, at the hardware edge's doubles.

The NVML double (tests/nvml_double, the real pynvml loaded on it) with scoped scenario keys
(`KEY!reset`, `KEY!reboot`, `gpu.<i>.recur_after`), the kernel double's `nvidia-smi -r`
(tests/kernel_doubles/nvidia-smi) that refuses while a process holds the GPU's device file and
records the reset where the NVML double reads it, and the stand-in engine holding the device
files as CUDA does. Everything runs on this machine: ONECAT_TEST_RUN_DIR and ONECAT_TEST_DEV_DIR
point the doubles at temporary folders, ONECAT_NVML_DOUBLE_BOOT says when the "node" booted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
import nvml_double_harness as double
from standin_harness import standin

TESTS = Path(__file__).resolve().parents[1]
NVIDIA_SMI = TESTS / "kernel_doubles" / "nvidia-smi"
DRIVER = "535.261.03"

# What the GPUs answer, read through the real pynvml in a fresh process (as the watch reads).
READ = """
import json, pynvml
pynvml.nvmlInit()
out = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
    except pynvml.NVMLError as e:
        out[i] = {"error": e.value}
        continue
    out[i] = {
        "volatile_uncorrected": pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "pending": pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h),
    }
print(json.dumps(out))
"""


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    """A node's edge on this machine: /run (loaded module), the device files, a bin with the
    driver package's version (dpkg-query) and root's uid (id)."""
    run, dev, bin_dir = tmp_path / "run", tmp_path / "dev", tmp_path / "bin"
    (run / "sys" / "module" / "nvidia").mkdir(parents=True)
    (run / "sys" / "module" / "nvidia" / "version").write_text(DRIVER + "\n")
    dev.mkdir()
    for index in (0, 1):
        (dev / f"nvidia{index}").touch()
    bin_dir.mkdir()
    _stub(bin_dir / "dpkg-query", f"echo {DRIVER}-1")
    _stub(bin_dir / "id", "echo 0")
    return {"run": run, "dev": dev, "bin": bin_dir, "tmp": tmp_path}


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _scenario(node: dict[str, Path], *lines: str, at: float | None = None) -> Path:
    """A scenario written now (its mtime is when its faults took effect), or dated `at`."""
    path = node["tmp"] / "node.scenario"
    path.write_text("\n".join(lines) + "\n")
    if at is not None:
        os.utime(path, (at, at))
    return path


def _include(name: str) -> str:
    return f"include = {double.scenario_path(name)}"


def _env(libdir: Path, node: dict[str, Path], scenario: Path | None,
         boot: float = 0) -> dict[str, str]:
    env = {**os.environ,
           "PATH": f"{node['bin']}{os.pathsep}{os.environ['PATH']}",
           "LD_LIBRARY_PATH": str(libdir),
           double.RUN_DIR_ENV: str(node["run"]),
           "ONECAT_TEST_DEV_DIR": str(node["dev"]),
           double.BOOT_ENV: str(boot)}
    env.pop(double.SCENARIO_ENV, None)
    if scenario is not None:
        env[double.SCENARIO_ENV] = str(scenario)
    return env


def _read(libdir: Path, node: dict[str, Path], scenario: Path, boot: float = 0) -> dict:
    done = subprocess.run([sys.executable, "-c", READ], env=_env(libdir, node, scenario, boot),
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return {int(k): v for k, v in json.loads(done.stdout).items()}


def _smi(libdir: Path, node: dict[str, Path], scenario: Path | None, *args: str,
         boot: float = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NVIDIA_SMI), *args], env=_env(libdir, node, scenario, boot),
                          capture_output=True, text=True, check=False, timeout=60)


def _record(node: dict[str, Path], index: int, at: float) -> None:
    """A reset of GPU `index` at `at`, as nvidia-smi -r records it."""
    path = node["run"] / "gpu-reset" / str(index)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{int(at)}\n")
    os.utime(path, (at, at))


def _holder(path: Path) -> subprocess.Popen[str]:
    """A process that holds `path` open (as CUDA holds /dev/nvidiaN) until it is stopped."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; f = open(sys.argv[1]); print('held', flush=True); "
                               "sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)


HEALTHY = {"volatile_uncorrected": 0, "pending": 0}
FAULTY = {"volatile_uncorrected": 1, "pending": 1}


# --- the NVML double's scopes -------------------------------------------------------------------

def test_a_reset_clears_a_reset_fault_of_its_gpu_only_once_it_happened(libdir, node):
    scenario = _scenario(node, _include("ecc_reset_clears"))
    assert _read(libdir, node, scenario) == {0: HEALTHY, 1: FAULTY}
    # Resetting the other GPU clears nothing on GPU 1.
    done = _smi(libdir, node, scenario, "-r", "-i", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _read(libdir, node, scenario) == {0: HEALTHY, 1: FAULTY}
    done = _smi(libdir, node, scenario, "--gpu-reset", "--id=1")
    assert done.returncode == 0, done.stdout + done.stderr
    # Volatile counters read 0 and the retirement took effect: the included healthy values.
    assert _read(libdir, node, scenario) == {0: HEALTHY, 1: HEALTHY}
    # Writing the scenario again injects the fault again (it took effect after that reset).
    time.sleep(0.01)
    scenario = _scenario(node, _include("ecc_reset_clears"))
    assert _read(libdir, node, scenario)[1] == FAULTY


def test_a_reset_recorded_before_the_fault_was_written_does_not_clear_it(libdir, node):
    now = time.time()
    _record(node, 1, now - 100)
    scenario = _scenario(node, _include("ecc_reset_clears"), at=now - 50)
    assert _read(libdir, node, scenario)[1] == FAULTY
    _record(node, 1, now - 10)
    assert _read(libdir, node, scenario)[1] == HEALTHY


def test_a_boot_after_the_fault_clears_a_reset_fault(libdir, node):
    now = time.time()
    scenario = _scenario(node, _include("ecc_reset_clears"), at=now - 50)
    assert _read(libdir, node, scenario, boot=now - 60)[1] == FAULTY
    assert _read(libdir, node, scenario, boot=now - 40)[1] == HEALTHY


def test_a_reboot_fault_survives_a_reset_and_clears_after_a_boot(libdir, node):
    now = time.time()
    scenario = _scenario(node, _include("gpu_lost_needs_reboot"), at=now - 50)
    lost = {"error": 15}  # NVML_ERROR_GPU_IS_LOST
    assert _read(libdir, node, scenario, boot=now - 60) == {0: HEALTHY, 1: lost}
    _record(node, 1, now - 10)  # as if a reset had happened: it does not clear !reboot
    assert _read(libdir, node, scenario, boot=now - 60)[1] == lost
    assert _read(libdir, node, scenario, boot=now - 40) == {0: HEALTHY, 1: HEALTHY}


def test_recur_after_brings_a_cleared_fault_back(libdir, node):
    now = time.time()
    scenario = _scenario(node, _include("ecc_returns_after_reset"), at=now - 100)
    assert _read(libdir, node, scenario)[1] == FAULTY
    _record(node, 1, now - 5)  # cleared 5 s ago: back 20 s after the reset
    assert _read(libdir, node, scenario)[1] == HEALTHY
    _record(node, 1, now - 30)  # cleared 30 s ago: back since 10 s
    assert _read(libdir, node, scenario)[1] == FAULTY
    # A boot clears it the same way, counted from the boot (the reset file is a tmpfs's).
    (node["run"] / "gpu-reset" / "1").unlink()
    assert _read(libdir, node, scenario, boot=now - 5)[1] == HEALTHY
    assert _read(libdir, node, scenario, boot=now - 30)[1] == FAULTY


def test_a_timed_scoped_fault_starts_on_its_timeline_and_a_reset_before_it_clears_nothing(
        libdir, node, monkeypatch):
    now = time.time()
    scenario = _scenario(node, _include("healthy_pcie_pair"),
                         "gpu.1.ecc.volatile.uncorrected@30!reset = 1")
    monkeypatch.setenv("ONECAT_NVML_DOUBLE_START", str(now - 60))  # the fault arose at now - 30
    _record(node, 1, now - 40)
    assert _read(libdir, node, scenario)[1]["volatile_uncorrected"] == 1
    _record(node, 1, now - 20)
    assert _read(libdir, node, scenario)[1]["volatile_uncorrected"] == 0


def test_a_scoped_fault_outranks_a_later_unscoped_key(libdir, node):
    scenario = _scenario(node, _include("ecc_reset_clears"), "gpu.1.ecc.volatile.uncorrected = 0")
    assert _read(libdir, node, scenario)[1]["volatile_uncorrected"] == 1


@pytest.mark.parametrize("line", ["gpu.1.retired.pending!later = 1", "device_count!reset = 1"])
def test_a_bad_scope_fails_nvml_init(libdir, node, line):
    scenario = _scenario(node, _include("healthy_pcie_pair"), line)
    done = subprocess.run([sys.executable, "-c", READ], env=_env(libdir, node, scenario),
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode != 0
    assert "nvml double:" in done.stderr


# --- nvidia-smi -r ----------------------------------------------------------------------------

def test_reset_is_refused_while_a_process_holds_the_gpu_and_names_it(libdir, node):
    scenario = _scenario(node, _include("healthy_pcie_pair"))
    holder = _holder(node["dev"] / "nvidia1")
    try:
        done = _smi(libdir, node, scenario, "-r", "-i", "1")
        assert done.returncode == 255
        assert done.stdout.startswith("The following GPUs could not be reset:\n"
                                      "  GPU 00000000:5E:00.0: In use by another client\n")
        assert "1 device is currently being used by one or more other processes" in done.stdout
        assert f"pid {holder.pid} (python" in done.stderr
        assert not (node["run"] / "gpu-reset" / "1").exists()
        # The other GPU is free: it resets alone.
        assert _smi(libdir, node, scenario, "-r", "-i", "0").returncode == 0
    finally:
        _release(holder)
    before = int(time.time())
    done = _smi(libdir, node, scenario, "-r", "-i", "1")
    assert (done.returncode, done.stdout) == (0, "GPU 00000000:5E:00.0 was successfully reset.\n")
    recorded = int((node["run"] / "gpu-reset" / "1").read_text())
    assert before <= recorded <= int(time.time())


def test_a_pair_resets_only_when_both_gpus_are_free(libdir, node):
    scenario = _scenario(node, _include("healthy_pcie_pair"))
    holder = _holder(node["dev"] / "nvidia0")
    try:
        for args in (["-r"], ["-r", "-i", "0,1"]):
            done = _smi(libdir, node, scenario, *args)
            assert done.returncode == 255, done.stdout
            assert "GPU 00000000:3B:00.0: In use by another client" in done.stdout
            assert not (node["run"] / "gpu-reset").exists()
    finally:
        _release(holder)
    done = _smi(libdir, node, scenario, "-r", "-i", "0,1")
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["GPU 00000000:3B:00.0 was successfully reset.",
                                        "GPU 00000000:5E:00.0 was successfully reset."]
    assert sorted(p.name for p in (node["run"] / "gpu-reset").iterdir()) == ["0", "1"]


def test_a_lost_gpu_cannot_be_reset(libdir, node):
    scenario = _scenario(node, _include("gpu_lost_needs_reboot"))
    done = _smi(libdir, node, scenario, "-r", "-i", "1")
    assert done.returncode == 15
    assert done.stdout == ("Unable to determine the device handle for GPU 0000:5E:00.0: GPU is "
                           "lost.  Reboot the system to recover this GPU\n")
    assert not (node["run"] / "gpu-reset").exists()
    assert _smi(libdir, node, scenario, "-r").returncode == 15  # every GPU: GPU 1 among them
    # After a reboot it is back, and resets.
    assert _smi(libdir, node, scenario, "-r", "-i", "1", boot=time.time()).returncode == 0


def test_a_lost_gpu_the_scenario_says_a_reset_recovers(libdir, node):
    scenario = _scenario(node, _include("healthy_pcie_pair"), "gpu.1.lost!reset = 1",
                         "gpu.1.reset_recovers_lost = 1")
    assert _read(libdir, node, scenario)[1] == {"error": 15}
    done = _smi(libdir, node, scenario, "-r", "-i", "1")
    assert done.returncode == 0, done.stdout
    assert _read(libdir, node, scenario)[1] == HEALTHY


def test_reset_needs_root_a_known_gpu_and_the_driver(libdir, node):
    scenario = _scenario(node, _include("healthy_pcie_pair"))
    _stub(node["bin"] / "id", "echo 1000")
    done = _smi(libdir, node, scenario, "-r", "-i", "1")
    assert done.returncode == 4
    assert "GPU 00000000:5E:00.0: Insufficient Permissions" in done.stdout
    _stub(node["bin"] / "id", "echo 0")
    assert _smi(libdir, node, scenario, "-r", "-i", "2").stdout == "No devices were found\n"
    assert _smi(libdir, node, scenario, "-r", "-i", "2").returncode == 6
    assert _smi(libdir, node, scenario, "-r", "-i").returncode == 2
    (node["run"] / "sys" / "module" / "nvidia" / "version").unlink()
    assert _smi(libdir, node, scenario, "-r", "-i", "1").returncode == 9
    assert not (node["run"] / "gpu-reset").exists()


def test_the_other_queries_read_the_run_dir_too(libdir, node):
    (node["run"] / "persistence-mode").write_text("Enabled\n")
    done = _smi(libdir, node, None, "--query-gpu=index,persistence_mode", "--format=csv,noheader")
    assert (done.returncode, done.stdout) == (0, "0, Enabled\n1, Enabled\n")
    assert _smi(libdir, node, None, "-L").stdout.count("Tesla V100-PCIE-16GB") == 2


# --- the stand-in engine holds the device files --------------------------------------------------

def test_the_standin_engine_holds_the_gpus_until_it_exits(libdir, node):
    scenario = _scenario(node, _include("healthy_pcie_pair"))
    (node["dev"] / "nvidiactl").touch()  # not a GPU: not held
    with standin(node["tmp"], env={"STANDIN_DEV_DIR": str(node["dev"])}) as server:
        fds = {os.path.realpath(f"/proc/{server.process.pid}/fd/{fd}")
               for fd in os.listdir(f"/proc/{server.process.pid}/fd")}
        assert {str(node["dev"] / "nvidia0"), str(node["dev"] / "nvidia1")} <= fds
        assert str(node["dev"] / "nvidiactl") not in fds
        done = _smi(libdir, node, scenario, "-r")
        assert done.returncode == 255
        assert "2 devices are currently being used" in done.stdout
        assert f"pid {server.process.pid} " in done.stderr
    assert _smi(libdir, node, scenario, "-r").returncode == 0
