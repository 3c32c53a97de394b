"""Fleet medians, outliers, and the health facts that may explain an outlier (pure)."""

from __future__ import annotations

from onecat.bench.stats import median
from onecat.health.judge import SLOWDOWN_REASONS
from onecat.report.load import NodeResult

DEFAULT_THRESHOLD = 0.15  # flag a node more than 15 % below the fleet median output tok/s

# Metrics the report shows per node and level (keys of bench-c<N>.json).
SHOWN = ("output_throughput", "total_token_throughput", "median_ttft_ms", "p99_ttft_ms",
         "median_tpot_ms")


def levels_of(nodes: list[NodeResult]) -> list[int]:
    return sorted({c for node in nodes for c in node.levels})


def fleet_medians(nodes: list[NodeResult]) -> dict[int, dict[str, float | None]]:
    out: dict[int, dict[str, float | None]] = {}
    for c in levels_of(nodes):
        row: dict[str, float | None] = {}
        for key in SHOWN:
            values = [n.levels[c][key] for n in nodes
                      if c in n.levels and isinstance(n.levels[c].get(key), (int, float))]
            row[key] = median(values)
        row["nodes"] = sum(1 for n in nodes if c in n.levels)
        out[c] = row
    return out


def health_explanations(health: dict | None) -> list[str]:
    """PCIe downtrained, thermal/power slowdown, P2P off: what can make a node slow."""
    if not health:
        return []
    reasons: list[str] = []
    for gpu in health.get("gpus") or []:
        index = gpu.get("index", "?")
        pcie = gpu.get("pcie") or {}
        gen, max_gen = pcie.get("gen"), pcie.get("max_gen")
        width, max_width = pcie.get("width"), pcie.get("max_width")
        if (gen is not None and max_gen is not None and gen < max_gen) or (
                width is not None and max_width is not None and width < max_width):
            idle = "gpu_idle" in (gpu.get("throttle_reasons") or [])
            # Links drop to save power at idle: only a drop seen under load is conclusive.
            caveat = ", read while idle: recheck under load" if idle else ""
            reasons.append(f"GPU {index} PCIe link downtrained: Gen{gen} x{width} "
                           f"(card supports Gen{max_gen} x{max_width}{caveat})")
        slow = [r for r in gpu.get("throttle_reasons") or []
                if r in SLOWDOWN_REASONS or r == "sw_power_cap"]
        if slow:
            reasons.append(f"GPU {index} throttling: {', '.join(slow)}")
    for pair in health.get("pairs") or []:
        status = pair.get("p2p_read")
        if status is not None and status != "OK":
            gpus = "-".join(str(g) for g in pair.get("gpus") or [])
            reasons.append(f"GPUs {gpus} P2P off (read: {status}): tensor-parallel traffic "
                           "goes through host memory")
    verdict = health.get("verdict")
    if verdict not in (None, "pass", "ok", "healthy") and not reasons:
        reasons.append(f"health verdict {verdict}: {health.get('summary', '')}".rstrip(": "))
    return reasons


def find_outliers(nodes: list[NodeResult], medians: dict[int, dict],
                  threshold: float = DEFAULT_THRESHOLD) -> list[dict]:
    """Every (node, level) whose output tok/s is more than `threshold` below the fleet median."""
    outliers = []
    for node in nodes:
        for c, result in sorted(node.levels.items()):
            value = result.get("output_throughput")
            fleet = medians.get(c, {}).get("output_throughput")
            if medians.get(c, {}).get("nodes", 0) < 2 or not fleet or value is None:
                continue
            if value < (1 - threshold) * fleet:
                outliers.append({
                    "host": node.host,
                    "concurrency": c,
                    "output_throughput": value,
                    "fleet_median_output_throughput": fleet,
                    "below_median": 1 - value / fleet,
                    "explanations": health_explanations(node.health),
                    "health_known": node.health is not None,
                })
    return outliers


def failures(nodes: list[NodeResult]) -> list[dict]:
    return [{"host": n.host, "concurrency": c, "failed": r.get("failed", 0),
             "errors": r.get("errors") or {}}
            for n in nodes for c, r in sorted(n.levels.items()) if r.get("failed")]
