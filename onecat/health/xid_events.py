"""NVML's Xid events, the second Xid source beside the kernel log (issue 47): a small
long-running listener (`python3 -m onecat.health.xid_events`, onecat-xid-events.service) and
what the watch reads of its file.

Why a second source: the kernel log can lose lines (a /dev/kmsg ring wrap, journal vacuuming,
Storage=volatile), and some fatal Xids (46, 61, 62, 74) leave no NVML state a later look could
read instead. NVML hands every Xid to each event set registered for nvmlEventTypeXidCriticalError
on that GPU (nvml.h, nvmlEventSetWait_v2: "On Linux, every Xid error event would return the
associated event data"; eventData "Stores Xid error for the device", 999 for an unknown one).
DCGM and gpud listen the same way beside their kernel-log scan (NVIDIA/DCGM
dcgmlib/src/DcgmCacheManager.cpp: ManageDeviceEvents always registers Xid events,
EventThreadMain reads /dev/kmsg and waits on the set, TIMEOUT being "99.9% of the time";
leptonai/gpud components/accelerator/nvidia/query/nvml/xid.go pollXidEvents;
NVIDIA/k8s-device-plugin internal/rm/health.go). A set sees only what happens while it is registered
(nvmlDeviceRegisterEvents: "All events that occurred before this call are not recorded"), and
the watch is a periodic oneshot: hence a service of its own that appends each event to a file
the watch reads at every look.

The events file: JSON lines, newest last, at most `2 * max_records` (then rewritten whole,
atomically, with the newest `max_records`). One line per event:
    {"kind": "xid", "source": "nvml-event", "time": <Unix s>, "uptime": <s since boot>,
     "boot_id": ..., "pci_bus_id": "00000000:3B:00.0", "gpu": 0, "uuid": "GPU-...", "xid": 79}
`uptime` is CLOCK_MONOTONIC, the clock the kernel log's own times run on for a node that never
suspends (printk's local_clock; journalctl -o short-monotonic): the watch counts an Xid both
sources saw once (count_once: same GPU and code, within MATCH_WINDOW_S, else paired with the
log's lines left over).
Beside it, the status file (`status_path`): which GPUs give events and why the others do not,
whether the listener listens, pauses (a GPU reset) or stopped, and its pid.

Stdlib only (roles/watch ships it with the watch); pynvml is passed in, imported by main().
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from onecat.files import read_json, write_atomic
from onecat.health import gpu_lock

# nvml.h: nvmlEventTypeXidCriticalError.
EVENT_TYPE_XID = 0x8
# nvml.h nvmlReturn_t values the listener tells apart.
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
SOURCE = "nvml-event"
DEFAULT_FILE = Path("/var/lib/onecat/watch/xid-events.jsonl")
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
# The repair runner's folder: its reset lock (onecat/health/gpu_lock.py) pauses the listener.
REPAIR_DIR = Path("/var/lib/onecat/repair")
# How long one nvmlEventSetWait_v2 waits (gpud and the device plugin wait 5000 ms): short, so a
# SIGTERM or the repair runner's reset lock is seen within a second.
WAIT_MS = 1000
MAX_RECORDS = 1000
# The kernel log line and the NVML event of one Xid are this close on the node's clock (both
# come from the driver's one report; the slack covers the journal's and the listener's delays).
MATCH_WINDOW_S = 5.0
# Exit statuses: 0 stopped (SIGTERM) or nothing to listen to; 1 NVML failed (systemd restarts it).
EXIT_STOPPED, EXIT_FAILED = 0, 1
LISTENING, PAUSED, STOPPED = "listening", "paused", "stopped"
PROGRAM = "onecat.health.xid_events"


def status_path(events_file: Path) -> Path:
    """The listener's status file beside its events file (xid-events-status.json)."""
    return events_file.with_name(f"{events_file.stem}-status.json")


