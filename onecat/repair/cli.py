"""`onecat repair -i INVENTORY [--limit H] [--release] [--all]`: the repair ladder on request
(drain, reset, gate, burn in, readmit; the fleet's lease bounds how many at once), or, with
`--release` after a card swap, forget the card's repair history and put the node back through
the watch's looks (playbooks/repair.yml). An order that would take a node out below the
fleet's floor (onecat_fleet_min_in_rotation at the gateway) is refused on that node, naming
who still serves; `--all` orders it anyway."""

from __future__ import annotations

import argparse

from onecat.fleet.deploy import add_run_options, run_fleet_command


def run_repair(args: argparse.Namespace) -> int:
    extra = ["onecat_repair_release=true"] if args.release else []
    extra += ["onecat_repair_all=true"] if args.all else []
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
    parser.add_argument("--all", action="store_true",
                        help="order the repair even where it takes a node out below the "
                             "fleet's floor (clients may get 503 until a node is back)")
    parser.set_defaults(func=run_repair)
