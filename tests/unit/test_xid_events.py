"""NVML's Xid events beside the kernel log (issue 47, onecat/health/xid_events.py): the file the
listener keeps (bounded, one JSON line per event), what the watch reads of it, how an Xid both
sources saw is counted once, and the listener's loop on a fake pynvml that answers as nvml.h
documents (TIMEOUT when nothing happened, NOT_SUPPORTED, GPU_IS_LOST, error 18 at nvmlInit)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from onecat.health import gpu_lock, xid_events
from onecat.health.nvml import log_cursor, parse_xid
from onecat.watch.deltas import change_findings
from onecat.watch.metrics import render

BUS = "00000000:3B:00.0"


def _event(xid: int, uptime: float, bus: str = BUS, boot: str = "b1") -> dict[str, Any]:
    return xid_events.record(xid=xid, gpu=0, uuid="GPU-0", pci_bus_id=bus, boot_id=boot,
                             now=1.7e9 + uptime, uptime=uptime)


def test_bus_ids_of_every_spelling_are_one() -> None:
    assert xid_events.bus_id("0000:3b:00") == BUS
    assert xid_events.bus_id(b"00000000:3B:00.0") == BUS
    assert xid_events.bus_id("garbage") is None


def test_the_file_keeps_the_newest_records_and_skips_broken_lines(tmp_path: Path) -> None:
    path = tmp_path / "xid-events.jsonl"
    events = xid_events.EventsFile(path, max_records=3)
    for i in range(7):
        events.append(_event(79, float(i)))
    # Past twice the bound the newest three replace the file (one rename): 7 = 3 + 4 appended.
    kept = [e["uptime"] for e in xid_events.read_records(path)]
    assert kept == [4.0, 5.0, 6.0]
    assert not list(tmp_path.glob(".xid-events.jsonl.*"))
    with path.open("a") as handle:
        handle.write('{"kind": "xid", "xid": "79"}\nnot json\n{"kind": "xid", "xid": 4')
    assert [e["uptime"] for e in xid_events.read_records(path)] == kept
    # A listener started again counts what is there, and still trims.
    # A listener started again ends the line cut short, counts what is there, and trims.
    again = xid_events.EventsFile(path, max_records=3)
    again.append(_event(79, 7.0))
    # Six lines were there (three broken): the seventh trims the file to the newest three.
    assert [e["uptime"] for e in xid_events.read_records(path)] == [5.0, 6.0, 7.0]
    assert path.read_text().count("\n") == 3
    for i in range(8, 12):
        again.append(_event(79, float(i)))
    assert len(path.read_text().splitlines()) <= 6
    assert xid_events.read_records(path)[-1]["uptime"] == 11.0


def test_an_xid_both_sources_saw_is_counted_once() -> None:
    # Two log lines, two events: the same two occurrences.
    assert xid_events.count_once(2, [100.0, 200.0], [100.4, 201.0]) == (2, True, True)
    # The log lost one line: the event far from every line is one more.
    assert xid_events.count_once(1, [100.0], [100.2, 300.0]) == (2, True, True)
    # Only NVML saw it.
    assert xid_events.count_once(0, None, [300.0]) == (1, False, True)
    # Lines without times: the events are taken as theirs, the sources not added up.
    assert xid_events.count_once(2, None, [10.0, 20.0]) == (2, True, True)
    assert xid_events.count_once(1, None, [10.0, 20.0]) == (2, True, True)
    # A kernel clock that drifted minutes from CLOCK_MONOTONIC: paired, not added up.
    assert xid_events.count_once(2, [1000.0, 2000.0], [1400.0, 2400.0]) == (2, True, True)
    assert xid_events.count_once(1, [1000.0], [1400.0, 2400.0]) == (2, True, True)
    assert xid_events.count_once(3, [1.0], []) == (3, True, False)


def _line(at: float, code: int) -> str:
    return f"[{at:12.6f}] NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=x, fault\n"


def _readings(log: str, after: float | None, events: list[dict] | None,
              state: str = "listening") -> dict:
    return {"boot_id": "b1", "gpus": [], "xid_events": parse_xid(log, after, keep_times=True),
            "xid_cursor": log_cursor(log),
            "xid_nvml": None if events is None else {"state": state, "events": events}}


def test_rotated_log_and_missing_lines_still_report_the_new_fatal_xid() -> None:
    """Issue 47: the previous look saw three Xid 74 lines; the log was then rotated (the old
    lines gone) and lost the new Xid 79's line too (a ring wrap, Storage=volatile), while
    NVML's event for it is in the listener's file: the new fatal Xid is reported, once."""
    old = _line(100, 74) + _line(200, 74) + _line(300, 74)
    before = _readings(old, None, [])
    now = _readings("[ 400.000000] something else\n", 300.0, [_event(79, 350.0)])
    [finding] = [f for f in change_findings(before, now) if f.code == "xid"]
    assert finding.severity == "error" and finding.xid == 79 and finding.gpu == BUS
    assert finding.message.startswith("NVML reported Xid 79 (GPU has fallen off the bus) 1 more")
    assert "the kernel log holds no line of it" in finding.message


def test_a_line_and_its_event_are_one_finding_saying_both_sources() -> None:
    before = _readings(_line(100, 13), None, [])
    now = _readings(_line(100, 13) + _line(500, 48), 100.0, [_event(48, 500.8)])
    [finding] = [f for f in change_findings(before, now) if f.code == "xid"]
    assert "the kernel logged Xid 48" in finding.message and "1 more time(s)" in finding.message
    assert "NVML's Xid events saw it too" in finding.message


def test_a_listener_that_does_not_run_is_no_finding() -> None:
    before = _readings(_line(100, 13), None, [])
    now = _readings(_line(100, 13), 100.0, [], state="not running")
    assert change_findings(before, now) == []
    text = render(now, "healthy", [])
    assert 'onecat_xid_source_up{source="nvml_events"} 0' in text
    assert 'onecat_xid_source_up{source="kernel_log"} 1' in text


def _status(tmp_path: Path, **fields: Any) -> Path:
    events = tmp_path / "xid-events.jsonl"
    document = {"state": "listening", "pid": 4242, "boot_id": "b1", "devices": [
        {"gpu": 0, "pci_bus_id": BUS, "events": True, "why": ""},
        {"gpu": 1, "pci_bus_id": "00000000:5E:00.0", "events": False,
         "why": "NVML error 3: Not Supported (no Xid events from this GPU)"}], **fields}
    xid_events.status_path(events).write_text(json.dumps(document))
    return events


def test_the_watch_reads_this_boots_events_after_its_cursor(tmp_path: Path) -> None:
    events = _status(tmp_path)
    file = xid_events.EventsFile(events)
    for entry in (_event(79, 50.0, boot="b0"), _event(13, 10.0), _event(48, 20.0)):
        file.append(entry)
    seen = xid_events.look_at(events, "b1", None, alive=lambda pid: pid == 4242)
    assert [e["xid"] for e in seen["events"]] == [13, 48] and seen["cursor"] == 20.0
    assert seen["state"] == "listening"
    assert seen["without_events"] == [{"gpu": 1, "pci_bus_id": "00000000:5E:00.0",
                                       "why": "NVML error 3: Not Supported (no Xid events "
                                              "from this GPU)"}]
    again = xid_events.look_at(events, "b1", seen["cursor"], alive=lambda pid: True)
    assert again["events"] == [] and again["cursor"] == 20.0


def test_a_listener_that_died_or_never_ran_is_a_missing_source(tmp_path: Path) -> None:
    events = _status(tmp_path)
    assert xid_events.look_at(events, "b1", None, alive=lambda pid: False)["state"] == \
        "not running"
    assert xid_events.look_at(tmp_path / "none.jsonl", "b1", None)["state"] == "not running"
    stale = _status(tmp_path, boot_id="b0")
    assert xid_events.look_at(stale, "b1", None, alive=lambda pid: True)["state"] == \
        "not running"
    stopped = _status(tmp_path, state="stopped", why="NVML error 18")
    seen = xid_events.look_at(stopped, "b1", None)
    assert (seen["state"], seen["why"]) == ("stopped", "NVML error 18")


# ---- the listener's loop on a fake pynvml -------------------------------------------------

class FakeError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """pynvml's surface the listener uses; answers as nvml.h documents."""

    NVMLError = FakeError

    def __init__(self, supported: list[int | None], waits: list[Any], init: int = 0) -> None:
        self.supported = supported
        self.waits = list(waits)
        self.init = init
        self.calls: list[str] = []
        self.handles = [object() for _ in supported]

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init:
            raise FakeError(self.init)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.calls.append("free")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.supported)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return self.handles[index]

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return f"GPU-{self.handles.index(handle)}"

    def nvmlDeviceGetPciInfo(self, handle: object) -> Any:
        class Pci:
            busId = f"00000000:{0x3B + self.handles.index(handle):02X}:00.0".encode()
        return Pci()

    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int:
        mask = self.supported[self.handles.index(handle)]
        if mask is None:
            raise FakeError(xid_events.NOT_SUPPORTED)
        return mask

    def nvmlDeviceRegisterEvents(self, handle: object, types: int, event_set: str) -> None:
        self.calls.append(f"register {self.handles.index(handle)} 0x{types:x}")

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        if not self.waits:
            raise FakeError(xid_events.TIMEOUT)
        step = self.waits.pop(0)
        if callable(step):
            return step()
        if isinstance(step, int):
            raise FakeError(step)
        gpu, code = step

        class Data:
            device = self.handles[gpu]
            eventType = xid_events.EVENT_TYPE_XID
            eventData = code
        return Data()


