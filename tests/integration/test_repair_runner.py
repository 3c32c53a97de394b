"""The repair runner's hardware edge, for real: `onecat.repair`'s NodeHost resets GPUs with the
nvidia-smi double and judges them through the real pynvml on the NVML double, while an "engine"
process holds the GPUs' device files as CUDA does. The ladder stops it before the reset (a
reset is refused while it runs), the reset clears the `!reset` fault, the look is clean; a GPU
lost until a boot makes the reset fail and the ladder climb to the reboot.

systemd, the gateway, the gate and the burn-in are the fleet scenario's (molecule/fleet,
test_rollout_repair.py); here the runner runs in a subprocess per ladder, on this machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
import nvml_double_harness as double

REPO = Path(__file__).resolve().parents[2]
NVIDIA_SMI = REPO / "tests" / "kernel_doubles" / "nvidia-smi"
DRIVER = "535.261.03"

# One ladder in a fresh process (pynvml loads the double from LD_LIBRARY_PATH once per process):
# the real NodeHost for the reset, the look and the boot token; the engine is a process holding
# the device files (started and stopped by the test's host, as systemd starts the unit).
LADDER = r"""
import argparse, json, subprocess, sys
from pathlib import Path
from onecat.repair.__main__ import NodeHost
from onecat.repair.run import Ladder, new_progress

dev, run_dir, rungs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
HOLD = ("import sys; fs = [open(p) for p in sys.argv[1:]]; print('held', flush=True); "
        "sys.stdin.read()")

