"""`onecat health`: check GPU health. `--local` checks this machine through NVML;
`-i INVENTORY` checks a fleet through the health playbook.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from typing import Any

from onecat.fleet.deploy import add_run_options, run_fleet_command
from onecat.health.judge import Thresholds, fails
from onecat.health.local import check_local, format_report
from onecat.health.nvml import NvmlUnavailable, kernel_log_problem, unavailable_line

EXIT_OK, EXIT_FAILED, EXIT_CANNOT_CHECK = 0, 1, 2


def add_local_options(parser: argparse.ArgumentParser) -> None:
    """Options of a check on this machine (thresholds default to the module's policy)."""
    defaults = Thresholds()
    parser.add_argument("--expected-gpus", type=int, default=defaults.expected_gpus,
                        help="GPUs this node must have (default %(default)s)")
    parser.add_argument("--min-compute-capability", default=defaults.min_compute_capability,
                        help="lowest acceptable compute capability (default %(default)s)")
    parser.add_argument("--allow-display-active", action="store_true",
                        help="do not fail on a GPU that drives a display")
    parser.add_argument("--allow-foreign-processes", action="store_true",
                        help="do not fail on other processes holding GPU memory")
    parser.add_argument("--allowed-process", action="append", default=[], metavar="NAME",
                        help="a process whose name contains NAME is ours (repeatable)")
    parser.add_argument("--no-xid", action="store_true", help="skip the kernel log Xid scan")
    parser.add_argument("--kernel-log", metavar="PATH",
                        help="read Xid events from this file (default: journalctl -k -b 0, "
                             "/dev/kmsg, dmesg)")
    parser.add_argument("--fail-on", choices=("error", "warning", "never"), default="error",
                        help="exit 1 on this severity or worse (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the full facts as JSON")


# Local-check options and the gpu_health role variables they set in fleet mode.
FLEET_VARS = {
    "expected_gpus": "gpu_health_expected_gpus",
    "min_compute_capability": "gpu_health_min_compute_capability",
    "allow_display_active": "gpu_health_allow_display_active",
    "allow_foreign_processes": "gpu_health_allow_foreign_processes",
    "allowed_process": "gpu_health_allowed_processes",
    "no_xid": "gpu_health_check_xid",
    "kernel_log": "gpu_health_kernel_log_path",
    "fail_on": "gpu_health_fail_on",
}


def _fleet_vars(args: argparse.Namespace) -> list[str]:
    """Only the options given on the command line: the rest stays as the inventory says."""
    add_local_options(parser := argparse.ArgumentParser(add_help=False))
    defaults = parser.parse_args([])
    chosen: dict[str, Any] = {}
    for option, variable in FLEET_VARS.items():
        value = getattr(args, option)
        if value != getattr(defaults, option):
            chosen[variable] = (not value) if option == "no_xid" else value
    return [json.dumps(chosen)] if chosen else []


def _thresholds(args: argparse.Namespace) -> Thresholds:
    return Thresholds.from_mapping({
        "expected_gpus": args.expected_gpus,
        "min_compute_capability": args.min_compute_capability,
        "allow_display_active": args.allow_display_active,
        "allow_foreign_processes": args.allow_foreign_processes,
        "allowed_processes": args.allowed_process,
        "check_xid": not args.no_xid,
    })


def run_local(args: argparse.Namespace) -> int:
    try:
        import pynvml  # only this mode needs NVML
    except ImportError:
        print("onecat health: pynvml is missing; install nvidia-ml-py "
              "(pip install nvidia-ml-py, or apt-get install python3-pynvml)", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    try:
        thresholds = _thresholds(args)
    except ValueError as error:
        print(f"onecat health: {error}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    problem = kernel_log_problem(args.kernel_log) if args.kernel_log and not args.no_xid \
        else None
    if problem:
        print(f"onecat health: --{problem}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    try:
        facts: dict[str, Any] = check_local(pynvml, thresholds, args.kernel_log)
    except NvmlUnavailable as error:
        print(f"onecat health: {unavailable_line(error, platform.node())}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    except pynvml.NVMLError as error:
        print(f"onecat health: NVML failed on {platform.node()} while reading the GPUs: "
              f"{error}; run `nvidia-smi -q` to see which GPU is in trouble", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    print(json.dumps(facts, indent=2, sort_keys=True) if args.json else format_report(facts))
    return EXIT_FAILED if fails(facts["verdict"], args.fail_on) else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    if args.local:
        return run_local(args)
    if args.json:
        print("onecat health: --json is for --local; a fleet run writes each host's facts as "
              "JSON under results/<run-id>/health/", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    return run_fleet_command(args, "playbooks/health.yml", extra_vars=_fleet_vars(args))


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "health", help="check GPU health (ECC, retired pages, PCIe, P2P, Xid) and print a verdict",
        description="Check GPU health (ECC, retired pages, PCIe, P2P, display, processes, Xid) "
                    "and print a verdict. --local checks this machine through NVML.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", action="store_true", help="check this machine's GPUs via NVML")
    mode.add_argument("-i", "--inventory", help="fleet mode: check every node of INVENTORY "
                      "(runs playbooks/health.yml through ansible-runner)")
    add_local_options(parser)
    add_run_options(parser, inventory=False)
    parser.set_defaults(func=_run)


def main_local(argv: Sequence[str] | None = None) -> int:
    """`python -m onecat.health`: the --local mode without the onecat command."""
    parser = argparse.ArgumentParser(prog="python3 -m onecat.health",
                                     description="Check this machine's GPUs through NVML.")
    add_local_options(parser)
    return run_local(parser.parse_args(argv))
