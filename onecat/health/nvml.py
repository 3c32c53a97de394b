"""Gather GPU health readings from NVML and the kernel log (the edge of the health check).

Stdlib only: this file also travels to nodes inside the `gpu_health` Ansible
module (as ansible.module_utils.onecat.health.nvml). The pynvml module is passed in,
so this file imports without NVML and tests can hand it the real pynvml loaded
against a test double. Readings are plain data; onecat.health.judge judges them.

A field NVML cannot give on this GPU or driver (NOT_SUPPORTED, FUNCTION_NOT_FOUND,
or a wrapper this pynvml lacks) is None. Any other NVML error on a field is also
None and is recorded in the GPU's `read_errors` so the judge can report it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import stat
import subprocess
import time
from typing import Any

# NVML return codes (nvml.h) the gatherer treats specially.
NOT_SUPPORTED = 3
INVALID_ARGUMENT = 2
NOT_FOUND = 6
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
# nvmlInit after a driver upgrade, before the reboot (NVML_ERROR_LIB_RM_VERSION_MISMATCH).
LIB_RM_VERSION_MISMATCH = 18
UNAVAILABLE = (NOT_SUPPORTED, FUNCTION_NOT_FOUND)

# nvmlGpuP2PCapsIndex_t. Defined here: pynvml's NVML_P2P_CAPS_INDEX_READ is a
# tuple `(0,)` by a stray comma, which ctypes rejects.
P2P_READ, P2P_WRITE, P2P_NVLINK = 0, 1, 2

P2P_STATUS_NAMES = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}

# nvmlGpuTopologyLevel_t -> `nvidia-smi topo -m` code. INTERNAL (two GPUs on one
# board) is shown by nvidia-smi as PIX.
TOPOLOGY_NAMES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

# nvmlClocksEventReason* bits (formerly ClocksThrottleReason*).
CLOCK_REASON_NAMES = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# A kernel log line's own time since boot: `[ 1234.567890]` (dmesg, journalctl -o
# short-monotonic, a saved log) or a /dev/kmsg record's `PRI,SEQ,USEC,FLAGS;`.
LINE_TIME = re.compile(r"^\s*\[\s*(\d+(?:\.\d+)?)\]|^\d+,\d+,(\d+),[^;]*;")
XID_PATTERN = re.compile(
    r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\): "
    r"(\d+),\s*(.*)"
)
KERNEL_LOG_TIMEOUT_S = 30
# A kernel log of one boot is megabytes; only the newest this many bytes of a file are read.
KERNEL_LOG_MAX_BYTES = 64 * 1024 * 1024
# Line times kept per (GPU, code) for matching NVML's Xid events (a storm of Xid 13 is thousands).
XID_TIMES_KEPT = 256
NVLINK_LINK_LIMIT = 36  # the largest NVML_NVLINK_MAX_LINKS so far; NVML stops us earlier


class NvmlUnavailable(Exception):
    """NVML could not start: no library, no driver, or a driver/library mismatch."""

    def __init__(self, code: int | None, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def unavailable_line(error: NvmlUnavailable, host: str) -> str:
    """What to tell an operator when NVML could not start, with the fix: a driver that is
    not loaded, or one whose userspace was upgraded under the loaded module (error 18)."""
    if error.code == LIB_RM_VERSION_MISMATCH:
        return (f"Driver/library version mismatch on {host}: NVML error {error.code}: "
                f"{error.text}; the driver's userspace changed and the old kernel module is "
                "still loaded: reboot the node (or run the driver stage with "
                "nvidia_driver_reboot: true)")
    return (f"NVIDIA driver not loaded on {host}: NVML error {error.code}: {error.text}; "
            "load it (`modprobe nvidia`; `nvidia-smi` must list the GPUs) or install the driver")


def _text(value: Any) -> Any:
    """Old pynvml releases return bytes where new ones return str."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _error_code(nvml: Any, error: BaseException) -> int | None:
    return getattr(error, "value", None) if isinstance(error, nvml.NVMLError) else None