def bus_id(value: Any) -> str | None:
    """'00000000:3B:00.0' from any spelling NVML or the kernel log uses ('0000:3b:00'), the
    kernel log's Xid events' own (onecat.health.nvml.parse_xid)."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    parts = str(value or "").strip().split(":")
    if len(parts) != 3:
        return None
    try:
        domain, bus, device = (int(p.split(".")[0], 16) for p in parts)
    except ValueError:
        return None
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


# ---- the file -----------------------------------------------------------------------------

def record(*, xid: int, gpu: int | None, uuid: str | None, pci_bus_id: str | None,
           boot_id: str | None, now: float, uptime: float) -> dict[str, Any]:
    """One event as the file holds it."""
    return {"kind": "xid", "source": SOURCE, "time": round(now, 3), "uptime": round(uptime, 6),
            "boot_id": boot_id, "pci_bus_id": bus_id(pci_bus_id), "gpu": gpu, "uuid": uuid,
            "xid": int(xid)}


def valid(entry: Any) -> bool:
    """A line of the file the watch can use (any other line is skipped: a half-written last
    line, a hand edit)."""
    return (isinstance(entry, dict) and entry.get("kind") == "xid"
            and isinstance(entry.get("xid"), int) and not isinstance(entry.get("xid"), bool)
            and isinstance(entry.get("uptime"), (int, float))
            and not isinstance(entry.get("uptime"), bool)
            and bus_id(entry.get("pci_bus_id")) is not None)


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every usable event in the file, oldest first; [] when it is missing or unreadable."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if valid(entry):
            found.append(entry)
    return found


class EventsFile:
    """The listener's end of the file: appends one line per event, and keeps the file bounded
    (past 2 * max_records lines, the newest max_records replace it in one rename)."""

    def __init__(self, path: Path, max_records: int = MAX_RECORDS) -> None:
        self.path = path
        self.max_records = max(1, max_records)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = path.read_bytes()
        except OSError:
            text = b""
        self.lines = len(text.splitlines())
        if text and not text.endswith(b"\n"):
            # A line cut short (a full disk, a crash): end it, so the next event is a line of
            # its own (readers skip the broken one).
            self._write(b"\n")

    def _write(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def append(self, entry: dict[str, Any]) -> None:
        # One write(2) of one line with O_APPEND: a reader sees whole lines, or a last line cut
        # short that it skips.
        self._write((json.dumps(entry, sort_keys=True) + "\n").encode())
        self.lines += 1
        if self.lines > 2 * self.max_records:
            self.trim()

    def trim(self) -> None:
        kept = [json.dumps(e, sort_keys=True) for e in read_records(self.path)]
        kept = kept[-self.max_records:]
        write_atomic(self.path, "".join(f"{line}\n" for line in kept), 0o600)
        self.lines = len(kept)


# ---- what the watch reads -------------------------------------------------------------------

def pid_alive(pid: Any) -> bool:
    """Whether `pid` is a running listener (its command line names this module)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        return PROGRAM.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def source_state(status: dict[str, Any] | None, boot_id: str | None,
                 alive: Callable[[Any], bool] = pid_alive) -> dict[str, Any]:
    """What the NVML event source covers now, from the listener's status file: `state`
    (listening, paused, stopped, not running), `why` when it does not listen, and the GPUs that
    give no events (NOT_SUPPORTED, lost). A listener that does not run is a missing source, never
    a GPU's fault: the kernel log still counts, and the watch's NVML reads still judge the cards."""
    if not status:
        return {"state": "not running", "why": "no listener has run (onecat-xid-events.service)",
                "without_events": []}
    without = [{"gpu": d.get("gpu"), "pci_bus_id": d.get("pci_bus_id"), "why": d.get("why")}
               for d in status.get("devices") or [] if isinstance(d, dict) and not d.get("events")]
    state = status.get("state")
    if boot_id and status.get("boot_id") and status.get("boot_id") != boot_id:
        return {"state": "not running", "why": "it has not started since the boot",
                "without_events": []}
    if state in (LISTENING, PAUSED) and not alive(status.get("pid")):
        return {"state": "not running", "why": "it ended without a word (killed?); systemd "
                "restarts it", "without_events": without}
    result: dict[str, Any] = {"state": state if state in (LISTENING, PAUSED) else STOPPED,
                              "without_events": without}
    if result["state"] != LISTENING:
        result["why"] = str(status.get("why") or "")[:300]
    return result


