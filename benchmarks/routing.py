"""leastconn against affinity routing, side by side: multi-turn chat (one shared system prompt,
and K tenants each with its own) and distinct prompts.

N stand-in engines on loopback (the seed's timing: prefill 10 ms + 0.6 ms per token not in
the prefix cache, one prefill at a time; decode 25 ms + 3.5 ms per other running sequence),
each with the KV cache and --max-num-seqs the planner gives Qwen2.5-14B NVFP4 on 2xV100 16 GB
at TP2 and 8192 tokens (onecat.model.plan on a header-only copy of its checkpoint), behind a
real HAProxy rendered from the gateway role's template, once with `gateway_balance:
leastconn` and once with `affinity`, fresh engines (cold caches) for each. In each mode:

- `onecat bench --workload multiturn`: conversations x turns sharing one system prompt, the
  prefix-cache hit rate and the missed prompt tokens from the engines' vLLM counters, each
  node's share from HAProxy;
- the same with --tenants K (issue 51): conversation n has tenant n mod K's own system prompt,
  so K prompts compete for each node's cache and leastconn computes each on every node;
- `onecat bench` (random, distinct prompts) at one concurrency level through the gateway.

    .venv/bin/python benchmarks/routing.py [--conversations 64 --turns 8 --system-len 2048
        --turn-len 300 --output-len 100 --concurrency 32 --nodes 4 --tenants 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "standin_engine"), str(REPO)]

import model_fixtures  # noqa: E402
from gateway_harness import Engine, base_vars, haproxy, wait_until  # noqa: E402

from onecat.bench.multiturn import MultiturnOptions, run_multiturn  # noqa: E402
from onecat.gateway import backends  # noqa: E402
from onecat.gateway.runtime import Runtime, servers  # noqa: E402
from onecat.gateway.share import share  # noqa: E402
from onecat.model.plan import plan_model  # noqa: E402


def planned(work: Path, max_model_len: int) -> tuple[int, int]:
    """(KV cache tokens, --max-num-seqs) the planner gives the 14B NVFP4 checkpoint."""
    model = model_fixtures.build_model(work, model_fixtures.QWEN25_14B, "nvfp4-ct")
    plan = plan_model(str(model), max_model_len=max_model_len)
    return int(plan["max_kv_tokens"]), int(plan["serve_args"]["--max-num-seqs"])


def balance(counts: list[int]) -> float | None:
    mean = sum(counts) / len(counts) if counts else 0
    return round(max(counts) / mean, 3) if mean else None


def run_mode(mode: str, work: Path, engines: list[Engine], args: argparse.Namespace,
             seqs: int) -> dict[str, Any]:
    states = {e.name: {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                       "port": e.port, "max_num_seqs": seqs, "agent_port": 0} for e in engines}
    # "affinity:200": affinity with hash-balance-factor 200 (else --hash-balance-factor);
    # "affinity-load": affinity placed by load and remembered (gateway_affinity_placement).
    balance_mode, _, factor = mode.partition(":")
    variables = base_vars(work / mode)
    (work / mode).mkdir(exist_ok=True)
    variables["gateway_servers"] = [s.as_dict() for s in backends.select(states).servers]
    variables["gateway_balance"] = "affinity" if balance_mode.startswith("affinity") else \
        balance_mode
    variables["gateway_affinity_placement"] = "load" if balance_mode == "affinity-load" else \
        "hash"
    variables["gateway_hash_balance_factor"] = int(factor or args.hash_balance_factor)
    out: dict[str, Any] = {"mode": mode}
    with haproxy(work / mode, variables) as gw:
        runtime = Runtime(gw.socket)
        wait_until(lambda: all(s.status.startswith("UP")
                               for s in servers(runtime.stat(), "onecat_nodes")), timeout=30)
        shapes = [("multiturn", 1)] + ([("tenants", args.tenants)] if args.tenants > 1 else [])
        for shape, tenants in shapes:
            before = runtime.command("show stat")
            options = MultiturnOptions(
                url=gw.url, out=work / mode / shape, conversations=args.conversations,
                turns=args.turns, system_len=args.system_len, tenants=tenants,
                seed=0 if tenants == 1 else 1,  # nothing the first shape left in the caches
                turn_len=args.turn_len, output_len=args.output_len,
                concurrency=args.concurrency, metrics_urls=[e.url for e in engines],
                quiet=True)
            started = time.monotonic()
            report = asyncio.run(run_multiturn(options))
            report["gateway_share"] = share(before, runtime.command("show stat"))
            report["busiest_over_mean_requests"] = balance(
                [row["requests"] for row in report["gateway_share"]["servers"].values()])
            out[shape] = report
            print(f"  {mode}: {shape} done in {time.monotonic() - started:.0f} s", flush=True)
        before = runtime.command("show stat")
        result_dir = work / mode / "random"
        command = [sys.executable, "-m", "onecat", "bench", "--url", gw.url, "--quiet",
                   "--concurrency", str(args.concurrency), "--input-len", "500",
                   "--output-len", str(args.output_len), "--requests-per-level",
                   str(args.random_requests), "--warmup", "0", "--out", str(result_dir)]
        started = time.monotonic()
        subprocess.run(command, check=True, cwd=REPO, timeout=3600)
        level = json.loads((result_dir / f"bench-c{args.concurrency}.json").read_text())
        level["gateway_share"] = share(before, runtime.command("show stat"))
        level["busiest_over_mean_requests"] = balance(
            [row["requests"] for row in level["gateway_share"]["servers"].values()])
        out["random"] = level
        print(f"  {mode}: random done in {time.monotonic() - started:.0f} s", flush=True)
    return out


def fmt(value: Any, pattern: str = "{:.0f}") -> str:
    return "-" if value is None else pattern.format(value)


def missed(report: dict[str, Any]) -> int | None:
    """Prompt tokens the nodes computed: vLLM's prefix-cache queries less its hits."""
    cache = report.get("prefix_cache") or {}
    if cache.get("queries") is None:
        return None
    return int(cache["queries"] - cache["hits"])


