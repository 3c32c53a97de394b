"""`python3 -m onecat.bench --url ... --out DIR`: the benchmark without the rest of onecat.

What the benchmark role runs on a node: onecat.bench needs aiohttp (its HTTP client,
which the role installs into the client's venv) and optionally pynvml (GPU memory), so
copying the `onecat` package there is enough; neither Ansible nor matplotlib has to be
installed there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onecat.bench.cli import DESCRIPTION, add_arguments


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m onecat.bench", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
