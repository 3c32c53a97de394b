"""`onecat status -i INVENTORY`: the fleet now (verdict, watch mode, serving, gateway, last
probe, findings), one row per node, from the files each node's watch writes, and each
gateway's own HAProxy view of the nodes (a disagreement with the node is flagged)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onecat.fleet.deploy import inventory_usable
from onecat.fleet.runner import print_outcome, run_playbook

from .status import newest_rollout, read_gateways, read_json, report


def run_status(args: argparse.Namespace) -> int:
    if not inventory_usable(args.inventory):
        return 2
    outcome = run_playbook("playbooks/status.yml", args.inventory, limit=args.limit,
                           extra_vars=args.extra_vars, results_dir=args.results, quiet=True)
    status = outcome.run_dir / "status.json"
    # A node that does not answer fails the run (rc 4) but still gets its row: "unreachable".
    if not status.is_file():
        print_outcome(outcome)
        return 1
    document, error = read_json(status)
    if error or not isinstance(document, dict):
        print(f"onecat status: {error or f'{status} is not a JSON object of nodes'}",
              file=sys.stderr)
        return 1
    run_id, rollout = newest_rollout(outcome.run_dir.parent)
    gateways, gateways_error = read_gateways(status.with_name("gateways.json"))
    table = report(document, gateways, rollout, run_id, gateways_error=gateways_error)
    print(table.text)
    for host in outcome.failed_hosts:
        for error in outcome.hosts[host].errors:
            print(f"{host}: {error}")
    # A gateway that disagrees with a node is not a healthy fleet, whatever the watches say.
    return 0 if outcome.rc == 0 and not table.flags and all(
        r["verdict"] == "healthy" for r in table.rows) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="the fleet now: each node's watch verdict, serving and gateway state, and "
             "each gateway's own view",
        description=__doc__,
    )
    parser.add_argument("-i", "--inventory", required=True, help="inventory file or folder")
    parser.add_argument("--limit", help="only these hosts or groups (ansible --limit)")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help="the results folder of the deploys (default: results/): the "
                             "newest rollout.json there names the hosts it held, and why")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="extra variables, as for ansible-playbook (repeatable)")
    parser.set_defaults(func=run_status)
