"""`onecat burnin -i INVENTORY`: burn every serving node in under load, one batch at a time,
drained at the gateway meanwhile (playbooks/burnin.yml); evidence in
results/<run-id>/<host>/burnin.json."""

from __future__ import annotations

import argparse

from onecat.fleet.deploy import add_run_options, run_fleet_command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "burnin",
        help="run every serving node under load and refuse the ones that fail (drained meanwhile)",
        description=__doc__,
    )
    add_run_options(parser)
    parser.set_defaults(func=lambda args: run_fleet_command(args, "playbooks/burnin.yml"))
