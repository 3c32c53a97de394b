"""Result files: DIR/bench-c<N>.json per level, DIR/summary.{json,csv,md} for the run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

# Columns of summary.csv (scalars only; errors and per-GPU memory are flattened).
CSV_COLUMNS = (
    "max_concurrency", "num_requests", "completed", "failed", "duration",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput",
    "total_token_throughput",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
      for s in ("mean", "median", "std", "p90", "p99")),
    "kv_cache_usage_perc_max", "num_requests_running_max", "gpu_memory_used_mib", "errors",
)


def level_path(out: Path, concurrency: int) -> Path:
    return out / f"bench-c{concurrency}.json"


def write_level(out: Path, result: dict) -> Path:
    path = level_path(out, result["max_concurrency"])
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path


def _num(value: object, digits: int = 1) -> str:
    """A metric for a table: floats rounded, missing values "n/a"."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


# Shared with the fleet report's tables.
format_number = _num


def level_line(r: dict) -> str:
    return (f"c={r['max_concurrency']}: {r['completed']} ok, {r['failed']} failed, "
            f"{_num(r['output_throughput'])} output tok/s, "
            f"TTFT p50 {_num(r['median_ttft_ms'])} ms, TPOT p50 {_num(r['median_tpot_ms'])} ms")


def _csv_value(value: object) -> object:
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    return "" if value is None else value


def _slos(slos: dict) -> str:
    return " ".join(f"{name}:{value:g}" for name, value in slos.items())


def summary_markdown(run: dict, levels: list[dict]) -> str:
    lines = [
        f"# Benchmark of {run['url']}",
        "",
        f"Model `{run['model']}`, {run['endpoint']}, {run['input_len']} input tokens "
        f"({run['input_len_source']}), {run['output_len']} output tokens, seed {run['seed']}, "
        f"started {run['started_at']}. Sampling: {run.get('sampling') or 'not recorded'}."
        + (f" Goodput SLOs (ms): {_slos(run['goodput_slos_ms'])}."
           if run.get("goodput_slos_ms") else ""),
        "",
        "| c | ok | failed | output tok/s | total tok/s | TTFT p50 ms | TTFT p99 ms "
        "| TPOT p50 ms | ITL p99 ms | E2E p50 ms | KV cache max | GPU MiB (peak) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in levels:
        kv = r.get("kv_cache_usage_perc_max")
        memory = r.get("gpu_memory_used_mib")
        lines.append(
            f"| {r['max_concurrency']} | {r['completed']} | {r['failed']} "
            f"| {_num(r['output_throughput'])} | {_num(r['total_token_throughput'])} "
            f"| {_num(r['median_ttft_ms'])} | {_num(r['p99_ttft_ms'])} "
            f"| {_num(r['median_tpot_ms'])} | {_num(r['p99_itl_ms'])} "
            f"| {_num(r['median_e2el_ms'])} | {'n/a' if kv is None else f'{kv * 100:.0f} %'} "
            f"| {' / '.join(map(str, memory)) if memory else 'n/a'} |")
    if run.get("goodput_slos_ms"):
        lines += ["", "Request goodput (req/s meeting every SLO): " + ", ".join(
            f"c={r['max_concurrency']} {_num(r.get('request_goodput'), 2)}" for r in levels)]
    notes = [f"c={r['max_concurrency']}: {w}" for r in levels for w in r.get("warnings") or []]
    if notes:
        lines += ["", "Warnings:", *(f"- {note}" for note in notes)]
    failures = {k: v for r in levels for k, v in r["errors"].items()}
    if failures:
        lines += ["", "Failures by reason: " + ", ".join(
            f"{reason} ({sum(r['errors'].get(reason, 0) for r in levels)})"
            for reason in sorted(failures))]
    return "\n".join(lines) + "\n"


def write_summary(out: Path, run: dict, levels: list[dict]) -> None:
    (out / "summary.json").write_text(
        json.dumps({"run": run, "levels": levels}, indent=2, sort_keys=True) + "\n")
    with (out / "summary.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in levels:
            writer.writerow([_csv_value(r.get(col)) for col in CSV_COLUMNS])
    (out / "summary.md").write_text(summary_markdown(run, levels))