def _listener(nvml: FakeNvml, tmp_path: Path, said: list[str]) -> xid_events.Listener:
    return xid_events.Listener(nvml, xid_events.EventsFile(tmp_path / "xid-events.jsonl"),
                               boot_id="b1", host="node", repair_dir=tmp_path / "repair",
                               say=said.append, uptime=lambda: 42.0)


def test_the_listener_registers_what_each_gpu_offers_and_writes_each_xid(
        tmp_path: Path) -> None:
    said: list[str] = []
    listener = _listener(FakeNvml([0xF, None], []), tmp_path, said)

    def stop() -> Any:
        listener.stopping = True
        raise FakeError(xid_events.TIMEOUT)
    listener.nvml.waits = [xid_events.TIMEOUT, (0, 79), xid_events.TIMEOUT, stop]
    assert listener.run() == xid_events.EXIT_STOPPED
    assert listener.nvml.calls == ["init", "register 0 0x8", "free", "shutdown"]
    [entry] = xid_events.read_records(tmp_path / "xid-events.jsonl")
    assert (entry["xid"], entry["pci_bus_id"], entry["uuid"], entry["source"], entry["uptime"]) \
        == (79, BUS, "GPU-0", "nvml-event", 42.0)
    status = json.loads((tmp_path / "xid-events-status.json").read_text())
    assert status["state"] == "stopped" and status["devices"][1]["events"] is False
    assert "GPU 1 gives none (NVML error 3" in said[0]


