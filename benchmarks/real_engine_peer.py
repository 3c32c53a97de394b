"""`onecat bench` beside upstream's `vllm bench serve` on one real vLLM server (CPU build, the
tests' tiny model): interleaved runs of the same shape, each with fresh prompts, and their
output tok/s, TTFT and TPOT medians side by side (docs/testing.md has a run).

    .venv/bin/python benchmarks/real_engine_peer.py --rounds 4

Needs what the real-engine tier needs (tests/real_engine/engine.py): the torch file in
/opt/wheels; the venv and the model are built on first use. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "real_engine"))
import engine
import peer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="runs of each client (default 4)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args(argv)
    shape = peer.Shape(args.concurrency, args.input_len, args.output_len, args.requests)
    rows: list[tuple[str, int, dict]] = []
    with tempfile.TemporaryDirectory(prefix="onecat-peer-") as folder:
        work = Path(folder)
        server = engine.start(work / "server")
        try:
            for round_ in range(args.rounds):
                # Alternate who goes first: a drift of the machine falls on both.
                order = ("onecat", "vllm") if round_ % 2 == 0 else ("vllm", "onecat")
                for client in order:
                    seed = 1000 + 2 * round_ + (client == "vllm")
                    run = peer.run_onecat if client == "onecat" else peer.run_vllm
                    out = work / f"{client}-{round_}"
                    figures = peer.timed_by_server(
                        server, lambda run=run, out=out, seed=seed: run(server, out, seed, shape))
                    rows.append((client, round_, figures))
                    print(f"round {round_} {client}: {json.dumps(figures)}", file=sys.stderr)
        finally:
            server.stop()
    print(f"Shape: random prompts of {shape.input_len} tokens, {shape.output_len} output tokens "
          f"with EOS ignored, concurrency {shape.concurrency}, {shape.requests} requests, "
          f"{shape.warmup} unmeasured first; {args.rounds} interleaved runs each.\n")
    print("| client | run | completed | failed | output tokens | output tok/s | "
          "TTFT median ms | TPOT median ms | TTFT mean ms (server's) | E2E mean ms (server's) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for client, round_, f in rows:
        seen = f["server"]
        print(f"| {client} | {round_} | {f['completed']} | {f['failed']} | "
              f"{f['total_output_tokens']} | {f['output_throughput']:.1f} | "
              f"{f['median_ttft_ms']:.1f} | {f['median_tpot_ms']:.2f} | "
              f"{f['mean_ttft_ms']:.1f} ({seen['mean_ttft_ms']:.1f}) | "
              f"{f['mean_e2el_ms']:.1f} ({seen['mean_e2el_ms']:.1f}) |")
    for client in ("onecat", "vllm"):
        mine = [f for c, _, f in rows if c == client]
        print(f"| **{client}, median** | | | | | "
              f"{statistics.median(f['output_throughput'] for f in mine):.1f} | "
              f"{statistics.median(f['median_ttft_ms'] for f in mine):.1f} | "
              f"{statistics.median(f['median_tpot_ms'] for f in mine):.2f} | | |")
    if args.json:
        args.json.write_text(json.dumps([{"client": c, "run": r, **f} for c, r, f in rows],
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
