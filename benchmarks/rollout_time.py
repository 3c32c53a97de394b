"""Wall time of a full rollout and of an idempotent re-run, for 1 and 3 simulated nodes.

Uses the `fleet` molecule scenario (Debian 12 systemd nodes in Docker, see README):
for each fleet size it recreates the nodes, runs site.yml against the first N of
them (fleet-c, the third, is held out by the health stage, as on a real fleet
with one bad card), then runs it again with nothing changed. Prints one line per
size. Needs what scripts/bootstrap.sh installs; takes 15-30 minutes on 2 cores.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/rollout_time.py [--sizes 1,3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODES = ["fleet-a", "fleet-b", "fleet-c"]


def molecule(*args: str, quiet: bool = True) -> tuple[int, float]:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}
    started = time.monotonic()
    proc = subprocess.run(
        [str(bindir / "molecule"), *args], cwd=REPO, env=env, check=False,
        stdout=subprocess.DEVNULL if quiet else None, stderr=subprocess.STDOUT if quiet else None,
    )
    return proc.returncode, time.monotonic() - started


def measure(size: int) -> dict[str, float | int]:
    limit = ",".join(NODES[:size])
    molecule("destroy", "-s", "fleet")
    rc, _ = molecule("create", "-s", "fleet")  # create + prepare
    if rc:
        raise SystemExit(f"rollout_time: creating the fleet failed (rc {rc}); run it by hand")
    first_rc, first = molecule("converge", "-s", "fleet", "--", "--limit", limit)
    again_rc, again = molecule("converge", "-s", "fleet", "--", "--limit", limit)
    molecule("destroy", "-s", "fleet")
    return {"size": size, "first_s": first, "first_rc": first_rc, "again_s": again,
            "again_rc": again_rc}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,3", help="fleet sizes to measure (default 1,3)")
    sizes = [int(part) for part in parser.parse_args().sizes.split(",")]
    print(f"{'nodes':>5} {'rollout s':>10} {'rc':>3} {'re-run s':>9} {'rc':>3}")
    for size in sizes:
        row = measure(size)
        print(f"{row['size']:>5} {row['first_s']:>10.0f} {row['first_rc']:>3} "
              f"{row['again_s']:>9.0f} {row['again_rc']:>3}", flush=True)
    print("rc 2 with 3 nodes is expected: fleet-c is held out by the health stage.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
