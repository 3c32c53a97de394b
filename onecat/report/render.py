"""report.md and report.json from the loaded run and its analysis (pure text building)."""

from __future__ import annotations

from onecat.bench.output import format_number as _f
from onecat.report import reference
from onecat.report.analysis import SHOWN, levels_of
from onecat.report.load import NodeResult


def _memory(result: dict) -> str:
    memory = result.get("gpu_memory_used_mib")
    return " / ".join(str(m) for m in memory) if memory else "n/a"


def _range(pair: object) -> str:
    return f"{pair[0]:g}-{pair[1]:g}" if isinstance(pair, tuple) else "-"


def build_json(run_id: str, nodes: list[NodeResult], medians: dict[int, dict],
               outliers: list[dict], failures: list[dict], threshold: float,
               warnings: list[str], plots: list[str]) -> dict:
    return {
        "run_id": run_id,
        "threshold": threshold,
        "levels": levels_of(nodes),
        "nodes": {
            n.host: {
                "levels": {str(c): {**{k: r.get(k) for k in SHOWN},
                                    "gpu_memory_used_mib": r.get("gpu_memory_used_mib"),
                                    "kv_cache_usage_perc_max": r.get("kv_cache_usage_perc_max"),
                                    "completed": r.get("completed"), "failed": r.get("failed")}
                           for c, r in sorted(n.levels.items())},
                "health_summary": (n.health or {}).get("summary"),
            }
            for n in nodes
        },
        "fleet_median": {str(c): row for c, row in medians.items()},
        "reference": reference.as_json(),
        "outliers": outliers,
        "failures": failures,
        "warnings": warnings,
        "plots": plots,
    }


def _headline(nodes: list[NodeResult], gateway_runs: int) -> str:
    through = (f"; {gateway_runs} run(s) through the gateway, shown apart" if gateway_runs
               else "")
    if not nodes:
        return ("No node was benchmarked on its own in this run; the fleet was measured "
                "through the gateway (below).")
    first = next(iter(nodes[0].levels.values()))
    return (f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} benchmarked on "
            f"{'their' if len(nodes) != 1 else 'its'} own, concurrency "
            f"{', '.join(map(str, levels_of(nodes)))}; model `{first.get('model', '?')}`, "
            f"{first.get('input_len', '?')} prompt tokens, {first.get('output_len', '?')} "
            f"output tokens per request{through}.")


def build_markdown(run_id: str, nodes: list[NodeResult], medians: dict[int, dict],
                   outliers: list[dict], failures: list[dict], threshold: float,
                   warnings: list[str], plots: list[str], gateway_runs: int = 0,
                   sections: tuple[list[str], list[str]] = ([], [])) -> str:
    """The report; `sections` are extra sections (markdown) to put before the per-node
    results and after the outliers."""
    before, after = sections
    lines = [f"# Fleet benchmark {run_id}", "", _headline(nodes, gateway_runs)]
    for section in before:
        lines += ["", section]
    if nodes:
        lines += ["", *_node_sections(nodes, medians, outliers, threshold)]
    for section in after:
        lines += ["", section]
    if failures:
        lines += ["", "## Failed requests", ""]
        for f in failures:
            reasons = ", ".join(f"{k} ({v})" for k, v in sorted(f["errors"].items()))
            lines.append(f"- {f['host']} at c={f['concurrency']}: {f['failed']} failed: {reasons}")
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{p.rsplit('.', 1)[0].replace('_', ' ')}]({p})" for p in plots]
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def _node_sections(nodes: list[NodeResult], medians: dict[int, dict], outliers: list[dict],
                   threshold: float) -> list[str]:
    flagged = {(o["host"], o["concurrency"]): o for o in outliers}
    lines = [
        "## Results per node",
        "",
        "| node | c | output tok/s | total tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms "
        "| peak MiB per card | failed | flag |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for node in nodes:
        for c, r in sorted(node.levels.items()):
            outlier = flagged.get((node.host, c))
            flag = f"{outlier['below_median'] * 100:.0f} % below median" if outlier else ""
            lines.append(
                f"| {node.host} | {c} | {_f(r.get('output_throughput'))} "
                f"| {_f(r.get('total_token_throughput'))} | {_f(r.get('median_ttft_ms'))} "
                f"| {_f(r.get('p99_ttft_ms'))} | {_f(r.get('median_tpot_ms'))} "
                f"| {_memory(r)} | {r.get('failed', 0)} | {flag} |")
    lines += [
        "",
        f"## Fleet median next to the seed's reference ({reference.SEED_SOURCE})",
        "",
        f"Seed setup: {reference.SEED_SETUP}. The seed's throughput column is called "
        "\"total throughput\" without saying whether prompt tokens count: compare it with both.",
        "",
        "| c | nodes | output tok/s | total tok/s | TTFT p50 s | TPOT p50 ms "
        "| seed tok/s | seed TTFT s | seed memory per card |",
        "|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for c, row in medians.items():
        seed = reference.SEED_LEVELS.get(c, {})
        ttft = row.get("median_ttft_ms")
        mem = seed.get("memory_per_card_gb")
        lines.append(
            f"| {c} | {row['nodes']} | {_f(row.get('output_throughput'))} "
            f"| {_f(row.get('total_token_throughput'))} "
            f"| {_f(None if ttft is None else ttft / 1000, 2)} "
            f"| {_f(row.get('median_tpot_ms'))} | {_range(seed.get('throughput_tok_s'))} "
            f"| {_range(seed.get('ttft_s'))} | {f'~{mem:g} GB' if mem else '-'} |")
    lines += ["", f"## Outliers (more than {threshold * 100:.0f} % below the fleet median "
                  "output tok/s at a level)", ""]
    if not outliers:
        lines.append(f"No node is more than {threshold * 100:.0f} % below the fleet median "
                     "at any level.")
    by_host: dict[str, list[dict]] = {}
    for o in outliers:
        by_host.setdefault(o["host"], []).append(o)
    for host, rows in by_host.items():
        first = rows[0]
        if first["explanations"]:
            why = "; ".join(first["explanations"])
        elif first["health_known"]:
            why = "the health facts show nothing that explains it"
        else:
            why = "no health.json for this node"
        levels = "; ".join(
            f"c={o['concurrency']}: {o['output_throughput']:.1f} tok/s "
            f"({o['below_median'] * 100:.0f} % below {o['fleet_median_output_throughput']:.1f})"
            for o in rows)
        lines.append(f"- **{host}**: {levels}. Health: {why}.")
    return lines
