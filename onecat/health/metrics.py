"""The health stage's check as node_exporter textfile metrics (onecat-health.prom).

A node the health stage holds out never gets a watch (the later stages skip it), so without
this file its fault would reach no dashboard and no alert: fleet-c's uncorrectable ECC error
would be found only in the rollout's summary. The file holds what the last check saw and
judged, under names of its own (`onecat_health_*`): the watch's file (onecat.prom) may be in
the same folder, and node_exporter refuses two files that write one metric family.
"""

from __future__ import annotations

from typing import Any

from .series import gpu_labels, labels, metric_header

VERDICT_RANK = {"healthy": 0, "degraded": 1, "unhealthy": 2}


def _lost(gpu: dict[str, Any]) -> bool:
    return bool(gpu.get("lost")) or gpu.get("reachable") is False


def render(facts: dict[str, Any], now: float) -> str:
    """The metrics file's text for one health check: its readings plus judge()'s verdict."""
    lines: list[str] = []
    metric_header(lines, "onecat_health_verdict", "gauge",
                  "The health stage's verdict at its last check: 0 healthy, 1 degraded, "
                  "2 unhealthy (held out of the rollout).")
    lines.append(f"onecat_health_verdict {VERDICT_RANK.get(str(facts.get('verdict')), 2)}")
    metric_header(lines, "onecat_health_checked_timestamp_seconds", "gauge",
                  "When the health stage last checked the node (Unix time).")
    lines.append(f"onecat_health_checked_timestamp_seconds {now:.0f}")
    counts = {"error": 0, "warning": 0}
    for problem in facts.get("problems") or []:
        severity = str(problem.get("severity")) if isinstance(problem, dict) else "error"
        counts[severity] = counts.get(severity, 0) + 1
    metric_header(lines, "onecat_health_problems", "gauge",
                  "Problems the health stage's last check found, by severity.")
    lines += [f"onecat_health_problems{labels(severity=severity)} {count}"
              for severity, count in sorted(counts.items())]
    gpus = [gpu for gpu in facts.get("gpus") or [] if isinstance(gpu, dict)]
    metric_header(lines, "onecat_health_gpu_lost", "gauge",
                  "Whether the driver counted the GPU but NVML could not reach it at the check.")
    lines += [f"onecat_health_gpu_lost{labels(**gpu_labels(gpu))} {int(_lost(gpu))}"
              for gpu in gpus]
    metric_header(lines, "onecat_health_gpu_ecc_uncorrected_volatile", "gauge",
                  "Uncorrectable ECC errors since the driver loaded, at the check.")
    for gpu in gpus:
        value = ((gpu.get("ecc") or {}).get("volatile") or {}).get("uncorrected")
        if isinstance(value, int) and not isinstance(value, bool) and not _lost(gpu):
            lines.append(f"onecat_health_gpu_ecc_uncorrected_volatile{labels(**gpu_labels(gpu))} "
                         f"{value}")
    return "\n".join(lines) + "\n"
