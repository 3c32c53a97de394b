"""The `onecat` command line: one subcommand per feature, each registered by its own module.

A feature module exposes `register(subparsers)` that adds its parser and sets
`func` (a callable taking the parsed namespace and returning an exit status).
Adding a subcommand means adding its module name to SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS: tuple[str, ...] = (
    "onecat.fleet.simulated",
    "onecat.fleet.deploy",
    "onecat.model.cli",
    "onecat.model.model_cli",
    "onecat.bench.cli",
    "onecat.report.cli",
    "onecat.health.cli",
    "onecat.watch.cli",
    "onecat.repair.cli",
    "onecat.burnin.cli",
    "onecat.engine.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onecat",
        description="Provision 2xV100 nodes as pinned vLLM NVFP4 servers; check and bench them.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("onecat: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
