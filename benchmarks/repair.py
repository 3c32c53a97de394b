"""Fault to readmission: how long the repair ladder keeps a node out, step by step.

Measured: the runner's progress files (`/var/lib/onecat/repair/progress.json`, each step with
its time, `fault_seen` the look that drained the node). The simulated fleet's repair test
(molecule/fleet, `test_the_repair_ladder_*`) prints this breakdown for the reset and the reboot
path and keeps their files in molecule's results folder (`results/repair/reset.json`,
`reboot.json`: the path is in its log); give those, or files fetched from real nodes.

Modelled: the same breakdown with a real host's times as parameters (a V100 pair's model load,
a bare-metal reboot, the burn-in, the watch's interval), for docs/scale.md.

    python3 benchmarks/repair.py [PROGRESS.json ...] [--interval 60] [--reboot-s 600]
        [--load-s 180] [--burnin-min 10] [--reset-s 15] [--drain-s 60] [--gate-s 20]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from onecat.text import one_line


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def breakdown(progress: dict[str, Any]) -> list[tuple[str, float]]:
    """(step, seconds) from the progress file's steps, the wait before the runner first. The
    file was written on a node: step names are printed as one printable line, entries without
    a numeric time are left out."""
    listed = progress.get("steps")
    steps = [s for s in listed if isinstance(s, dict) and _number(s.get("at"))] \
        if isinstance(listed, list) else []
    rows: list[tuple[str, float]] = []
    seen = progress.get("fault_seen")
    if _number(seen) and steps:
        rows.append(("drain at the gateway, then the order (one look)", steps[0]["at"] - seen))
    for step, after in itertools.pairwise(steps):
        rows.append((one_line(step.get("step"))[:52], after["at"] - step["at"]))
    return rows


def model(args: argparse.Namespace, reboot: bool) -> list[tuple[str, float]]:
    """The steps' times on a real host (seconds), from the parameters."""
    rows = [("detect (up to one interval) and drain (one look)", args.interval * 1.5),
            ("lease, requests in flight finish", args.drain_s),
            ("stop the engine", 10.0), ("reset both GPUs", args.reset_s)]
    if reboot:
        rows += [("reboot (bare metal, POST included)", args.reboot_s)]
    rows += [("judge", 2.0), ("start: model load into 2x16 GB", args.load_s),
             ("gate", args.gate_s), ("burn-in", args.burnin_min * 60),
             ("readmit (the runner starts the watch's look)", 5.0)]
    return rows


def _print(title: str, rows: list[tuple[str, float]]) -> None:
    print(f"\n{title}")
    for step, seconds in rows:
        print(f"  {step:<52} {seconds:8.1f} s")
    print(f"  {'fault to readmission':<52} {sum(s for _, s in rows):8.1f} s "
          f"({sum(s for _, s in rows) / 60:.1f} min)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("progress", nargs="*", type=Path, help="progress files (measured)")
    parser.add_argument("--interval", type=float, default=60.0, help="the watch's interval")
    parser.add_argument("--reboot-s", type=float, default=600.0,
                        help="a bare-metal reboot (5-30 min on a 2-socket server)")
    parser.add_argument("--load-s", type=float, default=180.0,
                        help="the engine's start: a ~15 GB NVFP4 checkpoint from local disk")
    parser.add_argument("--burnin-min", type=float, default=10.0)
    parser.add_argument("--reset-s", type=float, default=15.0,
                        help="nvidia-smi -r of a pair (seconds)")
    parser.add_argument("--drain-s", type=float, default=60.0,
                        help="the longest request in flight when the node drains")
    parser.add_argument("--gate-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    files = args.progress
    for path in files:
        try:
            progress = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            print(f"repair benchmark: cannot read {path}: {one_line(error)}", file=sys.stderr)
            return 2
        if not isinstance(progress, dict):
            print(f"repair benchmark: {path} is not a progress file (no JSON object)",
                  file=sys.stderr)
            return 2
        tried = progress.get("tried")
        rungs = "+".join(one_line(t.get("rung", "?")) if isinstance(t, dict) else "?"
                         for t in (tried if isinstance(tried, list) else []))
        _print(f"measured: {path} ({one_line(progress.get('step'))}; tried {rungs or '-'})",
               breakdown(progress))
    if not files:
        print("no progress files measured (run the fleet scenario's repair test, or give "
              "files fetched from nodes); the model only:")
    _print("modelled, reset path (real host)", model(args, reboot=False))
    _print("modelled, reboot path (real host)", model(args, reboot=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
