"""`onecat deploy`: roll site.yml out to a fleet through ansible-runner."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from onecat.fleet.runner import inventory_problem, print_outcome, run_playbook


def add_run_options(parser: argparse.ArgumentParser, inventory: bool = True) -> None:
    """The options every fleet command shares with ansible-playbook.

    Commands with a local mode add -i/--inventory to their own mode group instead.
    """
    if inventory:
        parser.add_argument("-i", "--inventory", required=True, help="inventory file or folder")
    parser.add_argument("--limit", help="only these hosts or groups (ansible --limit)")
    parser.add_argument("--check", action="store_true", help="change nothing, report what would")
    parser.add_argument(
        "-e", "--extra-vars", action="append", default=[], metavar="VARS",
        help="extra variables, as for ansible-playbook (repeatable)",
    )
    parser.add_argument("--tags", help="only the stages with these tags")
    if inventory:
        parser.add_argument("--quiet", action="store_true", help="no live progress")


def inventory_usable(inventory: str) -> bool:
    """Whether `inventory` exists and can drive a run; says why not on stderr."""
    if not Path(inventory).exists():
        print(f"onecat: inventory {inventory} not found: pass -i with an inventory "
              "file such as inventory/v100-hosts.yml", file=sys.stderr)
        return False
    problem = inventory_problem(inventory)
    if problem:
        print(f"onecat: {problem}", file=sys.stderr)
        return False
    return True


def run_fleet_command(
    args: argparse.Namespace, playbook: str, extra_vars: Sequence[str] = ()
) -> int:
    if not inventory_usable(args.inventory):
        return 2
    outcome = run_playbook(
        playbook,
        args.inventory,
        limit=args.limit,
        check=args.check,
        extra_vars=[*extra_vars, *args.extra_vars],
        tags=args.tags,
        quiet=getattr(args, "quiet", False),
    )
    print_outcome(outcome)
    return 0 if outcome.rc == 0 and not outcome.failed_hosts else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "deploy",
        help="roll the whole stack out to a fleet (site.yml)",
        description="Run site.yml through ansible-runner with live per-host progress.",
    )
    add_run_options(parser)
    parser.set_defaults(func=lambda args: run_fleet_command(args, "site.yml"))
