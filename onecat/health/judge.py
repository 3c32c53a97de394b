"""Judge GPU health readings: a verdict, a list of problems, and what serving should do.

Pure function over plain data (the readings onecat.health.nvml gathers), stdlib
only: it also runs on nodes inside the `gpu_health` Ansible module (as
ansible.module_utils.onecat.health.judge). Defaults follow DCGM and gcm policy, the
seed and the field notes (NVIDIA/DCGM at 72fa3fea):

- a page pending retirement fails (nvvs/src/Software.cpp:697-715; the health watch only
  warns, modules/health/DcgmHealthWatch.cpp:1771-1776, but a reboot is due before serving);
- single- plus double-bit retired pages >= 63 fail (DCGM_LIMIT_MAX_RETIRED_PAGES,
  common/DcgmGPUHardwareLimits.h:21; DcgmHealthWatch.cpp:1834-1841);
- double-bit retired pages above the soft limit 15 (DcgmGPUHardwareLimits.h:22) fail only
  when more than one more was retired in the past week (DcgmHealthWatch.cpp:1844-1886); above
  the soft limit without that rate they warn;
- uncorrected ECC errors since the driver loaded (volatile) fail (gcm);
- lifetime (aggregate) uncorrected ECC with none since the driver loaded and nothing pending
  is history (the seed): a warning with what to do, not "replace the card";
- 50,000,000 corrected volatile errors warn (gcm).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .xid import ERROR_CODES as XID_ERROR_CODES
from .xid import TABLE as XID_TABLE

ERROR = "error"
WARNING = "warning"

# Xid codes that mean broken hardware (or a wedged GPU): onecat's one Xid table.
XID_DESCRIPTIONS = {code: entry.meaning for code, entry in XID_TABLE.items()}
XID_ADVICE = {code: entry.advice for code, entry in XID_TABLE.items()}

# Clock-event reasons that mean the GPU is being held down by heat or power (nvml.h,
# nvmlClocksEventReasons): HW_SLOWDOWN 0x8 is the umbrella bit ("temperature being too high",
# "External Power Brake Assertion ... by the system power supply", power draw too high, and
# "may be also reported during PState or clock change"); HW_THERMAL_SLOWDOWN 0x40 is the heat,
# HW_POWER_BRAKE_SLOWDOWN 0x80 the power supply; SW_THERMAL_SLOWDOWN 0x20 the driver keeping
# the GPU under its max operating temperature. One sample is a warning (DCGM rates thermal and
# power violations as warnings); only sustained hardware slowdown fails, and only the watch,
# which keeps a history, can tell (onecat/watch/throttle.py, gpud's rule).
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")
# What each slowdown points at, most specific first (HW_SLOWDOWN alone names no cause).
SLOWDOWN_CAUSES = {
    "hw_power_brake_slowdown": "the power brake (the system's power supply asserts it): check "
                               "the PSU and the GPU's power cables",
    "hw_thermal_slowdown": "heat (hardware thermal slowdown): check the airflow and fans",
    "sw_thermal_slowdown": "heat (the driver keeps it under its max operating temperature): "
                           "check the airflow and fans",
    "hw_slowdown": "hardware slowdown without a thermal or power-brake bit (also seen briefly "
                   "around P-state changes): check cooling and power if it persists",
}

# V100's "GPU Slowdown Temp" (nvidia-smi -q; NVML_TEMPERATURE_THRESHOLD_SLOWDOWN): 87 C on
# Tesla V100-PCIE and -SXM2 (shutdown 90 C, max operating 83 C). At this temperature the card
# starts cutting its own clocks; the health check, the watch and the burn-in warn from it.
SLOWDOWN_TEMPERATURE_C = 87

# NVML read errors that mean the GPU itself is in trouble.
FATAL_NVML_CODES = {14: "corrupted infoROM", 15: "GPU is lost", 16: "GPU requires reset"}


@dataclass(frozen=True)
class Thresholds:
    """Policy of the health check; every field is also a gpu_health module option."""

    expected_gpus: int = 2
    min_compute_capability: str = "7.0"
    min_memory_mib: int = 0  # 0: do not check the memory size
    require_ecc: bool = True
    max_aggregate_uncorrected_ecc: int = 0
    max_volatile_uncorrected_ecc: int = 0
    max_volatile_corrected_ecc: int = 50_000_000
    max_retired_pages: int = 63  # single + double-bit (DCGM_LIMIT_MAX_RETIRED_PAGES)
    warn_retired_pages: int = 15  # double-bit only (DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT)
    max_double_bit_retirements_per_week: int = 1  # above the soft limit: more than this fails
    min_pcie_gen: int = 3
    min_pcie_width: int = 16
    allow_display_active: bool = False
    allow_foreign_processes: bool = False
    allowed_processes: tuple[str, ...] = ()  # substrings of process names that are ours
    max_temperature_c: int = SLOWDOWN_TEMPERATURE_C
    check_xid: bool = True
    xid_error_codes: tuple[int, ...] = XID_ERROR_CODES

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Thresholds:
        """Build from a dict (module params, CLI); unknown keys and None values are ignored."""
        known = {field.name for field in fields(cls)}
        chosen = {k: v for k, v in values.items() if k in known and v is not None}
        for key in ("allowed_processes", "xid_error_codes"):
            if key in chosen:
                chosen[key] = tuple(chosen[key])
        if "min_compute_capability" in chosen:
            chosen["min_compute_capability"] = str(chosen["min_compute_capability"])
            # A typo must not switch the check off silently.
            if _version(chosen["min_compute_capability"]) is None:
                raise ValueError(
                    f"min_compute_capability {chosen['min_compute_capability']!r} is not a "
                    "compute capability such as 7.0"
                )
        return cls(**chosen)


def _version(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return None


def label(gpu: dict[str, Any]) -> str:
    """How every message names a GPU: index, PCI bus id and serial."""
    serial = gpu.get("serial") or "unknown"
    return f"GPU {gpu['index']} ({gpu.get('pci_bus_id') or 'bus unknown'}, serial {serial})"


class _Problems:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, severity: str, check: str, gpu: dict[str, Any] | None, message: str) -> None:
        index = None if gpu is None else gpu["index"]
        self.items.append({"severity": severity, "check": check, "gpu": index, "message": message})


def _check_count(readings: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    count = readings.get("gpu_count") or 0
    gpus = readings.get("gpus") or []
    seen = ", ".join(label(gpu) for gpu in gpus) or "none"
    if count < t.expected_gpus:
        out.add(ERROR, "gpu_count", None,
                f"expected {t.expected_gpus} GPUs, NVML sees {count} ({seen}): a card is missing "
                "or fell off the bus; check `lspci -d 10de:`, the kernel log for Xid 79, seating "
                "and power cables, then reboot")
    elif count > t.expected_gpus:
        out.add(WARNING, "gpu_count", None,
                f"expected {t.expected_gpus} GPUs, NVML sees {count} ({seen}): set "
                f"onecat_expected_gpus to {count} for this host if that is intended")


def _check_identity(gpu: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    name = gpu.get("name") or "unknown model"
    have, need = _version(gpu.get("compute_capability")), _version(t.min_compute_capability)
    if have is None:
        out.add(WARNING, "compute_capability", gpu,
                f"{label(gpu)} does not report its compute capability: check the driver with "
                "`nvidia-smi -q`")
    elif need is not None and have < need:
        out.add(ERROR, "compute_capability", gpu,
                f"{label(gpu)} is a {name} with compute capability {gpu['compute_capability']}, "
                f"below the required {t.min_compute_capability}: remove it from the fleet")
    total = gpu.get("memory_total_mib")
    if t.min_memory_mib and total is not None and total < t.min_memory_mib:
        out.add(ERROR, "memory_size", gpu,
                f"{label(gpu)} has {total} MiB, below the required {t.min_memory_mib} MiB: "
                "use a larger card or lower min_memory_mib")


def _check_ecc(gpu: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    where = label(gpu)
    if t.require_ecc and gpu.get("ecc_mode") is False:
        out.add(ERROR, "ecc_mode", gpu,
                f"ECC is disabled on {where}: enable it with `nvidia-smi -i {gpu['index']} -e 1` "
                "and reboot")
    elif t.require_ecc and gpu.get("ecc_mode") is None:
        out.add(ERROR, "ecc_mode", gpu,
                f"{where} does not report ECC: without ECC memory errors go unseen; use a card "
                "with ECC or set require_ecc to false")
    ecc = gpu.get("ecc") or {}
    aggregate = (ecc.get("aggregate") or {}).get("uncorrected")
    volatile = ecc.get("volatile") or {}
    uncorrected = volatile.get("uncorrected")
    pending = (gpu.get("retired_pages") or {}).get("pending") or (
        gpu.get("remapped_rows") or {}).get("pending")
    if aggregate is not None and aggregate > t.max_aggregate_uncorrected_ecc:
        lifetime = _count(aggregate, "uncorrectable ECC error")
        if uncorrected == 0 and not pending:
            # The seed's "historical" case: errors in the card's past, none since the driver
            # loaded, nothing waiting to be retired.
            out.add(WARNING, "ecc_aggregate_uncorrected", gpu,
                    f"{where} has had {lifetime} in its lifetime but "
                    "none since the driver loaded and no page pending retirement: history, not "
                    "a current fault. Reset the counters where supported (`nvidia-smi -i "
                    f"{gpu['index']} -p 1`), burn it in under load (`onecat health --local` "
                    "after a long benchmark) and watch: keep the card if no error returns")
        elif not pending and (uncorrected is None
                              or uncorrected <= t.max_volatile_uncorrected_ecc):
            # One reason per fault: a pending page is named by the memory-repair check, and
            # errors over the limit since the driver loaded by the check below (with this count).
            why = ("the counter since the driver loaded is unreadable" if uncorrected is None
                   else "more arrived since the driver loaded")
            out.add(ERROR, "ecc_aggregate_uncorrected", gpu,
                    f"{where} has had {lifetime} in its lifetime and "
                    f"{why}: its memory is failing and quantized inference turns to NaN or "
                    "garbage; take the card out of service")
    if uncorrected is not None and uncorrected > t.max_volatile_uncorrected_ecc:
        history = (f" ({aggregate} in its lifetime)"
                   if aggregate is not None and aggregate > uncorrected else "")
        out.add(ERROR, "ecc_volatile_uncorrected", gpu,
                f"{where} has {_count(uncorrected, 'uncorrectable ECC error')} since the driver "
                f"loaded{history}: its memory is failing and quantized inference turns to NaN "
                "or garbage; drain the node, reboot, and replace the card if they return")
    corrected = volatile.get("corrected")
    if corrected is not None and corrected > t.max_volatile_corrected_ecc:
        out.add(WARNING, "ecc_volatile_corrected", gpu,
                f"{where} has {_count(corrected, 'corrected ECC error')} since the driver loaded "
                f"(limit {t.max_volatile_corrected_ecc}): the memory is wearing; plan a "
                "replacement")


def _check_memory_repair(gpu: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    where = label(gpu)
    pages = gpu.get("retired_pages") or {}
    rows = gpu.get("remapped_rows") or {}
    if pages.get("pending"):
        out.add(ERROR, "retired_pages_pending", gpu,
                f"{where} has a page pending retirement: reboot the node (or reset the GPU) so "
                "the bad page is retired before serving")
    single, double = pages.get("single_bit"), pages.get("double_bit")
    if single is not None or double is not None:
        total = (single or 0) + (double or 0)
        detail = f"{total} retired pages ({single or 0} single-bit, {double or 0} double-bit)"
        recent = pages.get("double_bit_last_week")
        if total >= t.max_retired_pages:
            out.add(ERROR, "retired_pages", gpu,
                    f"{where} has {detail}, at or above DCGM's limit {t.max_retired_pages}: "
                    "replace the card")
        elif (double or 0) > t.warn_retired_pages:
            if recent is not None and recent > t.max_double_bit_retirements_per_week:
                out.add(ERROR, "retired_pages", gpu,
                        f"{where} has {detail}: more than DCGM's soft limit of "
                        f"{t.warn_retired_pages} double-bit pages and {recent} more retired in "
                        "the past week (DCGM fails above 1 a week): replace the card")
            else:
                rate = ("none" if recent == 0 else "unknown" if recent is None else str(recent))
                out.add(WARNING, "retired_pages", gpu,
                        f"{where} has {detail}: more than DCGM's soft limit of "
                        f"{t.warn_retired_pages} double-bit pages (new ones in the past week: "
                        f"{rate}); DCGM fails it when more than "
                        f"{t.max_double_bit_retirements_per_week} a week follow: re-check "
                        "weekly and plan a replacement")
    if rows.get("pending"):
        out.add(ERROR, "remapped_rows", gpu,
                f"{where} has a row remapping pending: reset the GPU or reboot before serving")
    if rows.get("failure"):
        out.add(ERROR, "remapped_rows", gpu,
                f"{where} failed to remap a memory row: take the card out of service and "
                "replace it")
    known = [v for v in (*pages.values(), *rows.values()) if v is not None]
    if not known:
        out.add(WARNING, "memory_repair", gpu,
                f"{where} reports neither retired pages nor remapped rows: its memory repair "
                "state is unknown; check `nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER`")


def _check_pcie(gpu: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    pcie = gpu.get("pcie") or {}
    gen, max_gen = pcie.get("gen"), pcie.get("max_gen")
    width, max_width = pcie.get("width"), pcie.get("max_width")
    where = label(gpu)
    if (max_gen is not None and max_gen < t.min_pcie_gen) or (
        max_width is not None and max_width < t.min_pcie_width
    ):
        out.add(ERROR, "pcie_limit", gpu,
                f"the PCIe link of {where} can train at most Gen{max_gen} x{max_width}, below the "
                f"required Gen{t.min_pcie_gen} x{t.min_pcie_width}: move the card to a full "
                "x16 slot or fix the slot's PCIe setting in the BIOS")
    if None in (gen, max_gen, width, max_width):
        return
    if gen < max_gen or width < max_width:
        idle = "gpu_idle" in (gpu.get("throttle_reasons") or [])
        out.add(WARNING, "pcie_link", gpu,
                f"the PCIe link of {where} runs at Gen{gen} x{width}, below its maximum "
                f"Gen{max_gen} x{max_width}. An idle GPU may downtrain its link to save power"
                f"{' (this one reports idle)' if idle else ''}: re-check under load with "
                "`nvidia-smi -q -d PCI`; if it stays low, reseat the card and check the riser")


def _is_ours(process: dict[str, Any], t: Thresholds) -> bool:
    name = process.get("name") or ""
    return any(allowed and allowed in name for allowed in t.allowed_processes)


def _check_usage(gpu: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    where = label(gpu)
    if gpu.get("display_active") and not t.allow_display_active:
        out.add(ERROR, "display_active", gpu,
                f"a display is active on {where} and takes memory from serving: unplug the "
                "monitor or move the console to the onboard graphics, then reboot")
    if t.allow_foreign_processes:
        return
    for process in gpu.get("processes") or []:
        if _is_ours(process, t):
            continue
        used = process.get("used_mib")
        held = "memory" if used is None else f"{used} MiB"
        out.add(ERROR, "foreign_process", gpu,
                f"process {process['pid']} ({process.get('name') or 'name unknown'}) holds "
                f"{held} on {where}: stop it (`kill {process['pid']}`) before serving, or "
                "list it in allowed_processes")


def _check_thermals(gpu: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    where = label(gpu)
    temperature = gpu.get("temperature_c")
    if temperature is not None and temperature >= t.max_temperature_c:
        out.add(WARNING, "temperature", gpu,
                f"{where} is at {temperature} C (limit {t.max_temperature_c} C): check the "
                "airflow and fans")
    slowdowns = [r for r in gpu.get("throttle_reasons") or [] if r in SLOWDOWN_REASONS]
    if slowdowns:
        cause = next(SLOWDOWN_CAUSES[r] for r in SLOWDOWN_CAUSES if r in slowdowns)
        out.add(WARNING, "throttle", gpu,
                f"clocks of {where} are held down ({', '.join(slowdowns)}) by {cause}; "
                "`nvidia-smi -q -d PERFORMANCE` shows it")


def _check_unreadable(gpu: dict[str, Any], out: _Problems) -> None:
    """A GPU the driver counts but cannot reach: lost (NVML_ERROR_GPU_IS_LOST, after Xid 79
    "fallen off the bus") or with no handle at all."""
    errors = gpu.get("read_errors") or []
    if gpu.get("lost"):
        out.add(ERROR, "gpu_lost", gpu,
                f"{label(gpu)} is lost: the driver still counts it but NVML answers "
                "\"GPU is lost\" (fallen off the bus, Xid 79): drain the node and reboot it; "
                "reseat or replace the card if it is lost again")
        return
    why = "; ".join(f"{e.get('field')}: {e.get('error')}" for e in errors) or "no handle"
    out.add(ERROR, "gpu_unreadable", gpu,
            f"{label(gpu)} cannot be read ({why}): reset the GPU or reboot the node, and "
            "replace the card if it stays unreadable")


def _check_read_errors(gpu: dict[str, Any] | None, errors: list[dict[str, Any]],
                       out: _Problems) -> None:
    where = "NVML" if gpu is None else label(gpu)
    for error in errors:
        fatal = error.get("code") in FATAL_NVML_CODES
        out.add(ERROR if fatal else WARNING, "nvml_read", gpu,
                f"reading {error['field']} of {where} failed: {error['error']} (NVML code "
                f"{error.get('code')}); "
                + ("reset the GPU or reboot, and replace it if it repeats" if fatal
                   else "check the driver with `nvidia-smi -q`"))


def _check_xid(readings: dict[str, Any], t: Thresholds, out: _Problems) -> None:
    if not t.check_xid:
        return
    events = readings.get("xid_events")
    if events is None:
        out.add(WARNING, "xid", None,
                f"Xid events were not checked: {readings.get('xid_error') or 'no kernel log'}; "
                "run the check as root or give it the kernel log path")
        return
    gpus = {gpu["index"]: gpu for gpu in readings.get("gpus") or []}
    for event in sorted(events, key=lambda e: (e.get("gpu") is None, e.get("gpu") or 0,
                                               e["pci_bus_id"], e["code"])):
        code = event["code"]
        gpu = gpus.get(event.get("gpu"))
        where = label(gpu) if gpu else f"the GPU at {event['pci_bus_id']} (not visible to NVML)"
        what = XID_DESCRIPTIONS.get(code, "see NVIDIA's Xid catalog")
        times = "once" if event["count"] == 1 else f"{event['count']} times"
        if code in t.xid_error_codes:
            advice = XID_ADVICE.get(code, "drain the node and follow NVIDIA's Xid catalog")
            out.add(ERROR, "xid", gpu,
                    f"the kernel logged Xid {code} ({what}) {times} since boot on {where}: "
                    f"{advice}; the log clears at the next reboot")
        else:
            out.add(WARNING, "xid", gpu,
                    f"the kernel logged Xid {code} ({what}) {times} since boot on {where}: "
                    "usually the workload or the driver, not the card; check the workload's logs")


def recommend(readings: dict[str, Any]) -> dict[str, Any]:
    """What the serve role should do with this topology."""
    pairs = readings.get("pairs") or []
    count = readings.get("gpu_count") or 0
    reasons = []
    p2p_broken = [p for p in pairs if p.get("p2p_read") != "OK" or p.get("p2p_write") != "OK"]
    pcie_only = [p for p in pairs if not p.get("nvlinks")]
    for pair in p2p_broken:
        reasons.append(f"GPUs {pair['gpus'][0]}-{pair['gpus'][1]}: P2P read {pair.get('p2p_read')}"
                       f", write {pair.get('p2p_write')}: set NCCL_P2P_DISABLE=1")
    for pair in pcie_only:
        reasons.append(f"GPUs {pair['gpus'][0]}-{pair['gpus'][1]} talk over PCIe "
                       f"({pair.get('topology')}): custom all-reduce hangs there; pass "
                       "--disable-custom-all-reduce and prefer one replica per GPU when the "
                       "model fits one card")
    if count == 0:
        parallelism = None
    elif count == 1:
        parallelism = "single"
    elif pcie_only or p2p_broken:
        parallelism = "data"
    else:
        parallelism = "tensor"
    return {
        "nccl_p2p_disable": bool(p2p_broken),
        "disable_custom_all_reduce": bool(pcie_only),
        "preferred_parallelism": parallelism,
        "reasons": reasons,
    }


def judge(readings: dict[str, Any], thresholds: Thresholds | None = None) -> dict[str, Any]:
    """{verdict, problems, recommendations} for one node's readings."""
    t = thresholds or Thresholds()
    out = _Problems()
    _check_count(readings, t, out)
    for gpu in readings.get("gpus") or []:
        if gpu.get("lost") or gpu.get("reachable") is False:
            _check_unreadable(gpu, out)  # one reason for the GPU: nothing else can be read
            continue
        _check_identity(gpu, t, out)
        _check_ecc(gpu, t, out)
        _check_memory_repair(gpu, t, out)
        _check_pcie(gpu, t, out)
        _check_usage(gpu, t, out)
        _check_thermals(gpu, t, out)
        _check_read_errors(gpu, gpu.get("read_errors") or [], out)
    _check_read_errors(None, readings.get("read_errors") or [], out)
    _check_xid(readings, t, out)
    severities = {problem["severity"] for problem in out.items}
    verdict = "unhealthy" if ERROR in severities else "degraded" if severities else "healthy"
    return {"verdict": verdict, "problems": out.items, "recommendations": recommend(readings)}


def fails(verdict: str, fail_on: str) -> bool:
    """Whether a verdict fails under fail_on = error | warning | never."""
    if fail_on == "error":
        return verdict == "unhealthy"
    if fail_on == "warning":
        return verdict in ("unhealthy", "degraded")
    return False


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def summary(facts: dict[str, Any]) -> str:
    """The one-line verdict: verdict, GPU count, error/warning counts, topology, driver."""
    problems = facts.get("problems") or []
    errors = sum(1 for p in problems if p["severity"] == ERROR)
    warnings = len(problems) - errors
    topology = ",".join(str(p.get("topology")) for p in facts.get("pairs") or []) or "-"
    return (f"{facts['verdict']} ({facts.get('gpu_count', 0)} GPUs, {_count(errors, 'error')}, "
            f"{_count(warnings, 'warning')}, topology {topology}, "
            f"driver {facts.get('driver_version')})")
