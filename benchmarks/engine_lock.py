"""Time and bytes of `onecat engine lock` against a local index and registry.

A PEP 503 index on loopback (`python -m http.server`) holds `--deps` (40) small wheels the
engine wheel requires (each requiring the next few, so uv has a graph to walk) plus a
`torch`; the engine "release" wheel is about `--wheel-mb` (20) MB (the real one: ~148 MB); Debian's
docker-registry holds a two-arch base image index. Four runs of the real command line:

1. cold: empty cache: the wheel is downloaded, uv resolves with an empty cache, the registry
   is asked;
2. warm: a new lock file with the cache kept (wheel from the cache, uv's cache warm);
3. reuse: the same lock again (nothing resolved, nothing fetched);
4. check: `--check` (the wheel downloaded again, the registry asked again).

For each: wall time, and from the command's own `--json` stats the wheel bytes downloaded and
the seconds of the resolver and of the registry requests (count and bytes); the index's
request log gives the requests and bytes uv and the download took from the index.

    .venv/bin/python benchmarks/engine_lock.py [--deps 40] [--wheel-mb 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from engine_index import build_wheel  # noqa: E402
from engine_parts import BASE_REPO, BASE_TAG, Parts  # noqa: E402

from onecat.engine.resolve import uv_binary, uv_version  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deps", type=int, default=40)
    parser.add_argument("--wheel-mb", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="onecat-bench-engine-lock-") as tmp_name:
        tmp = Path(tmp_name)
        parts = Parts(tmp / "parts").start()
        try:
            built = tmp / "deps"
            for n in range(args.deps):
                requires = [f"dep{m:03d}>=1.0" for m in range(n + 1, min(n + 4, args.deps))]
                for version in ("1.0", "1.1", "1.2"):
                    parts.index.add(build_wheel(built, f"dep{n:03d}", version, requires))
            url, sha = parts.release("bench", [f"dep{n:03d}>=1.0" for n in range(0, args.deps, 5)]
                                     + ["alpha>=1.0", "beta==2.0"],
                                     payload=os.urandom(args.wheel_mb << 19).hex().encode())
            out = tmp / "lock.json"
            base = [sys.executable, "-m", "onecat", "engine", "lock", "--json", "--wheel", url,
                    "--wheel-sha256", sha, "--torch", "torch==2.10.0",
                    "--index-url", parts.index.url, "--cache-dir", str(tmp / "cache"),
                    "--base", f"{parts.registry.host}/{BASE_REPO}:{BASE_TAG}"]
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            runs = [("cold", ["--out", str(out)]), ("warm", ["--out", str(tmp / "warm.json")]),
                    ("reuse", ["--out", str(out)]), ("check", ["--out", str(out), "--check"])]
            uv = uv_version(uv_binary())
            size = (parts.releases / "bench" / Path(url).name).stat().st_size
            print(f"{args.deps * 3 + 4} wheels in the index, engine wheel "
                  f"{Path(url).name} {size / 1e6:.1f} MB, uv {uv}")
            print(f"{'run':6} {'wall s':>7} {'action':>8} {'locked':>6} {'uv s':>6} "
                  f"{'wheel MB':>9} {'wheel s':>7} {'reg req':>7} {'reg B':>6} {'reg s':>6} "
                  f"{'uv index req':>12} {'uv index KB':>11}")
            offset = parts.index.served()[2]
            for name, extra in runs:
                started = time.monotonic()
                proc = subprocess.run(base + extra, capture_output=True, text=True, env=env,
                                      check=False)
                wall = time.monotonic() - started
                if proc.returncode not in (0, 1):
                    print(f"{name}: exit {proc.returncode}: {proc.stderr.strip()}")
                    return 1
                outcome = json.loads(proc.stdout)
                stats = outcome["stats"]
                locked = sum(1 for line in outcome["lock"]["requirements"]["lock"].splitlines()
                             if "==" in line and not line.startswith((" ", "#")))
                requests, served, offset = parts.index.served(offset, exclude="/releases/")
                print(f"{name:6} {wall:7.2f} {outcome['action']:>8} {locked:6d} "
                      f"{stats['resolve_seconds']:6.2f} {stats['wheel_bytes'] / 1e6:9.2f} "
                      f"{stats['wheel_seconds']:7.2f} {stats['registry_requests']:7d} "
                      f"{stats['registry_bytes']:6d} {stats['registry_seconds']:6.3f} "
                      f"{requests:12d} {served / 1e3:11.1f}")
        finally:
            parts.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
