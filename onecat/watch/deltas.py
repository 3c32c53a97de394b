"""What is wrong on a node's GPUs now, and what arrived since the previous reading (the
watch's rules; the burn-in applies them between every two samples).

Two parts, one vocabulary (the health judge's: a finding is an `error` or a `warning`; a
verdict is healthy, degraded or unhealthy):

- **State**: every look judges the absolute readings with the health stage's own rules
  (`onecat.health.judge.judge`, the same code the deploy's `gpu_health` module runs), so a
  condition keeps the node out for as long as it lasts, the first look included: a lost GPU
  (NVML_ERROR_GPU_IS_LOST), a page pending retirement (it stays pending until the GPU is reset
  or the driver reloads), uncorrectable errors since the driver loaded (volatile ECC: only a
  reset or a reload clears the counter), retired pages at DCGM's limit, a row-remap failure.
  The watch leaves out what the deploy checks once: Xid events since boot (events, below) and
  foreign processes (the engine itself holds the GPUs).
- **Change**: counters judged by what rose since the previous reading, never by their
  lifetime history: a new double-bit page retirement, a burst of corrected errors, new Xid
  events (onecat's one Xid table, onecat/health/xid.py), a GPU that vanished. The readings
  carry the kernel's boot id: across a reboot the volatile counters and the kernel log start
  again, so the previous boot's counts are no baseline (a fault that recurs after a reboot
  with a count at or below the previous boot's is still new).

Sustained hardware slowdown needs a history of looks: onecat/watch/throttle.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from onecat.health import xid, xid_events
from onecat.health.judge import ERROR, WARNING, Thresholds
from onecat.health.judge import judge as judge_state

HEALTHY = "healthy"
DEGRADED = "degraded"
UNHEALTHY = "unhealthy"
# Verdicts, best to worst; a finding's severity maps onto them (warning: degraded, error:
# unhealthy), as the health judge's verdict does.
RANK = {HEALTHY: 0, DEGRADED: 1, UNHEALTHY: 2}
SEVERITY_VERDICT = {WARNING: DEGRADED, ERROR: UNHEALTHY}
# Findings of a state: reported on every look while it lasts (the health judge's checks and
# the sustained slowdown). Everything else is an event, reported once.
CONDITIONS = frozenset((
    "gpu_count", "compute_capability", "memory_size", "ecc_mode", "ecc_aggregate_uncorrected",
    "ecc_volatile_uncorrected", "ecc_volatile_corrected", "retired_pages_pending",
    "retired_pages", "remapped_rows", "memory_repair", "pcie_limit", "pcie_link",
    "display_active", "foreign_process", "temperature", "throttle", "gpu_lost",
    "gpu_unreadable", "nvml_read", "throttle_sustained"))

# Codes that mean the card (or its memory) failed: onecat's one Xid table, as the health judge.
FATAL_XIDS = frozenset(xid.ERROR_CODES)
# The health judge's rules as the watch runs them: Xid events are judged as changes (below),
# and the engine's own processes hold the GPUs.
WATCH_THRESHOLDS = Thresholds(check_xid=False, allow_foreign_processes=True)


@dataclass(frozen=True)
class Limits:
    """Thresholds of the change rules (DCGM's defaults where it has them)."""

    # New corrected (single-bit) errors per look before it is a warning: a few are normal,
    # a burst means the memory is going.
    corrected_ecc: int = 100


@dataclass(frozen=True)
class Finding:
    """One thing wrong now or arrived since the previous reading."""

    severity: str  # ERROR or WARNING (the health judge's)
    code: str
    gpu: str | None
    message: str
    # The Xid code of an "xid" finding: which repair can clear it depends on it
    # (onecat/repair/remedies.py).
    xid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        extra = {} if self.xid is None else {"xid": self.xid}
        return {"severity": self.severity, "code": self.code, "gpu": self.gpu,
                "message": self.message, **extra}


def watch_thresholds(expected_gpus: int | None = None) -> Thresholds:
    """The health judge's thresholds as the watch uses them (`--expected-gpus`)."""
    if expected_gpus is None:
        return WATCH_THRESHOLDS
    return dataclasses.replace(WATCH_THRESHOLDS, expected_gpus=expected_gpus)


def gpu_key(gpu: dict[str, Any]) -> str:
    """A GPU's identity across readings: its UUID, else its bus ID, else its index."""
    return str(gpu.get("uuid") or gpu.get("pci_bus_id") or f"index {gpu.get('index')}")


def _label(gpu: dict[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id') or gpu_key(gpu)})"


def _get(data: dict[str, Any] | None, *path: str) -> Any:
    for part in path:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _delta(before: Any, now: Any) -> int:
    """How much a counter rose; 0 when unknown, or when it fell (the driver reloaded)."""
    if not isinstance(before, int) or not isinstance(now, int) or now < before:
        return 0
    return now - before


def _rose(before: dict[str, Any], now: dict[str, Any], *path: str) -> int:
    return _delta(_get(before, *path), _get(now, *path))


def is_lost(gpu: dict[str, Any]) -> bool:
    """A GPU NVML counts but cannot read (GPU_IS_LOST, or no handle at all)."""
    return bool(gpu.get("lost")) or gpu.get("reachable") is False


def same_boot(before: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """Whether two readings come from the same boot (unknown boot ids count as the same,
    the rules then read a counter that fell as a reload)."""
    if before is None:
        return False
    then, current = before.get("boot_id"), now.get("boot_id")
    return not (then and current and then != current)


def state_findings(readings: dict[str, Any],
                   thresholds: Thresholds | None = None) -> list[Finding]:
    """The health stage's own rules on this look's absolute readings, as findings."""
    gpus = {gpu.get("index"): gpu for gpu in readings.get("gpus") or []}
    result = judge_state(readings, thresholds or WATCH_THRESHOLDS)
    findings = []
    for problem in result["problems"]:
        gpu = gpus.get(problem.get("gpu"))
        findings.append(Finding(problem["severity"], problem["check"],
                                None if gpu is None else _label(gpu), problem["message"]))
    return findings


def _gpu_changes(before: dict[str, Any], now: dict[str, Any], limits: Limits,
                 covered: set[tuple[str, str | None]]) -> Iterable[Finding]:
    at = _label(now)
    rise = _rose(before, now, "ecc", "volatile", "uncorrected")
    if rise and ("ecc_volatile_uncorrected", at) not in covered:
        # Usually the state rule names it (any uncorrectable error since the driver loaded);
        # this one only speaks when a threshold above 0 lets the state pass.
        yield Finding(ERROR, "ecc_uncorrected", at,
                      f"{at}: {rise} new uncorrectable ECC error(s) since the last look: its "
                      "memory returns corrupted data; drain the node, then reset the GPU or reboot")
    rise = _rose(before, now, "ecc", "volatile", "corrected")
    if rise >= limits.corrected_ecc:
        yield Finding(WARNING, "ecc_corrected", at,
                      f"{at}: {rise} new corrected ECC errors since the last look "
                      f"(limit {limits.corrected_ecc}): the memory is weakening")
    rise = _rose(before, now, "retired_pages", "double_bit")
    if rise:
        yield Finding(ERROR, "pages_retired_double_bit", at,
                      f"{at}: {rise} page(s) newly retired for double-bit errors")
    rise = _rose(before, now, "retired_pages", "single_bit")
    if rise:
        yield Finding(WARNING, "pages_retired_single_bit", at,
                      f"{at}: {rise} page(s) newly retired for single-bit errors")


def _xid_counts(readings: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(str(event.get("pci_bus_id")), int(event["code"])): int(event.get("count") or 0)
            for event in readings.get("xid_events") or [] if "code" in event}


def _log_rises(before: dict[str, Any] | None, now: dict[str, Any],
               ) -> dict[tuple[str, int], tuple[int, list[float] | None]]:
    """The kernel log's Xids since the previous look per (bus, code): (how many, the lines'
    times when every counted line carried one)."""
    if now.get("xid_events") is None:
        return {}  # not read (no kernel log access): the deploy-time check reports that
    if before is not None and same_boot(before, now) and before.get("xid_events") is None:
        return {}  # the previous look could not read the log: no baseline to compare with
    # The kernel log starts again at every boot: the first look of a boot (or the first look
    # at all) counts every event since boot.
    then = _xid_counts(before) if same_boot(before, now) and before is not None else {}
    # The lines after the previous look's cursor (nvml.parse_xid), where every line carried
    # the kernel's time: older lines that left the log (a ring wrap, journal vacuuming) then
    # hide no new event, as a count since boot would. Else the count since boot, compared.
    rises: dict[tuple[str, int], tuple[int, list[float] | None]] = {}
    for event in now.get("xid_events") or []:
        if "code" not in event:
            continue
        key = (str(event.get("pci_bus_id")), int(event["code"]))
        fresh = event.get("new")
        count = int(event.get("count") or 0)
        rise = fresh if isinstance(fresh, int) else count - then.get(key, 0)
        times = event.get("times") if isinstance(fresh, int) or not then else None
        rises[key] = (max(rise, 0), times if isinstance(times, list) else None)
    return rises


def _nvml_events(now: dict[str, Any]) -> dict[tuple[str, int], list[float]]:
    """NVML's Xid events since the previous look per (bus, code): their times since boot
    (onecat/health/xid_events.py; the look keeps only this boot's events after its cursor)."""
    found: dict[tuple[str, int], list[float]] = {}
    for event in (now.get("xid_nvml") or {}).get("events") or []:
        bus = xid_events.bus_id(event.get("pci_bus_id")) if isinstance(event, dict) else None
        if bus is None or not xid_events.valid(event):
            continue
        found.setdefault((bus, int(event["xid"])), []).append(float(event["uptime"]))
    return found


def _xid_findings(before: dict[str, Any] | None, now: dict[str, Any]) -> Iterable[Finding]:
    """New Xids since the previous look, each occurrence once whichever source saw it: the
    kernel log's lines after the cursor and NVML's Xid events (xid_events.count_once)."""
    logged = {(xid_events.bus_id(bus) or bus, code): rise
              for (bus, code), rise in _log_rises(before, now).items()}
    heard = _nvml_events(now)
    for bus, code in sorted(set(logged) | set(heard)):
        rise, times = logged.get((bus, code), (0, None))
        count, in_log, in_events = xid_events.count_once(rise, times, heard.get((bus, code), []))
        if count <= 0:
            continue
        fatal = code in FATAL_XIDS
        meaning = xid.TABLE[code].meaning if code in xid.TABLE else "see NVIDIA's Xid catalog"
        advice = "; NVIDIA's catalog says the card failed: drain the node" if fatal else ""
        if in_log:
            told = f"the kernel logged Xid {code} ({meaning}) {count} more time(s)"
            also = " (NVML's Xid events saw it too)" if in_events else ""
        else:
            told = f"NVML reported Xid {code} ({meaning}) {count} more time(s)"
            also = " (an NVML Xid event; the kernel log holds no line of it)"
        yield Finding(ERROR if fatal else WARNING, "xid", bus,
                      f"{told} on the GPU at {bus} since the last look{also}{advice}", xid=code)


def _volatile_reset(gpu: dict[str, Any]) -> dict[str, Any]:
    """A GPU's previous reading from another boot: its lifetime counters stand, the ones since
    the driver loaded start at 0 (the driver loaded again)."""
    ecc = dict(gpu.get("ecc") or {})
    ecc["volatile"] = {"corrected": 0, "uncorrected": 0}
    return {**gpu, "ecc": ecc}


def change_findings(before: dict[str, Any] | None, now: dict[str, Any],
                    limits: Limits | None = None,
                    covered: Iterable[Finding] = ()) -> list[Finding]:
    """What arrived between two readings. A GPU seen for the first time (the first look)
    takes its own counters as the baseline; `covered` are the state findings of `now`, so
    one fault gets one reason."""
    limits = limits or Limits()
    done = {(f.code, f.gpu) for f in covered}
    findings: list[Finding] = []
    boot = same_boot(before, now)
    current = {gpu_key(gpu): gpu for gpu in now.get("gpus") or []}
    previous = {gpu_key(gpu): gpu for gpu in (before or {}).get("gpus") or []}
    if not boot:
        previous = {key: _volatile_reset(gpu) for key, gpu in previous.items()}
    counted = any(f.code == "gpu_count" and f.severity == ERROR for f in covered)
    lost = {gpu.get("index") for gpu in current.values() if is_lost(gpu)}
    for key, gpu in previous.items():
        if key not in current and gpu.get("index") not in lost and not counted:
            findings.append(Finding(ERROR, "gpu_lost", _label(gpu),
                                    f"{_label(gpu)} is gone: NVML no longer sees it (fallen off "
                                    "the bus?); drain the node, then reseat or replace the card"))
    for key, gpu in current.items():
        if is_lost(gpu):
            continue  # the state rule names it on every look; its counters are unknown
        findings.extend(_gpu_changes(previous.get(key) or _baseline(gpu), gpu, limits, done))
    findings.extend(_xid_findings(before, now))
    return findings


def compare(
    before: dict[str, Any] | None, now: dict[str, Any], limits: Limits | None = None,
    thresholds: Thresholds | None = None,
) -> list[Finding]:
    """Everything a look finds: the state of `now` (the health judge's rules) and what
    arrived since `before` (None: the first look)."""
    state = state_findings(now, thresholds)
    return state + change_findings(before, now, limits, state)


def _baseline(gpu: dict[str, Any]) -> dict[str, Any]:
    """The previous reading a GPU's first look compares with: its own counters."""
    return {"ecc": gpu.get("ecc"), "retired_pages": gpu.get("retired_pages")}


def verdict(findings: Iterable[Finding]) -> str:
    """The worst severity among the findings as a verdict (healthy when there are none)."""
    return max((SEVERITY_VERDICT.get(f.severity, f.severity if f.severity in RANK else UNHEALTHY)
                for f in findings), key=RANK.__getitem__, default=HEALTHY)
