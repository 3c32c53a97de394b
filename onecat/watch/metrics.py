"""The watch's findings and counters in Prometheus' text format (node_exporter's textfiles).

Names follow Prometheus' conventions: a unit suffix, `_total` for counters, labels for the
GPU and the kind of error; one file per node, replaced atomically by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .deltas import RANK, Finding, gpu_key

THROTTLE_REASONS = ("hw_slowdown", "hw_power_brake_slowdown", "hw_thermal_slowdown",
                    "sw_thermal_slowdown", "sw_power_cap")


def _labels(**labels: str) -> str:
    parts = []
    for name, value in labels.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{name}="{escaped}"')
    return "{" + ",".join(parts) + "}"


def render(readings: dict[str, Any], verdict: str, findings: Iterable[Finding],
           probe_ok: bool | None = None, probe_seconds: float | None = None,
           mode: str | None = None, up: bool = True,
           last_success: float | None = None) -> str:
    """The metrics file's text for one look at the node; `up` is False for a look that could
    not complete (then `readings` is empty and only the watch's own state is written)."""
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
        "# HELP onecat_watch_findings Findings of the last look, by severity and rule.",
        "# TYPE onecat_watch_findings gauge",
    ]
    counts: dict[tuple[str, str], int] = {}
    for finding in findings:
        key = (finding.severity, finding.code)
        counts[key] = counts.get(key, 0) + 1
    lines += [f"onecat_watch_findings{_labels(severity=severity, rule=code)} {count}"
              for (severity, code), count in sorted(counts.items())]
    lines += [
        "# HELP onecat_gpu_ecc_errors_total ECC errors NVML counts, by type and counter.",
        "# TYPE onecat_gpu_ecc_errors_total counter",
    ]
    gpus = readings.get("gpus") or []
    for gpu in gpus:
        for counter in ("volatile", "aggregate"):
            for kind in ("corrected", "uncorrected"):
                value = ((gpu.get("ecc") or {}).get(counter) or {}).get(kind)
                if isinstance(value, int):
                    labels = _labels(gpu=gpu_key(gpu), type=kind, counter=counter)
                    lines.append(f"onecat_gpu_ecc_errors_total{labels} {value}")
    lines += [
        "# HELP onecat_gpu_throttle_active Whether a clock throttle reason is active (1 or 0).",
        "# TYPE onecat_gpu_throttle_active gauge",
    ]
    for gpu in gpus:
        active = set(gpu.get("throttle_reasons") or [])
        lines += [f"onecat_gpu_throttle_active{_labels(gpu=gpu_key(gpu), reason=reason)} "
                  f"{int(reason in active)}" for reason in THROTTLE_REASONS]
    lines += ["# HELP onecat_gpu_temperature_celsius GPU temperature.",
              "# TYPE onecat_gpu_temperature_celsius gauge"]
    lines += [f"onecat_gpu_temperature_celsius{_labels(gpu=gpu_key(gpu))} {gpu['temperature_c']}"
              for gpu in gpus if isinstance(gpu.get("temperature_c"), int)]
    if probe_ok is not None:
        lines += ["# HELP onecat_quality_probe_ok Whether the last quality probe passed.",
                  "# TYPE onecat_quality_probe_ok gauge",
                  f"onecat_quality_probe_ok {int(probe_ok)}"]
    if probe_seconds is not None:
        lines += ["# HELP onecat_quality_probe_seconds Wall time of the last quality probe.",
                  "# TYPE onecat_quality_probe_seconds gauge",
                  f"onecat_quality_probe_seconds {probe_seconds:.3f}"]
    if mode is not None:
        lines += ["# HELP onecat_node_in_rotation Whether the watch keeps the node in the "
                  "gateway's rotation (1) or holds it out (0), by the watch's mode.",
                  "# TYPE onecat_node_in_rotation gauge",
                  f"onecat_node_in_rotation{_labels(mode=mode)} {int(mode == 'in')}"]
    return "\n".join(lines) + "\n"