class Node(NodeHost):
    engine = None
    def start_engine(self):
        self.engine = subprocess.Popen([sys.executable, "-c", HOLD, str(dev / "nvidia0"),
                                        str(dev / "nvidia1")], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
        self.engine.stdout.readline()
    def stop_engine(self):
        if self.engine:
            self.engine.stdin.close(); self.engine.wait(10); self.engine = None
    def take_lease(self, reason): return True, "granted"
    def release_lease(self): pass
    def wait_idle(self): return None
    def gate(self): return True, "ready"
    def burn_in(self): return True, "passed", []
    def admit(self): pass
    def reboot(self):
        self.rebooted = True
        return None

args = argparse.Namespace(node="node", api_key_file=Path("/nonexistent"),
                          serving_record=Path("/nonexistent"), lease_token_file=None,
                          nvidia_smi=sys.argv[4], expected_gpus=2, device_dir=dev,
                          boot_token=run_dir / "onecat-repair" / "boot",
                          state_dir=run_dir / "repair", monitor_units=[],
                          agent_drain_file=run_dir / "gateway" / "repair-drain")
host = Node(args)
host.start_engine()
readings, findings = host.look()
order = {"id": "1", "rungs": rungs, "reason": "test", "faults": [
    f for f in findings if f["severity"] == "error"]}
held = host.reset_gpus([0, 1])
ladder = Ladder(host, new_progress(order, readings, 0), lambda p: None, print, node="node",
                sleep=lambda s: None)
ended = ladder.run()
print(json.dumps({"before": [f["code"] for f in findings], "held_reset": held,
                  "ended": ended, "tried": ladder.progress.get("tried"),
                  "after": [f["code"] for f in host.look()[1]],
                  "drain": args.agent_drain_file.read_text()
                  if args.agent_drain_file.exists() else None}))
host.stop_engine()
"""


def _ladder(libdir: Path, tmp_path: Path, fault: str, rungs: str) -> dict:
    run, dev, bin_dir = tmp_path / "run", tmp_path / "dev", tmp_path / "bin"
    (run / "sys" / "module" / "nvidia").mkdir(parents=True)
    (run / "sys" / "module" / "nvidia" / "version").write_text(DRIVER + "\n")
    # nvidia-persistenced runs (the driver stage enables it): a reset is refused while it holds.
    (run / "persistence-mode").write_text("Enabled\n")
    dev.mkdir()
    for index in (0, 1):
        (dev / f"nvidia{index}").touch()
    bin_dir.mkdir()
    # The node's package database and root's uid, as nvidia-smi's double asks them.
    for name, body in (("dpkg-query", f"echo {DRIVER}-1"), ("id", "echo 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    scenario = tmp_path / "node.scenario"
    scenario.write_text(f"include = {double.scenario_path('healthy_pcie_pair')}\n{fault}\n")
    env = {**double.double_env(libdir, scenario),
           "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "ONECAT_TEST_RUN_DIR": str(run), "ONECAT_TEST_DEV_DIR": str(dev)}
    done = subprocess.run([sys.executable, "-c", LADDER, str(dev), str(run), rungs,
                           str(NVIDIA_SMI)], env=env, capture_output=True, text=True,
                          check=False, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    result["persistence"] = {p.name: p.read_text().strip() for p in run.glob("persistence-mode*")}
    return result


def test_the_ladder_stops_the_engine_resets_the_pair_and_the_fault_is_gone(libdir, tmp_path):
    result = _ladder(libdir, tmp_path, "gpu.1.ecc.volatile.uncorrected!reset = 1\n"
                                       "gpu.1.retired.pending!reset = 1", "reset")
    assert {"ecc_volatile_uncorrected", "retired_pages_pending"} <= set(result["before"])
    # A reset while the engine holds the GPUs is refused (the ladder never does that).
    refused, why = result["held_reset"]
    assert not refused and "In use by another client" in why, why
    # The real tool names no process: the runner does, for the operator.
    assert "(held by GPU 0: pid " in why and "GPU 1: pid " in why, why
    assert result["ended"] == "readmitted", result
    # Taken out at the gateway once leased (the agent answers it while the watch says up).
    assert result["drain"] == "drain #onecat-repair: repairing: test\n", result["drain"]
    assert result["tried"][0] == {**result["tried"][0], "rung": "reset", "outcome": "cleared"}
    assert result["after"] == [], result
    # Persistence mode was lifted for the reset and is back on both GPUs.
    assert result["persistence"] == {"persistence-mode": "Enabled", "persistence-mode.0": "Enabled",
                                     "persistence-mode.1": "Enabled"}, result["persistence"]


def test_persistence_mode_blocks_a_reset_until_it_is_lifted(libdir, tmp_path):
    """The double as the real tool (NVIDIA/NVSentinel#1690): "In use by another client" while
    persistence mode holds the GPU; `-pm 0` lets the same reset through."""
    run, bin_dir = tmp_path / "run", tmp_path / "bin"
    (run / "sys" / "module" / "nvidia").mkdir(parents=True)
    (run / "sys" / "module" / "nvidia" / "version").write_text(DRIVER + "\n")
    (run / "persistence-mode").write_text("Enabled\n")
    bin_dir.mkdir()
    for name, body in (("dpkg-query", f"echo {DRIVER}-1"), ("id", "echo 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ONECAT_TEST_RUN_DIR": str(run),
           "ONECAT_TEST_DEV_DIR": str(tmp_path / "dev")}

    def smi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(NVIDIA_SMI), *args], env=env, capture_output=True,
                              text=True, check=False, timeout=60)

    refused = smi("-r", "-i", "1")
    assert refused.returncode == 255 and "In use by another client" in refused.stdout
    assert smi("--query-gpu=index,persistence_mode", "--format=csv,noheader", "-i", "1"
               ).stdout == "1, Enabled\n"
    lifted = smi("-pm", "0", "-i", "1")
    assert lifted.returncode == 0 and "All done." in lifted.stdout
    assert smi("--query-gpu=index,persistence_mode", "--format=csv,noheader").stdout == \
        "0, Enabled\n1, Disabled\n"
    done = smi("-r", "-i", "1")
    assert done.returncode == 0 and "was successfully reset" in done.stdout, done.stdout
    assert smi("-r", "-i", "0").returncode == 255  # GPU 0 is still held


def test_a_gpu_lost_until_a_boot_fails_the_reset_and_climbs_to_the_reboot(libdir, tmp_path):
    result = _ladder(libdir, tmp_path, "gpu.1.lost!reboot = 1", "reset,reboot")
    assert "gpu_lost" in result["before"], result
    assert result["ended"] == "rebooting", result
    assert "GPU is lost" in result["tried"][0]["outcome"], result["tried"]
    # Without the reboot rung the node is held, with the reason an operator needs.
    held = _ladder(libdir, tmp_path / "again", "gpu.1.lost!reboot = 1", "reset")
    assert held["ended"] == "failed" and "gpu_lost" in held["after"], held


def _watch(libdir: Path, tmp_path: Path, *extra: str) -> tuple[str, dict]:
    """One look of the watch on ecc_reset_clears, acting with the repair ladder."""
    (tmp_path / "serving.json").write_text('{"url": "http://127.0.0.1:9", '
                                           '"served_model_name": "m"}')
    scenario = "ecc_reset_clears"
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(tmp_path / "state"),
         "--verdict-file", str(tmp_path / "verdict.json"), "--metrics-file",
         str(tmp_path / "none" / "onecat.prom"), "--kernel-log",
         str(double.kernel_log(scenario)), "--boot-id-file", str(tmp_path / "boot"),
         "--serving-record", str(tmp_path / "serving.json"), "--act", "--agent-file",
         str(tmp_path / "agent"),
         "--engine-unit", "onecat-no-such-engine.service",
         "--repair-unit", "onecat-no-such-repair.service", "--repair-dir",
         str(tmp_path / "repair"), *extra],
        env=double.double_env(libdir, scenario), capture_output=True, text=True, check=False,
        cwd=REPO, timeout=120)
    return done.stdout + done.stderr, json.loads((tmp_path / "verdict.json").read_text())


def test_the_watch_orders_a_reset_for_the_card_and_says_so(libdir, tmp_path):
    out, verdict = _watch(libdir, tmp_path)
    assert verdict["mode"] == "draining", out
    out, verdict = _watch(libdir, tmp_path)
    assert "draining -> repairing: reset after: GPU 1" in out, out
    order = json.loads((tmp_path / "repair" / "order.json").read_text())
    assert order["rungs"] == ["reset"] and order["fault_seen"], order
    assert [(c["index"], c["serial"]) for c in order["cards"]] == [(1, "0323117011202")], order
    assert {f["code"] for f in order["faults"]} == {"ecc_volatile_uncorrected",
                                                    "retired_pages_pending"}
    # No such runner unit here: the node is held with the reason, not left repairing blind.
    assert verdict["mode"] == "held", out
    assert "the repair runner (onecat-repair.service) did not start" in verdict["reason"]
    assert (tmp_path / "agent").read_text().startswith("maint down #onecat-watch held")


def test_a_fault_back_on_a_repaired_card_needs_service_with_its_report(libdir, tmp_path):
    (tmp_path / "repair").mkdir()
    (tmp_path / "repair" / "history.json").write_text(json.dumps({"repairs": [{
        "at": time.time() - 86400, "outcome": "readmitted", "rung": "reset", "fault": "ECC",
        "cards": [{"index": 1, "serial": "0323117011202"}]}]}))
    _watch(libdir, tmp_path)
    out, verdict = _watch(libdir, tmp_path)
    assert verdict["mode"] == "service", out
    report = json.loads((tmp_path / "repair" / "service-required.json").read_text())
    assert [c["serial"] for c in report["cards"]] == ["0323117011202"], report
    assert report["cards"][0]["ecc"]["volatile"]["uncorrected"] == 1, report
    assert report["earlier_repair"]["rung"] == "reset"
    assert (tmp_path / "agent").read_text().startswith(
        "maint down #onecat-watch service required: service required: GPU 1 serial "
        "0323117011202")
    assert not (tmp_path / "repair" / "order.json").exists()  # no reset for a card that failed