def look_at(events_file: Path, boot_id: str | None, after: float | None,
            alive: Callable[[Any], bool] = pid_alive) -> dict[str, Any]:
    """The NVML event source at one look: its state, this boot's events after `after` (the
    previous look's cursor, an uptime; None: every event of this boot, as the kernel log's
    first look of a boot counts every Xid since boot), and the cursor for the next look."""
    events = [e for e in read_records(events_file)
              if not boot_id or e.get("boot_id") == boot_id]
    cursor = max([after or 0.0, *(float(e["uptime"]) for e in events)]) if events else after
    new = [e for e in events if after is None or float(e["uptime"]) > after]
    return {**source_state(read_json(status_path(events_file)), boot_id, alive),
            "events": new, "cursor": cursor}


def count_once(log_new: int, log_times: Sequence[float] | None,
               event_times: Sequence[float], window_s: float = MATCH_WINDOW_S,
               ) -> tuple[int, bool, bool]:
    """How many times one GPU logged one Xid code since the previous look, each occurrence
    once whichever sources saw it: (count, seen by the kernel log, seen by NVML's events).

    `log_new` lines in the kernel log and `event_times` NVML events: an event within
    `window_s` of a line's time is that line's occurrence (one event per line). The events no
    line's time places are then paired with the lines left over (lines without a time, or a
    kernel clock that drifted from CLOCK_MONOTONIC over a long uptime: printk's clock is not
    NTP-disciplined), so the sources are never added up; only events beyond every line are
    more occurrences. Never fewer than either source saw."""
    times = sorted(log_times or [])[-max(log_new, 0):] if log_new > 0 else []
    used = [False] * len(times)
    unmatched = 0
    for at in sorted(event_times):
        for i, line in enumerate(times):
            if not used[i] and abs(line - at) <= window_s:
                used[i] = True
                break
        else:
            unmatched += 1
    lines_left = max(0, log_new - sum(used))
    return log_new + max(0, unmatched - lines_left), log_new > 0, bool(event_times)


# ---- the listener -------------------------------------------------------------------------

class NvmlFailed(Exception):
    """NVML cannot go on: the listener exits non-zero and systemd starts it again later."""

    def __init__(self, code: int | None, line: str) -> None:
        super().__init__(line)
        self.code = code


