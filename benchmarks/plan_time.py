"""Planning time for a 70B-class checkpoint in 30 shards (sparse files: headers only on disk).

Run: .venv/bin/python benchmarks/plan_time.py [--shards 30] [--repeat 20]
Prints the tensor count, header bytes read, and the planning time (first run and median).
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model.plan import GIB, plan_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="onecat-plan-bench-") as root:
        started = time.perf_counter()
        model = mf.build_model(Path(root), mf.LLAMA31_70B, "nvfp4-ct", shards=args.shards)
        built = time.perf_counter() - started
        shards = sorted(model.glob("*.safetensors"))
        header_bytes = 0
        for shard in shards:
            with open(shard, "rb") as handle:
                header_bytes += 8 + struct.unpack("<Q", handle.read(8))[0]
        apparent = sum(shard.stat().st_size for shard in shards)
        on_disk = sum(shard.stat().st_blocks * 512 for shard in shards)
        timings = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            plan = plan_model(str(model))
            timings.append(time.perf_counter() - started)
    print(f"model: Llama-3.1-70B layout, nvfp4 compressed-tensors, {len(shards)} shards")
    print(f"tensors: {sum(1 for _ in mf.tensor_layout(mf.LLAMA31_70B, 'nvfp4-ct'))}")
    print(f"apparent size: {apparent / GIB:.2f} GiB, on disk: {on_disk / 2**20:.2f} MiB (sparse)")
    print(f"header bytes read per plan: {header_bytes / 2**10:.1f} KiB")
    print(f"build time: {built * 1000:.1f} ms")
    print(f"plan time: first {timings[0] * 1000:.1f} ms, median "
          f"{statistics.median(timings) * 1000:.1f} ms, max {max(timings) * 1000:.1f} ms "
          f"over {args.repeat} runs")
    print(f"verdict: fits={plan['fits']}, weights per GPU "
          f"{plan['weight_bytes_per_gpu'] / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
