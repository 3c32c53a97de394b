"""The watch's findings and counters in Prometheus' text format (node_exporter's textfiles).

Shaped like NVIDIA's dcgm-exporter (etc/default-counters.csv, render_metrics.go): every GPU
series carries `gpu` (the index), `UUID`, `pci_bus_id` and `modelName`; volatile (since the
driver loaded) and aggregate (lifetime) ECC counts are separate metrics, so a `sum()` never
adds one to the other; events are `_total` counters; no label takes a value that changes with
the node's state (the watch's mode is a number, not a label), and every series is written on
every look (zero included) so none vanishes. One file per node, replaced atomically by the
caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from onecat.health.judge import ERROR, WARNING
from onecat.health.series import gpu_labels
from onecat.health.series import labels as _labels
from onecat.health.series import metric_header as _metric

from .act import MODES
from .deltas import RANK, Finding, gpu_key, is_lost
from .throttle import CAUSE_NAMES

THROTTLE_REASONS = ("hw_slowdown", "hw_power_brake_slowdown", "hw_thermal_slowdown",
                    "sw_thermal_slowdown", "sw_power_cap")
# (metric, counter kind, NVML counter): four metrics, as dcgm-exporter's SBE/DBE x VOL/AGG.
ECC_METRICS = (
    ("onecat_gpu_ecc_corrected_volatile_total", "corrected", "volatile",
     "Corrected (single-bit) ECC errors since the driver loaded."),
    ("onecat_gpu_ecc_uncorrected_volatile_total", "uncorrected", "volatile",
     "Uncorrectable (double-bit) ECC errors since the driver loaded."),
    ("onecat_gpu_ecc_corrected_aggregate_total", "corrected", "aggregate",
     "Corrected (single-bit) ECC errors in the GPU's lifetime."),
    ("onecat_gpu_ecc_uncorrected_aggregate_total", "uncorrected", "aggregate",
     "Uncorrectable (double-bit) ECC errors in the GPU's lifetime."),
)




def render(readings: dict[str, Any], verdict: str, findings: Iterable[Finding],
           probe_ok: bool | None = None, probe_seconds: float | None = None,
           mode: str | None = None, up: bool = True,
           last_success: float | None = None,
           throttle_looks: dict[str, Any] | None = None,
           repairs: dict[str, int] | None = None, floor_held: bool = False,
           service_cards: list[dict[str, Any]] | None = None,
           deploy_drain: bool | None = None) -> str:
    """The metrics file's text for one look at the node; `up` is False for a look that could
    not complete (then `readings` is empty and only the watch's own state is written).

    `service_cards`: the cards the repair ladder's service report names while the node waits
    for service (onecat_gpu_service_required, with the serial a replacement ticket needs);
    `deploy_drain`: whether the deploy drains the node on purpose right now (the gateway
    agent's deploy-drain), so an alert on a node out of rotation can stay silent for it."""
    lines = [
        "# HELP onecat_watch_up Whether the watch's last look completed (1) or could not "
        "read the node (0).",
        "# TYPE onecat_watch_up gauge",
        f"onecat_watch_up {int(up)}",
        "# HELP onecat_watch_last_success_timestamp_seconds When the watch last completed a "
        "look (Unix time; 0 never): alert when it falls behind by a few intervals.",
        "# TYPE onecat_watch_last_success_timestamp_seconds gauge",
        f"onecat_watch_last_success_timestamp_seconds {last_success or 0:.0f}",
        "# HELP onecat_node_verdict The watch's verdict: 0 healthy, 1 degraded, 2 unhealthy.",
        "# TYPE onecat_node_verdict gauge",
        f"onecat_node_verdict {RANK[verdict]}",
        "# HELP onecat_watch_findings Findings of the last look, by severity (error, warning).",
        "# TYPE onecat_watch_findings gauge",
    ]
    counts = {ERROR: 0, WARNING: 0}
    for finding in findings:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    lines += [f"onecat_watch_findings{_labels(severity=severity)} {count}"
              for severity, count in sorted(counts.items())]
    gpus = readings.get("gpus") or []
    readable = [gpu for gpu in gpus if not is_lost(gpu)]
    _metric(lines, "onecat_gpu_lost", "gauge",
            "Whether the driver counts the GPU but NVML cannot reach it (GPU_IS_LOST, Xid 79).")
    lines += [f"onecat_gpu_lost{_labels(**gpu_labels(gpu))} {int(is_lost(gpu))}" for gpu in gpus]
    for name, kind, counter, text in ECC_METRICS:
        _metric(lines, name, "counter", text)
        for gpu in readable:
            value = ((gpu.get("ecc") or {}).get(counter) or {}).get(kind)
            if isinstance(value, int):
                lines.append(f"{name}{_labels(**gpu_labels(gpu))} {value}")
    _metric(lines, "onecat_gpu_retired_pages_pending", "gauge",
            "Whether a page waits for retirement (until the GPU is reset or the driver reloads).")
    for gpu in readable:
        pending = (gpu.get("retired_pages") or {}).get("pending")
        if isinstance(pending, bool):
            lines.append(f"onecat_gpu_retired_pages_pending{_labels(**gpu_labels(gpu))} "
                         f"{int(pending)}")
    _metric(lines, "onecat_gpu_xid_errors_total", "counter",
            "Xid events the kernel logged for the GPU since boot, by Xid code.")
    by_bus = {str(gpu.get("pci_bus_id")): gpu for gpu in gpus}
    for event in sorted(readings.get("xid_events") or [],
                        key=lambda e: (str(e.get("pci_bus_id")), e.get("code", 0))):
        if "code" not in event:
            continue
        gpu = by_bus.get(str(event.get("pci_bus_id"))) or {"pci_bus_id": event.get("pci_bus_id")}
        labels = _labels(**gpu_labels(gpu), xid=str(event["code"]))
        lines.append(f"onecat_gpu_xid_errors_total{labels} {int(event.get('count') or 0)}")
    # Which Xid sources this look had: the kernel log, and NVML's Xid events (the listener,
    # onecat/health/xid_events.py). A source that is down is no GPU fault: it is said here.
    sources = {"kernel_log": readings.get("xid_events") is not None}
    if isinstance(readings.get("xid_nvml"), dict):
        sources["nvml_events"] = readings["xid_nvml"].get("state") == "listening"
    _metric(lines, "onecat_xid_source_up", "gauge",
            "Whether an Xid source answered at the look (1) or not (0), by source.")
    lines += [f"onecat_xid_source_up{_labels(source=name)} {int(ok)}"
              for name, ok in sources.items()]
    _metric(lines, "onecat_gpu_throttle_active", "gauge",
            "Whether a clock-event reason is active (1 or 0) at the look.")
    for gpu in readable:
        active = set(gpu.get("throttle_reasons") or [])
        lines += [f"onecat_gpu_throttle_active{_labels(**gpu_labels(gpu), reason=reason)} "
                  f"{int(reason in active)}" for reason in THROTTLE_REASONS]
    _metric(lines, "onecat_gpu_slowdown_looks_total", "counter",
            "Looks that saw a hardware slowdown, by cause (power_brake, thermal, hw_slowdown).")
    for gpu in readable:
        seen = (throttle_looks or {}).get(gpu_key(gpu)) or {}
        lines += [f"onecat_gpu_slowdown_looks_total{_labels(**gpu_labels(gpu), cause=cause)} "
                  f"{int(seen.get(cause) or 0)}" for cause in CAUSE_NAMES]
    _metric(lines, "onecat_gpu_temperature_celsius", "gauge", "GPU temperature.")
    lines += [f"onecat_gpu_temperature_celsius{_labels(**gpu_labels(gpu))} {gpu['temperature_c']}"
              for gpu in readable if isinstance(gpu.get("temperature_c"), int)]
    if probe_ok is not None:
        lines += ["# HELP onecat_quality_probe_ok Whether the last quality probe passed.",
                  "# TYPE onecat_quality_probe_ok gauge",
                  f"onecat_quality_probe_ok {int(probe_ok)}"]
    if probe_seconds is not None:
        lines += ["# HELP onecat_quality_probe_seconds Wall time of the last quality probe.",
                  "# TYPE onecat_quality_probe_seconds gauge",
                  f"onecat_quality_probe_seconds {probe_seconds:.3f}"]
    if mode is not None:
        _metric(lines, "onecat_node_in_rotation", "gauge",
                "Whether the watch keeps the node in the gateway's rotation (1) or out (0).")
        lines.append(f"onecat_node_in_rotation {int(mode == 'in')}")
        _metric(lines, "onecat_watch_mode", "gauge",
                "The watch's mode: " + ", ".join(f"{i} {m}" for i, m in enumerate(MODES)) + ".")
        lines.append(f"onecat_watch_mode {MODES.index(mode) if mode in MODES else -1}")
        _metric(lines, "onecat_node_floor_held", "gauge",
                "Whether the fleet's floor keeps the node in although its watch would drain it "
                "(1): alert on it, the node serves with a fault.")
        lines.append(f"onecat_node_floor_held {int(floor_held)}")
    _service_required(lines, readable, service_cards)
    if deploy_drain is not None:
        _metric(lines, "onecat_node_deploy_drain", "gauge",
                "Whether a deploy drains the node on purpose now (1): out of rotation, planned.")
        lines.append(f"onecat_node_deploy_drain {int(deploy_drain)}")
    if repairs is not None:
        # Counters: they only grow (history.json keeps them across reboots).
        _metric(lines, "onecat_repairs_total", "counter",
                "Repairs the ladder ended, by outcome (readmitted, service_required, failed).")
        lines += [f"onecat_repairs_total{_labels(outcome=outcome)} {count}"
                  for outcome, count in sorted(repairs.items())]
    return "\n".join(lines) + "\n"


def _service_required(lines: list[str], readable: list[dict[str, Any]],
                      cards: list[dict[str, Any]] | None) -> None:
    """onecat_gpu_service_required: 1 for each card the service report names, 0 for every
    other readable card (written on every look, so the series never vanishes); a named card
    NVML cannot read now (lost) is written from the report's own record of it."""
    named = [card for card in cards or [] if isinstance(card, dict)]
    buses = {str(card.get("pci_bus_id") or "") for card in named}
    _metric(lines, "onecat_gpu_service_required", "gauge",
            "Whether the repair ladder asks for the card to be serviced (1), with its serial.")
    seen = set()
    for gpu in readable:
        bus = str(gpu.get("pci_bus_id") or "")
        seen.add(bus)
        labels = _labels(**gpu_labels(gpu), serial=str(gpu.get("serial") or ""))
        lines.append(f"onecat_gpu_service_required{labels} {int(bool(bus) and bus in buses)}")
    for card in named:
        if str(card.get("pci_bus_id") or "") not in seen:
            labels = _labels(**gpu_labels(card), serial=str(card.get("serial") or ""))
            lines.append(f"onecat_gpu_service_required{labels} 1")