@pytest.mark.parametrize("code, words", [
    (xid_events.LIB_RM_VERSION_MISMATCH, "the driver's userspace changed"),
    (xid_events.DRIVER_NOT_LOADED, "no driver to listen to"),
])
def test_nvml_that_cannot_start_is_one_line_and_an_exit_for_systemd(
        tmp_path: Path, code: int, words: str) -> None:
    said: list[str] = []
    listener = _listener(FakeNvml([0xF], [], init=code), tmp_path, said)
    assert listener.run() == xid_events.EXIT_FAILED
    assert len(said) == 1 and f"NVML error {code}" in said[0] and words in said[0]
    status = json.loads((tmp_path / "xid-events-status.json").read_text())
    assert status["state"] == "stopped" and words in status["why"]


def test_a_gpu_lost_while_waiting_ends_the_run_cleanly(tmp_path: Path) -> None:
    said: list[str] = []
    nvml = FakeNvml([0xF, 0xF], [xid_events.GPU_IS_LOST])
    assert _listener(nvml, tmp_path, said).run() == xid_events.EXIT_FAILED
    assert nvml.calls[-2:] == ["free", "shutdown"]
    assert "a GPU fell off the bus" in said[-1]


def test_no_gpu_with_xid_events_leaves_the_kernel_log_alone(tmp_path: Path) -> None:
    said: list[str] = []
    assert _listener(FakeNvml([None, 0x3], []), tmp_path, said).run() == xid_events.EXIT_STOPPED
    assert "no GPU offers Xid events" in said[0]
    status = json.loads((tmp_path / "xid-events-status.json").read_text())
    assert status["state"] == "stopped" and "supported mask 0x3" in status["why"]


def test_a_reset_under_way_pauses_the_listener_off_nvml(tmp_path: Path) -> None:
    said: list[str] = []
    nvml = FakeNvml([0xF], [])
    listener = _listener(nvml, tmp_path, said)
    with gpu_lock.held(tmp_path / "repair"):
        assert listener.reset_under_way()
        assert listener.session() == xid_events.PAUSED
    assert nvml.calls == ["init", "register 0 0x8", "free", "shutdown"]
    assert not listener.reset_under_way()
    assert os.getpid() == json.loads(
        (tmp_path / "xid-events-status.json").read_text())["pid"]
