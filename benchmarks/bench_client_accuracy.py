"""How exact is `onecat bench`? Run it against the stand-in engine whose timing is known.

The stand-in (tests/standin_engine) runs on 127.0.0.1 with
  TTFT = prefill 50 ms + 0.1 ms x 500 prompt tokens = 100 ms (no queue: c <= max-num-seqs,
         prefills in parallel: STANDIN_PREFILL_SERIAL=0)
  TPOT = --decode-ms (20) per token, independent of concurrency (STANDIN_DECODE_MS_PER_SEQ=0)
and the client runs at c = 1, 32, 128 (--save-detailed, X-Request-Id on every request).
Two truths per request:
  nominal   - the formulas above;
  delivered - what the server really did, from its trace (STANDIN_TRACE_FILE) on the same
              clock: first token written - client send time, and (last - first) / (n - 1).
On a busy machine the server itself misses its nominal times; the error against the
delivered truth is the client's own measurement error (client + loopback). Also printed:
the client's CPU time per 1,000 output tokens. Target: medians within 5 % at c = 128.
Every level runs twice, with the /metrics scraper on (as `onecat bench` runs) and off: the
growth of the client's error with the scraper on, over the error with it off, is what scraping
costs the timing loop (target: at most 1 percentage point; on a loaded machine both errors
carry noise of their own, printed next to it). Only loopback traffic; every loop is bounded.

    .venv/bin/python benchmarks/bench_client_accuracy.py [--decode-ms 20] [--output-len 128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "standin_engine"))
sys.path.insert(0, str(ROOT))

from standin_harness import standin  # noqa: E402

from onecat.bench.session import BenchOptions, run_bench  # noqa: E402
from onecat.bench.stats import median  # noqa: E402

PREFILL_MS, PER_TOKEN_MS, INPUT_LEN = 50.0, 0.1, 500
NOMINAL_TTFT_MS = PREFILL_MS + PER_TOKEN_MS * INPUT_LEN


def delivered(level: dict, trace: dict[str, dict]) -> tuple[list[float], list[float]]:
    """Per request: (client - delivered) TTFT and TPOT errors, as fractions."""
    ttft_err, tpot_err = [], []
    for r in level["requests"]:
        t = trace.get(r["id"])
        if r["error"] or not t or t.get("first_token") is None:
            continue
        start = level["level_started_monotonic_s"] + r["start_ms"] / 1000
        true_ttft = (t["first_token"] - start) * 1000
        ttft_err.append(r["ttft_ms"] / true_ttft - 1)
        if r["tpot_ms"] and t["tokens"] > 1:
            true_tpot = (t["last_token"] - t["first_token"]) * 1000 / (t["tokens"] - 1)
            tpot_err.append(r["tpot_ms"] / true_tpot - 1)
    return ttft_err, tpot_err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,32,128")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client per level")
    parser.add_argument("--decode-ms", type=float, default=20.0,
                        help="true TPOT in ms (20 ms = 6,400 tok/s at c=128)")
    args = parser.parse_args()
    levels = [int(c) for c in args.levels.split(",")]
    true_tpot = args.decode_ms
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    print(f"nominal truth: TTFT {NOMINAL_TTFT_MS:.1f} ms, TPOT {true_tpot:.1f} ms; "
          f"{INPUT_LEN} in / {args.output_len} out; {args.rounds} requests per client")
    print(f"{'c':>4} {'/metrics':>8} {'ok/sent':>9} {'out tok/s':>9} | {'TTFT p50':>8} "
          f"{'vs nom':>7} {'vs dlv':>7} | {'TPOT p50':>8} {'vs nom':>7} {'vs dlv':>7} | "
          f"{'CPU s/1k tok':>12} {'scrapes':>7}")
    worst = 0.0
    scrape_effect = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        trace_file = Path(tmp) / "trace.jsonl"
        env = {"STANDIN_PREFILL_MS": str(PREFILL_MS),
               "STANDIN_PREFILL_MS_PER_TOKEN": str(PER_TOKEN_MS),
               "STANDIN_DECODE_MS": str(true_tpot), "STANDIN_DECODE_MS_PER_SEQ": "0",
               "STANDIN_PREFILL_SERIAL": "0", "STANDIN_TRACE_FILE": str(trace_file)}
        with standin(Path(tmp), env=env, args=["--max-num-seqs", "256"]) as server:
            for c in levels:
                errors = {}
                for scrape in (True, False):
                    options = BenchOptions(
                        url=server.url, out=Path(tmp) / "out", concurrency=[c],
                        input_len=INPUT_LEN, output_len=args.output_len,
                        requests_per_level=c * args.rounds,
                        warmup=1 if c == levels[0] and scrape else 0, timeout=120, quiet=True,
                        detailed=True, seed=c * 2 + scrape, scrape_metrics=scrape)
                    (level,) = asyncio.run(run_bench(options))
                    trace = {}
                    for line in trace_file.read_text().splitlines():
                        record = json.loads(line)
                        trace[record["request_id"]] = record
                    ttft_dlv, tpot_dlv = delivered(level, trace)
                    ttft, tpot = level["median_ttft_ms"], level["median_tpot_ms"]
                    ttft_nom = ttft / NOMINAL_TTFT_MS - 1
                    tpot_nom = tpot / true_tpot - 1
                    ttft_err, tpot_err = median(ttft_dlv), median(tpot_dlv)
                    errors[scrape] = (ttft_err, tpot_err)
                    if c == max(levels) and scrape:
                        worst = max(abs(ttft_err), abs(tpot_err))
                    cpu_per_k = (1000 * level["client_cpu_s"]
                                 / max(level["total_output_tokens"], 1))
                    print(f"{c:>4} {'on' if scrape else 'off':>8} "
                          f"{level['completed']:>4}/{level['num_requests']:<4} "
                          f"{level['output_throughput']:>9.0f} | {ttft:>8.2f} {ttft_nom:>+7.1%} "
                          f"{ttft_err:>+7.2%} | {tpot:>8.2f} {tpot_nom:>+7.1%} "
                          f"{tpot_err:>+7.2%} | {cpu_per_k:>12.4f} "
                          f"{level['metrics_scrapes']:>7}")
                    if level["failed"]:
                        print(f"     failures: {level['errors']}")
                # One-sided: how much worse the client measures while the scraper runs.
                effect = max(abs(errors[True][i]) - abs(errors[False][i]) for i in (0, 1))
                scrape_effect = max(scrape_effect, effect)
    print("vs nom = median against the formulas; vs dlv = median per-request error against "
          "what the server delivered (the client's own error)")
    print(f"worst client error at c={max(levels)}: {worst:.2%} "
          f"({'within' if worst <= 0.05 else 'OUTSIDE'} the 5 % target)")
    print(f"largest growth of the client error with /metrics scraping on: {scrape_effect:.2%} "
          f"({'within' if scrape_effect <= 0.01 else 'OUTSIDE'} the 1 point target)")
    return 0 if worst <= 0.05 and scrape_effect <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