def _code(nvml: Any, error: BaseException) -> int | None:
    return getattr(error, "value", None) if isinstance(error, nvml.NVMLError) else None


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _handle_key(handle: Any) -> int:
    """An NVML device handle as a number (the event's `device` and the registered handle are
    two ctypes pointers to one address); a handle that is no pointer is itself."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def failure_line(code: int | None, text: str, host: str) -> str:
    """One line for the journal when NVML cannot start or stops answering."""
    if code == LIB_RM_VERSION_MISMATCH:
        return (f"onecat-xid-events on {host}: NVML error {code} ({text}): the driver's "
                "userspace changed under the loaded module; the node needs its reboot. The kernel "
                "log stays the watch's Xid source; systemd starts the listener again later")
    if code in (DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND):
        return (f"onecat-xid-events on {host}: NVML error {code} ({text}): no driver to listen "
                "to; systemd starts the listener again later")
    if code == GPU_IS_LOST:
        return (f"onecat-xid-events on {host}: NVML error {code} ({text}): a GPU fell off the "
                "bus; the listener starts again without it (the watch judges the card)")
    return (f"onecat-xid-events on {host}: NVML error {code} ({text}); systemd starts the "
            "listener again later")


class Listener:
    """One run of the listener: NVML started, every GPU that offers Xid events registered, each
    event appended to the file until stopped, paused or NVML fails."""

    def __init__(self, nvml: Any, events: EventsFile, *, boot_id: str | None, host: str,
                 wait_ms: int = WAIT_MS, repair_dir: Path | None = REPAIR_DIR,
                 say: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.time,
                 uptime: Callable[[], float] = time.monotonic) -> None:
        self.nvml = nvml
        self.events = events
        self.boot_id = boot_id
        self.host = host
        self.wait_ms = wait_ms
        self.repair_dir = repair_dir
        self.say = say
        self.clock = clock
        self.uptime = uptime
        self.stopping = False
        self.devices: list[dict[str, Any]] = []
        self.by_handle: dict[int, dict[str, Any]] = {}

    # -- status --
    def write_status(self, state: str, why: str = "") -> None:
        document = {"state": state, "why": why, "pid": os.getpid(), "boot_id": self.boot_id,
                    "at": round(self.clock(), 3), "devices": self.devices,
                    "events_file": str(self.events.path)}
        write_atomic(status_path(self.events.path), json.dumps(document, sort_keys=True) + "\n",
                     0o644)

    def reset_under_way(self) -> bool:
        """Whether the repair runner holds the GPUs' reset lock (gpu_lock.py): a reset needs
        the devices to itself, and an NVML client makes `nvidia-smi -r` fail "In use by
        another client"."""
        return self.repair_dir is not None and gpu_lock.busy(self.repair_dir)

    # -- NVML --
    def _register(self, event_set: Any) -> None:
        nvml = self.nvml
        self.devices, self.by_handle = [], {}
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            device: dict[str, Any] = {"gpu": index, "uuid": None, "pci_bus_id": None,
                                      "events": False, "why": ""}
            self.devices.append(device)
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                with contextlib.suppress(nvml.NVMLError):
                    device["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
                with contextlib.suppress(nvml.NVMLError):
                    device["pci_bus_id"] = bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
                # gpud and the device plugin ask first and register only what the GPU offers.
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
                if not int(supported) & EVENT_TYPE_XID:
                    device["why"] = f"offers no Xid events (supported mask 0x{int(supported):x})"
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, EVENT_TYPE_XID, event_set)
            except nvml.NVMLError as error:
                code = _code(nvml, error)
                if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                    # nvml.h: "event set can still be used. None of the requested eventTypes are
                    # registered in that case."
                    device["why"] = f"NVML error {code}: {error} (no Xid events from this GPU)"
                    continue
                if code == GPU_IS_LOST:
                    device["why"] = f"NVML error {code}: {error} (the GPU is lost)"
                    continue
                raise
            device["events"] = True
            self.by_handle[_handle_key(handle)] = device

    def _device_of(self, handle: Any) -> dict[str, Any]:
        """The GPU an event names: its handle as registered, else its index (DCGM's
        EventThreadMain asks nvmlDeviceGetIndex of the event's device)."""
        found = self.by_handle.get(_handle_key(handle))
        if found is not None:
            return found
        with contextlib.suppress(self.nvml.NVMLError, AttributeError):
            index = int(self.nvml.nvmlDeviceGetIndex(handle))
            if 0 <= index < len(self.devices):
                return self.devices[index]
        return {"gpu": None, "uuid": None, "pci_bus_id": None}

    def _deliver(self, data: Any) -> None:
        if not int(data.eventType) & EVENT_TYPE_XID:
            return
        device = self._device_of(data.device)
        entry = record(xid=int(data.eventData), gpu=device.get("gpu"), uuid=device.get("uuid"),
                       pci_bus_id=device.get("pci_bus_id"), boot_id=self.boot_id,
                       now=self.clock(), uptime=self.uptime())
        self.events.append(entry)
        self.say(f"onecat-xid-events on {self.host}: Xid {entry['xid']} on GPU "
                 f"{entry['gpu']} ({entry['pci_bus_id']})")

    def session(self) -> str:
        """Listen until stopped, paused or NVML fails; returns LISTENING's end: STOPPED, PAUSED,
        or "idle" when no GPU offers Xid events. Raises NvmlFailed."""
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            code = _code(nvml, error)
            raise NvmlFailed(code, failure_line(code, str(error), self.host)) from error
        try:
            try:
                event_set = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as error:
                code = _code(nvml, error)
                raise NvmlFailed(code, failure_line(code, str(error), self.host)) from error
            try:
                return self._listen(event_set)
            finally:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlEventSetFree(event_set)
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def _listen(self, event_set: Any) -> str:
        nvml = self.nvml
        try:
            self._register(event_set)
        except nvml.NVMLError as error:
            code = _code(nvml, error)
            raise NvmlFailed(code, failure_line(code, str(error), self.host)) from error
        listening = [d for d in self.devices if d["events"]]
        if not listening:
            why = "no GPU offers Xid events: " + ("; ".join(
                f"GPU {d['gpu']}: {d['why']}" for d in self.devices) or "no GPU")
            self.write_status(STOPPED, why)
            self.say(f"onecat-xid-events on {self.host}: {why}; the kernel log is the only Xid "
                     "source")
            return "idle"
        self.write_status(LISTENING)
        others = [f"GPU {d['gpu']} gives none ({d['why']})" for d in self.devices
                  if not d["events"]]
        self.say(f"onecat-xid-events on {self.host}: listening for Xid events on "
                 + ", ".join(f"GPU {d['gpu']} ({d['pci_bus_id']})" for d in listening)
                 + "".join(f"; {o}" for o in others))
        while not self.stopping:
            if self.reset_under_way():
                return PAUSED
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, self.wait_ms)
            except nvml.NVMLError as error:
                code = _code(nvml, error)
                if code == TIMEOUT:
                    continue  # nvml.h: "no event arrived in specified timeout or interrupt"
                raise NvmlFailed(code, failure_line(code, str(error), self.host)) from error
            self._deliver(data)
        return STOPPED

    def run(self, pause_poll_s: float = 1.0) -> int:
        """Sessions until SIGTERM; a reset under way pauses the listener (NVML shut down) until
        the lock is released. Returns the exit status."""
        while not self.stopping:
            try:
                ended = self.session()
            except NvmlFailed as failure:
                self.write_status(STOPPED, str(failure))
                self.say(str(failure))
                return EXIT_FAILED
            if ended == "idle":
                return EXIT_STOPPED
            if ended == PAUSED:
                self.write_status(PAUSED, "the repair runner is resetting the GPUs")
                self.say(f"onecat-xid-events on {self.host}: paused while the repair runner "
                         "resets the GPUs (the kernel log still counts)")
                while self.reset_under_way() and not self.stopping:
                    time.sleep(pause_poll_s)
        self.write_status(STOPPED, "stopped (SIGTERM)")
        return EXIT_STOPPED


