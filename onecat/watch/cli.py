"""`onecat status -i INVENTORY`: the fleet now (verdict, watch mode, serving, gateway, last
probe, findings), one row per node, from the files each node's watch writes."""

from __future__ import annotations

import argparse
import json

from onecat.fleet.deploy import inventory_usable
from onecat.fleet.runner import print_outcome, run_playbook

from .status import render, rows_from_document


def run_status(args: argparse.Namespace) -> int:
    if not inventory_usable(args.inventory):
        return 2
    outcome = run_playbook("playbooks/status.yml", args.inventory, limit=args.limit,
                           extra_vars=args.extra_vars, quiet=True)
    status = outcome.run_dir / "status.json"
    if outcome.rc != 0 or not status.is_file():
        print_outcome(outcome)
        return 1
    rows = rows_from_document(json.loads(status.read_text()))
    print(render(rows))
    return 0 if all(r["verdict"] == "healthy" for r in rows) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="the fleet now: each node's watch verdict, serving and gateway state",
        description=__doc__,
    )
    parser.add_argument("-i", "--inventory", required=True, help="inventory file or folder")
    parser.add_argument("--limit", help="only these hosts or groups (ansible --limit)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="extra variables, as for ansible-playbook (repeatable)")
    parser.set_defaults(func=run_status)
