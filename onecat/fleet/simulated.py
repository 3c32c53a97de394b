"""`onecat fleet up|down`: the local simulated fleet (Debian 12 systemd nodes in Docker).

`up` builds the node image, creates the nodes and stages the stand-ins for the hardware
edge (molecule create + prepare); then the fleet is an ordinary inventory:
`onecat deploy -i inventory/simulated.yml`, exactly what a user runs on real hardware.
`up --converge` runs that deploy too. The `fleet` scenario has three nodes: a PCIe pair
(the canary), an NVLink pair that also runs the gateway, and a pair with an uncorrectable
ECC error that the health stage holds out.

The nodes are a molecule scenario's; this module only finds the tools and runs them,
so what a newcomer starts by hand is exactly what CI tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE_IMAGE_BUILDER = REPO / "tools" / "node-image" / "build.sh"


def _tool(name: str) -> str | None:
    """Prefer the tool installed beside this Python (the project's venv), then PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def _fail(message: str) -> int:
    print(f"onecat fleet: {message}", file=sys.stderr)
    return 2


def _run(command: list[str]) -> int:
    path = os.environ.get("PATH", "")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{path}"}
    return subprocess.call(command, cwd=REPO, env=env)


def fleet(args: argparse.Namespace) -> int:
    if not (REPO / "molecule" / args.scenario / "molecule.yml").exists():
        return _fail(f"no molecule scenario '{args.scenario}' under {REPO / 'molecule'}")
    molecule = _tool("molecule")
    if molecule is None:
        return _fail("molecule is not installed: run `pip install -e '.[test]'` in the repo")
    if shutil.which("docker") is None:
        return _fail("the docker CLI is not installed: run `bash scripts/bootstrap.sh` as root")
    if subprocess.call(["docker", "info"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
        return _fail("Docker is not running: start it (`systemctl start docker` or `dockerd &`)")
    if args.action == "down":
        return _run([molecule, "destroy", "-s", args.scenario])
    status = _run(["bash", str(NODE_IMAGE_BUILDER)])
    if status:
        return _fail("building the node image failed (see above)")
    status = _run([molecule, "create", "-s", args.scenario])
    if not status:
        status = _run([molecule, "prepare", "-s", args.scenario])
    if status or not args.converge:
        return status
    if args.scenario != "fleet":
        return _run([molecule, "converge", "-s", args.scenario])
    return _run([sys.executable, "-m", "onecat", "deploy", "-i",
                 str(REPO / "inventory" / "simulated.yml")])


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fleet",
        help="bring the local simulated fleet up or down",
        description="Create (up) or destroy (down) the simulated 2xV100 fleet in Docker.",
    )
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument(
        "--scenario", default="fleet",
        help="molecule scenario: fleet (3 nodes, one with a bad card) or default (2 nodes); "
             "default: %(default)s",
    )
    parser.add_argument(
        "--converge",
        action="store_true",
        help="with up: also roll site.yml out to it (fleet: onecat deploy -i "
             "inventory/simulated.yml)",
    )
    parser.set_defaults(func=fleet)
