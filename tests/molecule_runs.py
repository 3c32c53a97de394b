"""Run molecule scenarios side by side, each with its whole log kept and printed in one piece.

A scenario spends much of its time waiting: on a node's systemd, a gate, a burn-in's load, a
watch timer, and on one Ansible controller process that uses about one of the machine's
cores. Two scenarios started together finish well before the two one after the other. They
start when the first scenario's test runs (tests/conftest.py puts those tests last), or
earlier, when the real-engine tier's first test runs (start_early). Their
logs are not interleaved: each line is kept with the seconds since its scenario started
(`[fleet +612.3s] INFO ...`), and a scenario's test prints its log when it runs: what came
so far at once, then live until the scenario ends. `benchmarks/ci_profile.py` reads the
offsets back into times.

ONECAT_MOLECULE_PARALLEL=0 starts each scenario only when its own test runs, one after the other.
ONECAT_MOLECULE_DESTROY=never (.ci/run sets it: a CI machine is thrown away) skips molecule's
destroy steps, the one before create and the one after verify; the default, always, leaves a
developer's machine as it found it. Even under never, a scenario whose nodes are already there
(a machine that ran the tests before, with never) is destroyed first: molecule's create would
take the old containers as they are, with the last run's images, backups and watch states in
them, and the verify would judge that run's leftovers (stop 55's CI failed on exactly that).
The reverse too: a state that says created with no node there is forgotten, or molecule would
skip create and prepare and verify nothing (forget_stale_state).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def parallel_wanted() -> bool:
    return os.environ.get("ONECAT_MOLECULE_PARALLEL", "1") != "0"


def destroy_wanted() -> str:
    return "never" if os.environ.get("ONECAT_MOLECULE_DESTROY") == "never" else "always"


def docker_problem() -> str | None:
    """Why molecule cannot run here, or None."""
    if not shutil.which("docker"):
        return "docker CLI missing: run scripts/bootstrap.sh"
    docker = subprocess.run(["docker", "info"], capture_output=True, check=False)
    if docker.returncode != 0:
        return "Docker daemon not reachable: run scripts/bootstrap.sh"
    return None


def platform_names(scenario: str) -> list[str]:
    """The node containers a scenario creates (molecule.yml's platforms)."""
    config = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
    return [platform["name"] for platform in config["platforms"]]


def leftover_nodes(scenario: str) -> list[str]:
    """The scenario's node containers that exist already, running or not."""
    found = []
    for name in platform_names(scenario):
        listed = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^/{name}$"],
                                capture_output=True, text=True, check=False)
        if listed.stdout.strip():
            found.append(name)
    return found


def state_file(scenario: str, project: Path = REPO) -> Path:
    """molecule's record of a scenario's steps, in its ephemeral folder: ~/.ansible/tmp/
    molecule.<checksum of the project folder's name>.<scenario>/state.yml (molecule's own
    scenario.py, ephemeral_directory), or MOLECULE_EPHEMERAL_DIRECTORY when that is set."""
    from molecule.text import checksum

    if os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY"):
        return Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "state.yml"
    folder = f"molecule.{checksum(project.name, 4)}.{scenario.replace('/', '--')}"
    return Path.home() / ".ansible" / "tmp" / folder / "state.yml"


def forget_stale_state(scenario: str, leftovers: list[str], state: Path | None = None) -> bool:
    """Under never, a state that says the scenario's nodes were created while none is there (a
    machine whose containers were removed by hand, or a clone at a path an earlier run used)
    makes molecule skip its create and prepare and verify nodes that do not exist: the state
    goes, so molecule starts from its create. Returns whether it went."""
    state = state_file(scenario) if state is None else state
    if destroy_wanted() != "never" or leftovers or not state.is_file():
        return False
    recorded = yaml.safe_load(state.read_text()) or {}
    if not (isinstance(recorded, dict) and recorded.get("created")):
        return False
    state.unlink()
    return True


