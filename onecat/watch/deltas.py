"""What is wrong on a node's GPUs now, and what arrived since the previous reading (the
watch's rules).

Counters are judged by what changed since the previous reading, not by lifetime totals: the
deploy-time health check already judged those (a card with an old ECC history is `degraded`
there, and burn-in decides whether it serves). Conditions are judged on every look for as
long as they last, as DCGM's health watches report them on every check: a GPU the driver lost
(NVML_ERROR_GPU_IS_LOST), a page pending retirement (NVIDIA: it stays pending until the GPU is
reset or the driver reloads), a row remap pending or failed. Severities follow DCGM: a new
uncorrectable (double-bit) ECC error, a pending retirement, a row-remap failure, a lost or
vanished GPU and a fatal Xid are failures (the node must stop serving before it answers with
corrupted memory, the seed's pitfall 5.5); correctable errors, thermal slowdowns and other
Xids are warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from onecat.health import xid

HEALTHY = "healthy"
DEGRADED = "degraded"
UNHEALTHY = "unhealthy"
RANK = {HEALTHY: 0, DEGRADED: 1, UNHEALTHY: 2}
# Findings of a state that lasts: reported on every look while it does.
CONDITIONS = frozenset(("gpu_lost", "retirement_pending", "row_remap_failure",
                        "row_remap_pending"))

# Hardware protection cutting the clocks under load: weak or failing power (the seed's
# second-hand servers) or the board's own slowdown. The answers stay right but slow; a node
# that brakes under load is drained (DCGM reports both as power/thermal violations).
FAILING_THROTTLE = ("hw_slowdown", "hw_power_brake_slowdown")
WARNING_THROTTLE = ("hw_thermal_slowdown", "sw_thermal_slowdown")
# Codes that mean the card (or its memory) failed: onecat's one Xid table, as the health judge.
FATAL_XIDS = frozenset(xid.ERROR_CODES)


@dataclass(frozen=True)
class Limits:
    """Thresholds of the rules that have one (DCGM's defaults where it has them)."""

    # New corrected (single-bit) errors per look before it is a warning: a few are normal,
    # a burst means the memory is going.
    corrected_ecc: int = 100
    temperature_c: int = 87


@dataclass(frozen=True)
class Finding:
    """One thing that arrived since the previous reading."""

    severity: str
    code: str
    gpu: str | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "gpu": self.gpu,
                "message": self.message}


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


def _gpu_findings(
    before: dict[str, Any], now: dict[str, Any], limits: Limits
) -> Iterable[Finding]:
    at = _label(now)
    rise = _rose(before, now, "ecc", "volatile", "uncorrected")
    if rise:
        yield Finding(UNHEALTHY, "ecc_uncorrected", at,
                      f"{at}: {rise} new uncorrectable ECC error(s) since the last look: its "
                      "memory returns corrupted data; drain the node, then reset the GPU or reboot")
    rise = _rose(before, now, "ecc", "volatile", "corrected")
    if rise >= limits.corrected_ecc:
        yield Finding(DEGRADED, "ecc_corrected", at,
                      f"{at}: {rise} new corrected ECC errors since the last look "
                      f"(limit {limits.corrected_ecc}): the memory is weakening")
    if _get(now, "retired_pages", "pending") is True:
        # A condition, on every look while it lasts: a restart of the engine does not clear it.
        yield Finding(UNHEALTHY, "retirement_pending", at,
                      f"{at}: a page retirement is pending: the bad memory stays in use until "
                      "the GPU is reset; drain the node and reset the GPU or reboot")
    rise = _rose(before, now, "retired_pages", "double_bit")
    if rise:
        yield Finding(UNHEALTHY, "pages_retired_double_bit", at,
                      f"{at}: {rise} page(s) newly retired for double-bit errors")
    rise = _rose(before, now, "retired_pages", "single_bit")
    if rise:
        yield Finding(DEGRADED, "pages_retired_single_bit", at,
                      f"{at}: {rise} page(s) newly retired for single-bit errors")
    if _get(now, "remapped_rows", "failure") is True:
        yield Finding(UNHEALTHY, "row_remap_failure", at,
                      f"{at}: a row remapping failed: the memory cannot repair itself any more")
    if _get(now, "remapped_rows", "pending") is True:
        yield Finding(DEGRADED, "row_remap_pending", at,
                      f"{at}: a row remap is pending until the GPU is reset")
    reasons = set(now.get("throttle_reasons") or [])
    for reason in FAILING_THROTTLE:
        if reason in reasons:
            yield Finding(UNHEALTHY, "throttle", at,
                          f"{at}: clocks cut by {reason}: check the power supply and cables "
                          "(the card brakes to protect itself)")
    for reason in WARNING_THROTTLE:
        if reason in reasons:
            yield Finding(DEGRADED, "throttle", at,
                          f"{at}: clocks cut by {reason}: check the cooling")
    temperature = now.get("temperature_c")
    if isinstance(temperature, int) and temperature >= limits.temperature_c:
        yield Finding(DEGRADED, "temperature", at,
                      f"{at}: {temperature} °C (limit {limits.temperature_c} °C)")


