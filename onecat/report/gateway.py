"""The report's view of runs through the gateway: the fleet as one endpoint, each node's share.

A run through the gateway is not a node: it is kept out of the per-node table, the fleet
medians and the seed comparison (the seed measured one 2-GPU server), and shown on its own.
"""

from __future__ import annotations

from onecat.bench.output import format_number as _f
from onecat.report.load import NodeResult
from onecat.text import one_line


def _best(node: NodeResult) -> float:
    return max((lvl.get("output_throughput") or 0.0) for lvl in node.levels.values())


def gateway_json(gateways: list[NodeResult]) -> dict[str, dict]:
    return {
        run.host: {
            "levels": {str(c): {k: r.get(k) for k in (
                "completed", "failed", "output_throughput", "total_token_throughput",
                "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms")}
                for c, r in sorted(run.levels.items())},
            "share": run.share,
        }
        for run in gateways
    }


def _share_lines(run: NodeResult, nodes: list[NodeResult]) -> list[str]:
    share = run.share or {}
    best = {node.host: _best(node) for node in nodes}
    total, timed = share.get("total", 0), share.get("timed_requests")
    if timed is None:  # written before onecat bench counted its timed requests
        counted = f"HAProxy counted {total} request(s) to the nodes during the run"
    elif total == timed:
        counted = f"HAProxy counted the {timed} timed request(s)"
    else:
        counted = (f"HAProxy counted {total} request(s) to the nodes for {timed} timed "
                   "request(s) (the difference: retries on another node, or other clients)")
    lines = [f"{counted}; the prompts were built and the warm-up sent before counting began.",
             "", "| node | requests | share | gateway status | node's own best output tok/s |",
             "|---|---:|---:|---|---:|"]
    for name, row in sorted(share.get("servers", {}).items()):
        own = f"{best[name]:.1f}" if name in best else "-"
        cells = (one_line(name), one_line(row.get("status", "")))
        lines.append(f"| {cells[0]} | {row.get('requests', 0)} | {row.get('share', 0):.1%} | "
                     f"{cells[1]} | {own} |")
    return lines


def gateway_markdown(gateways: list[NodeResult], nodes: list[NodeResult]) -> str:
    lines = ["## Through the gateway (the fleet as one endpoint)", ""]
    for run in gateways:
        first = next(iter(run.levels.values()))
        lines += [f"Run `{one_line(run.host)}` against {one_line(first.get('url', 'the gateway'))}"
                  f": model `{one_line(first.get('model', '?'))}`, "
                  f"{one_line(first.get('input_len', '?'))} prompt tokens, "
                  f"{one_line(first.get('output_len', '?'))} output tokens per request.", "",
                  "| c | completed | failed | output tok/s | total tok/s | TTFT p50 ms "
                  "| TTFT p99 ms | TPOT p50 ms |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c, r in sorted(run.levels.items()):
            lines.append(f"| {c} | {r.get('completed', 0)} | {r.get('failed', 0)} "
                         f"| {_f(r.get('output_throughput'))} "
                         f"| {_f(r.get('total_token_throughput'))} "
                         f"| {_f(r.get('median_ttft_ms'))} | {_f(r.get('p99_ttft_ms'))} "
                         f"| {_f(r.get('median_tpot_ms'))} |")
        lines += ["", *_share_lines(run, nodes), ""]
    return "\n".join(lines).rstrip("\n")