def shape_rows(shape: str, label: str) -> list[tuple[str, Any]]:
    return [
        (f"{label}: prefix-cache hit rate",
         lambda r: fmt(r[shape]["prefix_cache"]["hit_rate"], "{:.1%}")),
        (f"{label}: missed prompt tokens", lambda r: fmt(missed(r[shape]), "{:,}")),
        (f"{label}: TTFT p50 (ms)", lambda r: fmt(r[shape]["median_ttft_ms"])),
        (f"{label}: TTFT p90 (ms)", lambda r: fmt(r[shape]["p90_ttft_ms"])),
        (f"{label}: output tok/s", lambda r: fmt(r[shape]["output_throughput"], "{:.1f}")),
        (f"{label}: failed", lambda r: str(r[shape]["failed"])),
        (f"{label}: busiest node / mean (requests)",
         lambda r: fmt(r[shape]["busiest_over_mean_requests"], "{:.2f}")),
        (f"{label}: busiest node / mean (prompt tokens)",
         lambda r: fmt(r[shape]["prefix_cache"]["busiest_over_mean"], "{:.2f}")),
    ]


def table(results: dict[str, dict[str, Any]]) -> str:
    modes = list(results)
    rows = [row for shape, label in (("multiturn", "multi-turn"), ("tenants", "tenants"))
            if all(shape in results[m] for m in modes) for row in shape_rows(shape, label)]
    rows += [
        ("distinct prompts: output tok/s", lambda r: fmt(r["random"]["output_throughput"],
                                                         "{:.1f}")),
        ("distinct prompts: TTFT p50 (ms)", lambda r: fmt(r["random"]["median_ttft_ms"])),
        ("distinct prompts: TTFT p90 (ms)", lambda r: fmt(r["random"]["p90_ttft_ms"])),
        ("distinct prompts: failed", lambda r: str(r["random"]["failed"])),
        ("distinct prompts: busiest node / mean (requests)",
         lambda r: fmt(r["random"]["busiest_over_mean_requests"], "{:.2f}")),
    ]
    lines = ["| | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    lines += [f"| {name} | " + " | ".join(get(results[m]) for m in modes) + " |"
              for name, get in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--system-len", type=int, default=2048)
    parser.add_argument("--turn-len", type=int, default=300)
    parser.add_argument("--tenants", type=int, default=8,
                        help="the second multi-turn shape's tenants (0 or 1: skip it)")
    parser.add_argument("--output-len", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--random-requests", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--kv-tokens", type=int, default=0,
                        help="KV cache tokens per node (default: the planner's)")
    parser.add_argument("--hash-balance-factor", type=int, default=125,
                        help="affinity's load bound (gateway_hash_balance_factor)")
    parser.add_argument("--modes", default="leastconn,affinity",
                        help="comma-separated gateway_balance values to run; affinity:F "
                             "runs affinity with hash-balance-factor F; affinity-load[:F] "
                             "places by load and remembers (gateway_affinity_placement)")
    parser.add_argument("--out", type=Path, help="write routing.json here")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        kv_tokens, seqs = planned(work / "model", args.max_model_len)
        kv_tokens = args.kv_tokens or kv_tokens
        print(f"{args.nodes} stand-in nodes, each {kv_tokens:,} KV cache tokens and "
              f"--max-num-seqs {seqs} (the planner's 14B NVFP4 TP2 at {args.max_model_len}); "
              f"{args.conversations} conversations x {args.turns} turns, system prompt "
              f"{args.system_len} tokens (shared, then one per tenant of {args.tenants}), "
              f"turns {args.turn_len}, answers {args.output_len}, {args.concurrency} clients",
              flush=True)
        env = {"STANDIN_PREFILL_MS": "10", "STANDIN_PREFILL_MS_PER_TOKEN": "0.6",
               "STANDIN_DECODE_MS": "25", "STANDIN_DECODE_MS_PER_SEQ": "3.5",
               "STANDIN_KV_CACHE_TOKENS": str(kv_tokens)}
        engine_args = ["--max-num-seqs", str(seqs), "--max-model-len", str(args.max_model_len),
                       "--enable-prefix-caching"]
        for mode in args.modes.split(","):
            engines = [Engine(work, f"node-{i}", env=env, args=engine_args).start()
                       for i in range(args.nodes)]
            try:
                results[mode] = run_mode(mode, work, engines, args, seqs)
            finally:
                for engine in engines:
                    engine.stop()
    print(table(results))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "routing.json").write_text(json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "kv_tokens": kv_tokens,
             "max_num_seqs": seqs, "results": results}, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
