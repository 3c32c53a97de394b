"""`onecat repair -i INVENTORY [--limit H] [--release]`: the repair ladder on request (drain,
reset, gate, burn in, readmit; the fleet's lease bounds how many at once), or, with
`--release` after a card swap, forget the card's repair history and put the node back through
the watch's looks (playbooks/repair.yml)."""

from __future__ import annotations

import argparse

from onecat.fleet.deploy import add_run_options, run_fleet_command


def run_repair(args: argparse.Namespace) -> int:
    extra = ["onecat_repair_release=true"] if args.release else []
    return run_fleet_command(args, "playbooks/repair.yml", extra)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "repair",
        help="start the repair ladder on nodes now, or --release one after a card swap",
        description=__doc__,
    )
    add_run_options(parser)
    parser.add_argument("--release", action="store_true",
                        help="after a card swap: forget its repair history, readmit through "
                             "the watch's looks")
    parser.set_defaults(func=run_repair)