def _xid_counts(readings: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(str(event.get("pci_bus_id")), int(event["code"])): int(event.get("count") or 0)
            for event in readings.get("xid_events") or [] if "code" in event}


def _xid_findings(before: dict[str, Any], now: dict[str, Any]) -> Iterable[Finding]:
    if now.get("xid_events") is None or before.get("xid_events") is None:
        return  # not read (no kernel log access): the deploy-time check reports that
    then = _xid_counts(before)
    for (bus, code), count in sorted(_xid_counts(now).items()):
        rise = count - then.get((bus, code), 0)
        if rise <= 0:
            continue
        fatal = code in FATAL_XIDS
        severity = UNHEALTHY if fatal else DEGRADED
        advice = "; NVIDIA's catalog says the card failed: drain the node" if fatal else ""
        yield Finding(severity, "xid", bus,
                      f"the kernel logged Xid {code} {rise} more time(s) on the GPU at {bus} "
                      f"since the last look{advice}")


def compare(
    before: dict[str, Any] | None, now: dict[str, Any], limits: Limits | None = None
) -> list[Finding]:
    """Findings that arrived between two readings.

    The first look (no `before`) and a GPU seen for the first time set the baseline: only what
    is true now counts for them (throttling, temperature, a pending retirement), never the
    counters' history.
    """
    limits = limits or Limits()
    findings: list[Finding] = []
    current = {gpu_key(gpu): gpu for gpu in now.get("gpus") or []}
    previous = {gpu_key(gpu): gpu for gpu in (before or {}).get("gpus") or []}
    lost = {gpu.get("index"): gpu for gpu in current.values() if is_lost(gpu)}
    for key, gpu in previous.items():
        if key not in current and gpu.get("index") not in lost:
            findings.append(Finding(UNHEALTHY, "gpu_lost", _label(gpu),
                                    f"{_label(gpu)} is gone: NVML no longer sees it (fallen off "
                                    "the bus?); drain the node, then reseat or replace the card"))
    for key, gpu in current.items():
        if is_lost(gpu):
            # Counted but unreachable: one finding on every look while it lasts; its other
            # readings are unknown, not zero.
            findings.append(Finding(UNHEALTHY, "gpu_lost", _label(gpu),
                                    f"{_label(gpu)} is lost: the driver counts it but NVML "
                                    "answers \"GPU is lost\" (Xid 79, fallen off the bus); "
                                    "drain the node and reboot it"))
            continue
        findings.extend(_gpu_findings(previous.get(key) or _baseline(gpu), gpu, limits))
    if before is not None:
        findings.extend(_xid_findings(before, now))
    return findings


def is_lost(gpu: dict[str, Any]) -> bool:
    """A GPU NVML counts but cannot read (GPU_IS_LOST, or no handle at all)."""
    return bool(gpu.get("lost")) or gpu.get("reachable") is False


def _baseline(gpu: dict[str, Any]) -> dict[str, Any]:
    """The previous reading a GPU's first look compares with: its own counters."""
    return {"ecc": gpu.get("ecc"), "retired_pages": gpu.get("retired_pages")}


def verdict(findings: Iterable[Finding]) -> str:
    """The worst severity among the findings (healthy when there are none)."""
    return max((f.severity for f in findings), key=RANK.__getitem__, default=HEALTHY)
