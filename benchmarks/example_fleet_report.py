"""Generate an example fleet report from three stand-in "nodes" (for the README).

Three stand-in engines on 127.0.0.1 play a fleet: node1 and node2 with the
stand-in's default timing (shaped like the seed's 2xV100 table), node3 slower
(as a node with a downtrained PCIe link and P2P off would be), with a
health.json saying so. `onecat bench` runs against each, the results land in
OUT/<host>/ as the benchmark role lays them out, then `onecat report OUT`.
No GPU is involved: memory per card is "n/a" because nothing here has NVML.

    .venv/bin/python benchmarks/example_fleet_report.py [OUT]   # default results/example-standin
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "standin_engine"))
sys.path.insert(0, str(ROOT))

from standin_harness import standin  # noqa: E402

from onecat.bench.session import BenchOptions, run_bench  # noqa: E402
from onecat.report.cli import make_report  # noqa: E402

LEVELS = [1, 8, 16, 32]
DEFAULT_TIMING = {"STANDIN_PREFILL_MS": "10", "STANDIN_PREFILL_MS_PER_TOKEN": "0.5",
                  "STANDIN_DECODE_MS": "25", "STANDIN_DECODE_MS_PER_SEQ": "3.5"}
SLOW_TIMING = {**DEFAULT_TIMING, "STANDIN_DECODE_MS": "32", "STANDIN_DECODE_MS_PER_SEQ": "5"}


def _gpu(index: int, gen: int = 3, throttle: list[str] | None = None) -> dict:
    return {"index": index, "name": "Tesla V100-PCIE-16GB",
            "pcie": {"gen": gen, "max_gen": 3, "width": 16, "max_width": 16},
            "throttle_reasons": throttle or []}


HEALTH = {
    "node1": {"verdict": "healthy", "gpus": [_gpu(0), _gpu(1)],
              "pairs": [{"gpus": [0, 1], "p2p_read": "OK", "topology": "PHB"}]},
    "node2": {"verdict": "healthy", "gpus": [_gpu(0), _gpu(1)],
              "pairs": [{"gpus": [0, 1], "p2p_read": "OK", "topology": "PHB"}]},
    "node3": {"verdict": "degraded", "gpus": [_gpu(0, gen=1), _gpu(1)],
              "pairs": [{"gpus": [0, 1], "p2p_read": "CHIPSET_NOT_SUPPORTED",
                         "topology": "SYS"}]},
}


async def bench_all(urls: dict[str, str], out: Path) -> None:
    runs = [run_bench(BenchOptions(url=url, out=out / host, concurrency=LEVELS, input_len=500,
                                   output_len=64, requests_per_level=None, warmup=1,
                                   quiet=True))
            for host, url in urls.items()]
    await asyncio.gather(*runs)


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "results" / "example-standin"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        urls = {}
        for host in HEALTH:
            timing = SLOW_TIMING if host == "node3" else DEFAULT_TIMING
            server = stack.enter_context(standin(Path(tmp) / host, env=timing,
                                                 name="qwen2.5-14b-quasar-nvfp4"))
            urls[host] = server.url
        print(f"benchmarking {len(urls)} stand-in nodes at c={LEVELS} (about two minutes)")
        asyncio.run(bench_all(urls, out))
    for host, facts in HEALTH.items():
        (out / host / "health.json").write_text(json.dumps(facts, indent=2) + "\n")
    document = make_report(out, out)
    print(f"wrote {out / 'report.md'}: {len(document['outliers'])} outlier(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