class _Reader:
    """Calls pynvml functions, turning 'not available' into None and noting other errors."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self.mismatch: tuple[type[BaseException], ...] = (mismatch,) if mismatch else ()
        self.errors: list[dict[str, Any]] = []

    def call(self, field: str, names: str | tuple[str, ...], *args: Any) -> Any:
        """Call the first of `names` this pynvml and driver have; None when none does."""
        for name in (names,) if isinstance(names, str) else names:
            function = getattr(self.nvml, name, None)
            if function is None:
                continue
            try:
                return function(*args)
            except self.mismatch:
                continue  # pynvml wants a newer driver symbol: try the older call
            except self.nvml.NVMLError as error:
                code = _error_code(self.nvml, error)
                if code == FUNCTION_NOT_FOUND:
                    continue
                if code == NOT_SUPPORTED:
                    return None
                self.errors.append({"field": field, "code": code, "error": str(error)})
                return None
        return None


def _mib(value: Any) -> int | None:
    return None if value is None else int(value) // (1024 * 1024)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000.0, 1)


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def bus_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) from '00000000:5E:00.0', '0000:5e:00' and the like."""
    if not bus_id:
        return None
    match = re.match(r"([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)", bus_id.strip())
    if not match:
        return None
    return int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)


def _reason_names(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_REASON_NAMES.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_REASON_NAMES)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


def _processes(read: _Reader, handle: Any) -> list[dict[str, Any]] | None:
    found: dict[int, dict[str, Any]] = {}
    any_answer = False
    for kind, family in (("C", "Compute"), ("G", "Graphics")):
        base = f"nvmlDeviceGet{family}RunningProcesses"
        listed = read.call("processes", (f"{base}_v3", f"{base}_v2", base), handle)
        if listed is None:
            continue
        any_answer = True
        for info in listed:
            pid = int(info.pid)
            used = _mib(getattr(info, "usedGpuMemory", None))
            entry = found.setdefault(pid, {"pid": pid, "name": None, "used_mib": used, "type": ""})
            entry["type"] += kind
            if used is not None and (entry["used_mib"] is None or used > entry["used_mib"]):
                entry["used_mib"] = used
    if not any_answer:
        return None
    for entry in found.values():
        entry["name"] = _text(read.call("processes", "nvmlSystemGetProcessName", entry["pid"]))
    return [found[pid] for pid in sorted(found)]