def read_boot_id(path: Path = BOOT_ID_FILE) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python3 -m {PROGRAM}", description=(
        "Listen for NVML's Xid events and append each to a file the watch reads."))
    parser.add_argument("--events-file", type=Path, default=DEFAULT_FILE,
                        help="where the events go, one JSON line each (default: %(default)s); "
                             "the status goes beside it")
    parser.add_argument("--max-records", type=int, default=MAX_RECORDS, metavar="N",
                        help="keep the newest N events (default: %(default)s)")
    parser.add_argument("--wait-ms", type=int, default=WAIT_MS, metavar="MS",
                        help="one nvmlEventSetWait_v2's timeout (default: %(default)s)")
    parser.add_argument("--repair-dir", type=Path, default=REPAIR_DIR,
                        help="the repair runner's folder: its reset lock pauses the listener "
                             "(default: %(default)s)")
    parser.add_argument("--boot-id-file", type=Path, default=BOOT_ID_FILE,
                        help="the kernel's boot id, kept with each event (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.max_records < 1 or args.wait_ms < 1:
        parser.error("--max-records and --wait-ms must be at least 1")
    host = os.uname().nodename
    try:
        import pynvml
    except ImportError:
        print(f"onecat-xid-events on {host}: pynvml is missing; install nvidia-ml-py",
              file=sys.stderr)
        return EXIT_FAILED
    try:
        listener = Listener(pynvml, EventsFile(args.events_file, args.max_records),
                            boot_id=read_boot_id(args.boot_id_file), host=host,
                            wait_ms=args.wait_ms, repair_dir=args.repair_dir,
                            say=lambda line: print(line, flush=True))

        def stop(signum: int, frame: Any) -> None:
            listener.stopping = True

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        return listener.run()
    except Exception as error:  # one line for the journal, never a traceback loop
        print(f"onecat-xid-events on {host}: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
