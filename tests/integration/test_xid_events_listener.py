"""NVML's Xid events on the NVML double (the real pynvml loads it): the event API answers as
nvml.h documents it, and `python3 -m onecat.health.xid_events` (onecat-xid-events.service)
writes an injected Xid to its file, stops cleanly on SIGTERM, and exits with one line when NVML
cannot start (a driver update's "Driver/library version mismatch": systemd starts it later)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
import nvml_double_harness as double


def _scenario(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "events.scenario"
    path.write_text("\n".join([f"include = {double.SCENARIOS / 'healthy_pcie_pair.scenario'}",
                               *lines]) + "\n")
    return path


API = r'''
import json, time, pynvml
out = {}
def code(call):
    try:
        call()
    except pynvml.NVMLError as error:
        return error.value
    return 0
pynvml.nvmlInit()
gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
out["supported0"] = code(lambda: pynvml.nvmlDeviceGetSupportedEventTypes(gpu0))
out["supported1"] = pynvml.nvmlDeviceGetSupportedEventTypes(gpu1)
events = pynvml.nvmlEventSetCreate()
out["register0"] = code(lambda: pynvml.nvmlDeviceRegisterEvents(gpu0, 8, events))
out["register1_all"] = code(lambda: pynvml.nvmlDeviceRegisterEvents(gpu1, 0x10, events))
pynvml.nvmlDeviceRegisterEvents(gpu1, pynvml.nvmlEventTypeXidCriticalError, events)
start = time.monotonic()
out["quiet"] = code(lambda: pynvml.nvmlEventSetWait_v2(events, 300))
out["quiet_s"] = time.monotonic() - start
data = pynvml.nvmlEventSetWait_v2(events, 5000)
out["event"] = [pynvml.nvmlDeviceGetIndex(data.device), data.eventType, data.eventData,
                data.gpuInstanceId, data.computeInstanceId]
out["waited_s"] = time.monotonic() - start
out["again"] = code(lambda: pynvml.nvmlEventSetWait_v2(events, 200))
out["lost"] = code(lambda: pynvml.nvmlEventSetWait_v2(events, 5000))
pynvml.nvmlEventSetFree(events)
pynvml.nvmlShutdown()
print(json.dumps(out))
'''


def test_the_double_delivers_each_xid_once_and_waits_as_nvml_does(libdir: Path,
                                                                   tmp_path: Path) -> None:
    """nvml.h: GetSupportedEventTypes answers the mask; RegisterEvents answers NOT_SUPPORTED (3)
    for a type the GPU does not offer; Wait_v2 sleeps until an event or the timeout and then
    answers TIMEOUT (10); each Xid comes once, with the Xid in eventData and 0xFFFFFFFF instance
    ids without MIG; an Xid from before the registration is not recorded; a GPU that fell off
    the bus answers GPU_IS_LOST (15)."""
    scenario = _scenario(tmp_path, "gpu.0.events = ERR:3",
                         "gpu.1.events = 0xb", "gpu.1.xid_event = 13",
                         "gpu.1.xid_event@1 = 79", "gpu.1.lost@2 = 1")
    done = subprocess.run([sys.executable, "-c", API], env=double.double_env(libdir, scenario),
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["supported0"], out["supported1"]) == (3, 0xB)
    assert (out["register0"], out["register1_all"]) == (3, 3)
    assert out["quiet"] == 10 and out["quiet_s"] >= 0.28
    assert out["event"] == [1, 8, 79, 0xFFFFFFFF, 0xFFFFFFFF]
    assert 0.9 <= out["waited_s"] < 2.0  # blocked until the Xid at 1 s, not the 5 s timeout
    assert out["again"] == 10  # delivered once; the Xid 13 before the registration never
    assert out["lost"] == 15


def _listen(libdir: Path, scenario: Path, events: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "onecat.health.xid_events", "--events-file", str(events),
         "--repair-dir", str(events.parent / "repair"), "--wait-ms", "200"],
        env=double.double_env(libdir, scenario), cwd=double.REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_listener_writes_an_injected_xid_and_stops_cleanly(libdir: Path,
                                                               tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "gpu.0.events = 0x3", "gpu.1.xid_event@1.5 = 79")
    events = tmp_path / "state" / "xid-events.jsonl"
    listener = _listen(libdir, scenario, events)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not events.exists():
            time.sleep(0.1)
        records = [json.loads(line) for line in events.read_text().splitlines()]
    finally:
        listener.send_signal(signal.SIGTERM)
        out, _ = listener.communicate(timeout=30)
    assert listener.returncode == 0, out
    assert [(r["xid"], r["gpu"], r["pci_bus_id"], r["source"]) for r in records] == [
        (79, 1, "00000000:5E:00.0", "nvml-event")]
    assert records[0]["uuid"] == "GPU-9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c60"
    status = json.loads((tmp_path / "state" / "xid-events-status.json").read_text())
    assert status["state"] == "stopped" and status["why"] == "stopped (SIGTERM)"
    assert [d["events"] for d in status["devices"]] == [False, True]
    assert "GPU 0 gives none (offers no Xid events (supported mask 0x3))" in out
    assert "Traceback" not in out


def test_a_driver_library_mismatch_is_one_line_and_an_exit(libdir: Path, tmp_path: Path) -> None:
    events = tmp_path / "xid-events.jsonl"
    listener = _listen(libdir, double.scenario_path("driver_library_mismatch"), events)
    out, _ = listener.communicate(timeout=60)
    assert listener.returncode == 1
    assert out.strip().count("\n") == 0 and "NVML error 18" in out, out
    assert "the node needs its reboot" in out
    status = json.loads((tmp_path / "xid-events-status.json").read_text())
    assert status["state"] == "stopped" and "NVML error 18" in status["why"]
