"""Turn a vLLM start-up log into measured values for onecat/model/calibration.py.

Start the pinned engine with VLLM_LOGGING_LEVEL=DEBUG, keep its log, then:

    .venv/bin/python benchmarks/calibrate_from_log.py engine.log [--plan plan.json]

It reads the lines 1Cat-vLLM (ae13773a) prints while it sizes memory, per rank, and prints the
measured values as JSON: the largest over the ranks (the tightest GPU decides the KV cache).
With --plan (the `onecat plan --json` output for the same model and flags) it also prints the
planner's estimate next to each measurement. Line formats, from the engine's code:

- ``worker init memory snapshot: torch_peak=..GiB, free_memory=..GiB, total_memory=..GiB,
  cuda_memory=..GiB, torch_memory=..GiB, non_torch_memory=..GiB, ...`` (debug;
  v1/worker/gpu_worker.py:309, MemorySnapshot.__repr__ utils/mem_utils.py:147-157): the
  non-torch memory before profiling = CUDA context + cuBLAS + NCCL -> cuda_context_nccl_gib;
- ``Model loading took X GiB memory and Y seconds`` (v1/worker/gpu_model_runner.py:9799-9803);
- ``Memory profiling takes X seconds. Total non KV cache memory: AGiB; torch peak memory
  increase: BGiB; non-torch forward increase memory: CGiB; weights memory: DGiB.`` (debug;
  gpu_worker.py:474, MemoryProfilingResult.__repr__ mem_utils.py:177-187): B = activation peak,
  C -> non_torch_increase_gib;
- ``Available KV cache memory: X GiB`` (gpu_worker.py:475-478);
- ``Graph capturing finished in N secs, took X GiB`` (gpu_model_runner.py:11293-11296)
  -> cuda_graph_gib;
- ``GPU KV cache size: N tokens`` and ``Maximum concurrency for N tokens per request: X.XXx``
  (v1/core/kv_cache_utils.py:1733-1737).

format_gib rounds to 2 decimals (mem_utils.py:27-28): the values are GiB to 0.01.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

NUMBER = r"(-?[0-9]+(?:\.[0-9]+)?)"
PATTERNS: dict[str, re.Pattern[str]] = {
    "init": re.compile(r"worker init memory snapshot: .*?non_torch_memory=" + NUMBER + "GiB"),
    "weights": re.compile(r"Model loading took " + NUMBER + r" GiB memory"),
    "profile": re.compile(
        r"Total non KV cache memory: " + NUMBER + r"GiB; torch peak memory increase: " + NUMBER
        + r"GiB; non-torch forward increase memory: " + NUMBER + r"GiB; weights memory: "
        + NUMBER + r"GiB"),
    "kv": re.compile(r"Available KV cache memory: " + NUMBER + r" GiB"),
    "graphs": re.compile(r"Graph capturing finished in " + NUMBER + r" secs, took " + NUMBER
                         + r" GiB"),
    "tokens": re.compile(r"GPU KV cache size: ([0-9,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([0-9,]+) tokens per request: "
                              + NUMBER + "x"),
}
GIB = 1024**3


def parse_log(text: str) -> dict[str, Any]:
    """Measured values from a log; each is the largest over the ranks that printed it."""
    seen: dict[str, list[float]] = {}

    def keep(key: str, value: float) -> None:
        seen.setdefault(key, []).append(value)

    for line in text.splitlines():
        if match := PATTERNS["init"].search(line):
            keep("cuda_context_nccl_gib", float(match[1]))
        if match := PATTERNS["weights"].search(line):
            keep("weights_gib", float(match[1]))
        if match := PATTERNS["profile"].search(line):
            keep("non_kv_cache_gib", float(match[1]))
            keep("activation_peak_gib", float(match[2]))
            keep("non_torch_increase_gib", float(match[3]))
        if match := PATTERNS["kv"].search(line):
            keep("kv_cache_gib", float(match[1]))
        if match := PATTERNS["graphs"].search(line):
            keep("cuda_graph_gib", float(match[2]))
        if match := PATTERNS["tokens"].search(line):
            keep("kv_cache_tokens", float(match[1].replace(",", "")))
        if match := PATTERNS["concurrency"].search(line):
            keep("max_model_len", float(match[1].replace(",", "")))
            keep("max_concurrency", float(match[2]))
    values: dict[str, Any] = {}
    for key, found in seen.items():
        best = min(found) if key in ("kv_cache_gib", "kv_cache_tokens", "max_concurrency") \
            else max(found)
        values[key] = int(best) if key in ("kv_cache_tokens", "max_model_len") else best
    values["ranks"] = max((len(v) for k, v in seen.items() if k != "max_model_len"), default=0)
    return values


def compare(values: dict[str, Any], plan: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each measured value next to the planner's figure for it (GiB)."""
    mem = plan["memory_per_gpu"]
    estimates = {
        "cuda_context_nccl_gib": mem["cuda_context_bytes"] / GIB,
        "non_torch_increase_gib": mem["non_torch_bytes"] / GIB,
        "activation_peak_gib": mem["activation_bytes"] / GIB,
        "cuda_graph_gib": mem["cuda_graph_bytes"] / GIB,
        "weights_gib": (mem["weights_bytes"] + mem.get("rotary_cache_bytes", 0)) / GIB,
        "kv_cache_gib": mem["kv_budget_bytes"] / GIB,
    }
    return {key: {"measured": values[key], "planned": round(estimate, 2)}
            for key, estimate in estimates.items() if key in values}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="vLLM start-up log (VLLM_LOGGING_LEVEL=DEBUG)")
    parser.add_argument("--plan", help="onecat plan --json output for the same model and flags")
    args = parser.parse_args(argv)
    try:
        text = Path(args.log).read_text(errors="replace")
        plan = json.loads(Path(args.plan).read_text()) if args.plan else None
    except (OSError, ValueError) as error:
        print(f"calibrate_from_log: {error}", file=sys.stderr)
        return 2
    values = parse_log(text)
    if not values["ranks"]:
        print(f"calibrate_from_log: {args.log}: no memory-profiling lines found: start the engine "
              "with VLLM_LOGGING_LEVEL=DEBUG and keep the whole log", file=sys.stderr)
        return 1
    out: dict[str, Any] = {"measured": values}
    if plan is not None:
        out["against_plan"] = compare(values, plan)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
