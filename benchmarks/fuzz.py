"""Run the fuzz tests (tests/fuzz) longer than CI does, with fresh random inputs.

    .venv/bin/python benchmarks/fuzz.py                 # 50x CI's inputs per fuzzer
    .venv/bin/python benchmarks/fuzz.py --factor 500    # longer
    .venv/bin/python benchmarks/fuzz.py -k sse          # one fuzzer (pytest -k expression)

CI runs the same fuzzers derandomized (the same inputs every run, so it is never flaky).
Here they run in Hypothesis's "long" profile: random inputs, and an example database in
.hypothesis/ so that an input that once failed is tried first on the next run. The
summary prints how many generated inputs ran per fuzzer and whether any crashed or hung.
Exit status: pytest's (0 when no fuzzer found anything).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factor", type=float, default=50,
                        help="inputs per fuzzer, as a multiple of CI's (default: 50)")
    parser.add_argument("--hang-seconds", type=float, default=5,
                        help="an input running longer than this counts as a hang (default: 5)")
    parser.add_argument("-k", dest="select", help="only the fuzzers matching this expression")
    args = parser.parse_args()
    os.environ.update(ONECAT_FUZZ_PROFILE="long", ONECAT_FUZZ_FACTOR=str(args.factor),
                      ONECAT_FUZZ_HANG_S=str(args.hang_seconds))
    import pytest

    argv = [str(REPO / "tests" / "fuzz"), "-q", "-p", "no:cacheprovider", "--tb=short"]
    if args.select:
        argv += ["-k", args.select]
    started = time.perf_counter()
    code = pytest.main(argv)
    print(f"benchmarks/fuzz.py: factor {args.factor:g}, {time.perf_counter() - started:.0f} s "
          f"wall, exit {int(code)}", file=sys.stderr)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