def commands(scenario: str, molecule: str, leftovers: list[str]) -> list[list[str]]:
    """What runs for a scenario, in order: a destroy first when its nodes are left from an
    earlier run that did not destroy them, then the test."""
    test = [molecule, "test", "-s", scenario, "--destroy", destroy_wanted()]
    if destroy_wanted() == "never" and leftovers:
        return [[molecule, "destroy", "-s", scenario], test]
    return [test]


@dataclass
class Run:
    """One `molecule test -s NAME` in the background, its lines kept as they come."""

    name: str
    started: float = 0.0
    lines: list[str] = field(default_factory=list)
    returncode: int | None = None
    _done: threading.Event = field(default_factory=threading.Event)
    _more: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> Run:
        bindir = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
               "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
        self.started = time.time()
        leftovers = leftover_nodes(self.name) if destroy_wanted() == "never" else []
        if leftovers:
            self._keep(f"nodes left from an earlier run: {', '.join(leftovers)}; "
                       "destroying them before the test")
        elif forget_stale_state(self.name, leftovers):
            self._keep("molecule's state says the nodes were created but none is there: "
                       "state forgotten, the test starts from create")
        steps = commands(self.name, f"{bindir}/molecule", leftovers)
        threading.Thread(target=self._read, args=(steps, env), name=f"molecule-{self.name}",
                         daemon=True).start()
        return self

    def _keep(self, line: str) -> None:
        offset = time.time() - self.started
        with self._more:
            self.lines.append(f"[{self.name} +{offset:.1f}s] {line.rstrip()}")
            self._more.notify_all()

    def _read(self, steps: list[list[str]], env: dict[str, str]) -> None:
        for step in steps:
            proc = subprocess.Popen(
                step, cwd=REPO, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, errors="replace", bufsize=1)
            assert proc.stdout is not None
            for line in proc.stdout:
                self._keep(line)
            self.returncode = proc.wait()
            if self.returncode != 0:
                break
        with self._more:
            self._done.set()
            self._more.notify_all()

    def failures(self, limit: int = 40) -> str:
        """The scenario's own verdicts on what failed: its verify's FAILED/ERROR lines and
        their assertion lines (`E   ...`), so that a CI summary that shows only the end of the
        output still names the failing verify test and why."""
        picked = []
        for line in self.lines:
            text = line.split("] ", 1)[-1]
            if text.startswith(("FAILED ", "ERROR ", "E   ")):
                picked.append(text[:300])
        return "\n".join(picked[:limit])

    def header(self) -> str:
        return f"===== molecule test -s {self.name} (started at {self.started:.1f})"

    def follow(self, out: TextIO) -> int:
        """Print the log so far, then live until the scenario ends; its exit code."""
        print(f"\n{self.header()}", file=out, flush=True)
        shown = 0
        while True:
            with self._more:
                while shown == len(self.lines) and not self._done.is_set():
                    self._more.wait(timeout=30)
                batch = self.lines[shown:]
                shown += len(batch)
                done = self._done.is_set() and shown == len(self.lines)
            for line in batch:
                print(line, file=out)
            out.flush()
            if done:
                assert self.returncode is not None
                return self.returncode


_runs: dict[str, Run] = {}
# The scenarios this session will run (tests/conftest.py fills it after collection).
selected: list[str] = []


def run(name: str) -> Run:
    """The scenario's run. The first asked for starts every selected scenario with it, when
    they run side by side; otherwise only itself."""
    if name not in _runs:
        together = selected if parallel_wanted() and name in selected else [name]
        for other in together:
            if other not in _runs:
                _runs[other] = Run(other).start()
    return _runs[name]


def start_early() -> None:
    """Start the selected scenarios before their tests come (the real-engine tier runs
    meanwhile: tests/conftest.py), when they run side by side and Docker is there; where it
    is not, the scenarios' own tests say so."""
    if selected and parallel_wanted() and docker_problem() is None:
        run(selected[0])