def _gpu(read: _Reader, index: int, handle: Any) -> dict[str, Any]:
    call = read.call
    pci = call("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    cc = call("compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    memory = call("memory", "nvmlDeviceGetMemoryInfo", handle)
    ecc_mode = call("ecc_mode", "nvmlDeviceGetEccMode", handle)

    def ecc(error_type: int, counter: int) -> int | None:
        return call("ecc", "nvmlDeviceGetTotalEccErrors", handle, error_type, counter)

    def retired(cause: int) -> int | None:
        pages = call("retired_pages", "nvmlDeviceGetRetiredPages", handle, cause)
        return None if pages is None else len(pages)

    def retired_last_week(cause: int) -> int | None:
        """Pages of this cause retired in the past 7 days (DCGM's rate window), from
        nvmlDeviceGetRetiredPages_v2's timestamps (driver >= 410.72); None without them."""
        pages = call("retired_pages", "nvmlDeviceGetRetiredPages_v2", handle, cause)
        if pages is None:
            return None
        now = time.time()
        stamps = [int(page["timestamp"]) for page in pages if isinstance(page, dict)]
        # Seconds since the epoch; a value beyond year 3000 is read as microseconds
        # (UNCONFIRMED: NVML's documentation does not state the unit).
        stamps = [stamp / 1e6 if stamp > 32503680000 else stamp for stamp in stamps]
        return sum(1 for stamp in stamps if stamp >= now - 7 * 24 * 3600)

    rows = call("remapped_rows", "nvmlDeviceGetRemappedRows", handle)
    return {
        "index": index,
        "name": _text(call("name", "nvmlDeviceGetName", handle)),
        "uuid": _text(call("uuid", "nvmlDeviceGetUUID", handle)),
        "serial": _text(call("serial", "nvmlDeviceGetSerial", handle)),
        "pci_bus_id": None if pci is None else _text(pci.busId),
        "compute_capability": None if cc is None else f"{cc[0]}.{cc[1]}",
        "memory_total_mib": None if memory is None else _mib(memory.total),
        "memory_used_mib": None if memory is None else _mib(memory.used),
        "ecc_mode": None if ecc_mode is None else bool(ecc_mode[0]),
        # nvmlMemoryErrorType_t: 0 corrected, 1 uncorrected.
        # nvmlEccCounterType_t: 0 volatile (since driver load), 1 aggregate (lifetime).
        "ecc": {
            "volatile": {"corrected": ecc(0, 0), "uncorrected": ecc(1, 0)},
            "aggregate": {"corrected": ecc(0, 1), "uncorrected": ecc(1, 1)},
        },
        # nvmlPageRetirementCause_t: 0 multiple single-bit errors, 1 double-bit error.
        "retired_pages": {
            "single_bit": retired(0),
            "double_bit": retired(1),
            "double_bit_last_week": retired_last_week(1),
            "pending": _flag(
                call("retired_pages", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
            ),
        },
        "remapped_rows": {
            "correctable": None if rows is None else rows[0],
            "uncorrectable": None if rows is None else rows[1],
            "pending": None if rows is None else bool(rows[2]),
            "failure": None if rows is None else bool(rows[3]),
        },
        "pcie": {
            "gen": call("pcie", "nvmlDeviceGetCurrPcieLinkGeneration", handle),
            "max_gen": call("pcie", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
            "width": call("pcie", "nvmlDeviceGetCurrPcieLinkWidth", handle),
            "max_width": call("pcie", "nvmlDeviceGetMaxPcieLinkWidth", handle),
        },
        "temperature_c": call("temperature_c", "nvmlDeviceGetTemperature", handle, 0),
        "power_draw_w": _watts(call("power_draw_w", "nvmlDeviceGetPowerUsage", handle)),
        "power_limit_w": _watts(call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)),
        "throttle_reasons": _reason_names(call(
            "throttle_reasons",
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            handle,
        )),
        "persistence_mode": _flag(call("persistence_mode", "nvmlDeviceGetPersistenceMode", handle)),
        "display_active": _flag(call("display_active", "nvmlDeviceGetDisplayActive", handle)),
        "display_mode": _flag(call("display_mode", "nvmlDeviceGetDisplayMode", handle)),
        "processes": _processes(read, handle),
    }


def _nvlinks_between(nvml: Any, handle: Any, peer_bus: tuple[int, int, int] | None) -> int | None:
    """Active NVLinks of `handle` whose far end is the peer; None when NVML has no NVLink."""
    count = 0
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", NVLINK_LINK_LIMIT))):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except nvml.NVMLError as error:
            code = _error_code(nvml, error)
            if code == INVALID_ARGUMENT:
                break  # past this GPU's last link
            if code in UNAVAILABLE and link == 0:
                return None
            if code in (NOT_FOUND, *UNAVAILABLE):
                continue
            raise
        if bus_key(_text(remote.busId)) == peer_bus:
            count += 1
    return count


def _pair(read: _Reader, a: dict[str, Any], b: dict[str, Any], ha: Any, hb: Any) -> dict[str, Any]:
    nvml = read.nvml
    level = read.call("topology", "nvmlDeviceGetTopologyCommonAncestor", ha, hb)
    try:
        links = _nvlinks_between(nvml, ha, bus_key(b["pci_bus_id"]))
    except nvml.NVMLError as error:
        code = _error_code(nvml, error)
        read.errors.append({"field": "nvlink", "code": code, "error": str(error)})
        links = None

    def p2p(index: int) -> str | None:
        status = read.call("p2p", "nvmlDeviceGetP2PStatus", ha, hb, index)
        return None if status is None else P2P_STATUS_NAMES.get(int(status), "UNKNOWN")

    pcie_path = None if level is None else TOPOLOGY_NAMES.get(int(level))
    return {
        "gpus": [a["index"], b["index"]],
        "topology": f"NV{links}" if links else pcie_path,
        "pcie_path": pcie_path,
        "nvlinks": links,
        "p2p_read": p2p(P2P_READ),
        "p2p_write": p2p(P2P_WRITE),
        "p2p_nvlink": p2p(P2P_NVLINK),
    }


def read_kernel_log(path: str | None = None) -> tuple[str | None, str | None, str | None]:
    """The kernel log since boot: (text or None, where it came from, why it failed).

    `path` is the seam: a file holding the kernel log of the current boot. Without
    it: journald's kernel log of this boot, then /dev/kmsg, then dmesg.
    """
    if path:
        text, failure = read_log_file(path)
        return text, path, failure
    failures = []
    # short-monotonic: each line keeps the kernel's own time, the Xid count's cursor.
    text, failure = _run(["journalctl", "-k", "-b", "0", "-o", "short-monotonic", "--no-pager",
                          "-q"])
    if text is not None:
        return text, "journalctl -k -b 0", None
    failures.append(failure)
    text, failure = _read_kmsg()
    if text is not None:
        return text, "/dev/kmsg", None
    failures.append(failure)
    text, failure = _run(["dmesg"])
    if text is not None:
        return text, "dmesg", None
    failures.append(failure)
    return None, None, "; ".join(failures)


def kernel_log_problem(path: str) -> str | None:
    """Why `path` cannot serve as the kernel log (checked before the NVML readings), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return f"kernel log {path}: {error.strerror}: pass a readable file, or leave it unset"
    if not stat.S_ISREG(mode):
        return (f"kernel log {path} is not a regular file (a FIFO or a device would hang or "
                "never end): pass a file holding the kernel log, e.g. journalctl -k -b 0 > "
                "kernel.log, or leave it unset to read journald or /dev/kmsg")
    return None


def read_log_file(path: str) -> tuple[str | None, str | None]:
    """(text, None) from a regular file, its newest KERNEL_LOG_MAX_BYTES; (None, why) else.

    Opened non-blocking: a FIFO would block open() until a writer comes, and a device such
    as /dev/zero never ends, so both are refused by type instead of hanging the check.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, (f"{path} is not a regular file: pass a file holding the kernel log, "
                          "e.g. journalctl -k -b 0 > kernel.log")
        os.set_blocking(fd, True)
        if info.st_size > KERNEL_LOG_MAX_BYTES:
            os.lseek(fd, info.st_size - KERNEL_LOG_MAX_BYTES, os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(KERNEL_LOG_MAX_BYTES)
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror}"
    finally:
        os.close(fd)
    return raw.decode("utf-8", errors="replace"), None


def _run(command: list[str]) -> tuple[str | None, str]:
    if shutil.which(command[0]) is None:
        return None, f"{command[0]} not found"
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=KERNEL_LOG_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"{command[0]}: {error}"
    if done.returncode != 0:
        return None, f"{command[0]} exited {done.returncode}: {done.stderr.strip()[:200]}"
    return done.stdout, ""


def _read_kmsg() -> tuple[str | None, str]:
    """Every record still in the kernel ring buffer, without blocking."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return None, f"/dev/kmsg: {error.strerror}"
    records = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # records were overwritten while reading; go on with the next
            if not record:
                break
            records.append(record.decode(errors="replace"))
    finally:
        os.close(fd)
    return "".join(records), ""


def line_time(line: str) -> float | None:
    """The kernel's time (seconds since boot) a log line carries, None without one."""
    match = LINE_TIME.match(line)
    if not match:
        return None
    return float(match.group(1)) if match.group(1) else int(match.group(2)) / 1e6


def parse_xid(text: str, after: float | None = None,
              keep_times: bool = False) -> list[dict[str, Any]]:
    """Xid events grouped by (GPU bus, code) in order of first appearance. With `after` (the
    previous look's cursor, log_cursor), each event also says how many of its lines are newer
    (`new`; None when a line carries no time): lines that left the log (a ring wrap, journal
    vacuuming) then hide nothing new, as a count since boot would. With `keep_times`, `times`:
    the kernel's times of the lines counted (after the cursor, or all; the newest
    XID_TIMES_KEPT), so the watch counts an NVML Xid event of one occurrence once
    (onecat.health.xid_events)."""
    events: dict[tuple[tuple[int, int, int] | None, int], dict[str, Any]] = {}
    for line in text.splitlines():
        match = XID_PATTERN.search(line)
        if not match:
            continue
        key = bus_key(match.group(1))
        code = int(match.group(2))
        event = events.get((key, code))
        if event is None:
            domain, bus, device = key or (0, 0, 0)
            event = events[(key, code)] = {
                "code": code,
                "pci_bus_id": f"{domain:08X}:{bus:02X}:{device:02X}.0",
                "gpu": None,
                "count": 0,
                "message": match.group(3).strip(),
            }
            if after is not None:
                event["new"] = 0
        event["count"] += 1
        at = line_time(line)
        if after is not None and event["new"] is not None:
            event["new"] = None if at is None else event["new"] + (at > after)
        if keep_times and at is not None and (after is None or at > after):
            event.setdefault("times", []).append(at)
            del event["times"][:-XID_TIMES_KEPT]
    return list(events.values())


def log_cursor(text: str) -> float | None:
    """The newest time any line of the kernel log carries: where the next look counts from."""
    times = [at for line in text.splitlines() if (at := line_time(line)) is not None]
    return max(times) if times else None


def _xid(gpus: list[dict[str, Any]], kernel_log_path: str | None,
         after: float | None = None, keep_times: bool = False) -> dict[str, Any]:
    text, source, failure = read_kernel_log(kernel_log_path)
    if text is None:
        return {"xid_source": source or None, "xid_error": failure, "xid_events": None}
    events = parse_xid(text, after, keep_times)
    by_bus = {bus_key(gpu["pci_bus_id"]): gpu["index"] for gpu in gpus if gpu.get("pci_bus_id")}
    for event in events:
        event["gpu"] = by_bus.get(bus_key(event["pci_bus_id"]))
    return {"xid_source": source, "xid_error": None, "xid_events": events,
            "xid_cursor": log_cursor(text)}


def gather(
    nvml: Any, *, check_xid: bool = True, kernel_log_path: str | None = None,
    xid_after: float | None = None, xid_times: bool = False,
) -> dict[str, Any]:
    """Read every GPU, every GPU pair and the kernel's Xid events into plain data
    (`xid_after`: the previous look's `xid_cursor` in this boot; `xid_times`: keep the lines'
    times, parse_xid).

    Raises NvmlUnavailable when NVML cannot start (no driver, no library).
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise NvmlUnavailable(_error_code(nvml, error), str(error)) from error
    try:
        read = _Reader(nvml)
        count = read.call("gpu_count", "nvmlDeviceGetCount") or 0
        cuda = read.call("cuda_driver_version",
                         ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
        readings: dict[str, Any] = {
            "host": platform.node(),
            "driver_version": _text(read.call("driver_version", "nvmlSystemGetDriverVersion")),
            "nvml_version": _text(read.call("nvml_version", "nvmlSystemGetNVMLVersion")),
            "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpu_count": count,
        }
        system_errors = read.errors
        gpus, handles = [], []
        for index in range(count):
            read.errors = []
            # A GPU the driver lost (Xid 79) is still counted; its handle (or each call on it)
            # answers GPU_IS_LOST. It is read as such, not as a crash of the whole look.
            handle = read.call("device_handle", "nvmlDeviceGetHandleByIndex", index)
            gpu = _gpu(read, index, handle) if handle is not None else {
                "index": index, "uuid": None, "pci_bus_id": None, "serial": None,
                "reachable": False}
            gpu["read_errors"] = read.errors
            gpu["lost"] = any(e.get("code") == GPU_IS_LOST for e in read.errors)
            gpus.append(gpu)
            handles.append(None if gpu["lost"] else handle)
        read.errors = system_errors
        readings["gpus"] = gpus
        readings["pairs"] = [
            _pair(read, gpus[i], gpus[j], handles[i], handles[j])
            for i in range(count) for j in range(i + 1, count)
            if handles[i] is not None and handles[j] is not None
        ]
        readings["read_errors"] = system_errors
    finally:
        # The readings are taken; a failed shutdown changes nothing.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
    if check_xid:
        readings.update(_xid(gpus, kernel_log_path, xid_after, xid_times))
    else:
        readings.update({"xid_source": None, "xid_error": None, "xid_events": None})
    return readings
