"""Helpers shared by the verify tests of every scenario: run playbooks, read the lock.

Each scenario's tests/conftest.py re-exports them (pytest finds fixtures in conftest).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).parents[2]))
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass
class PlaybookRun:
    rc: int
    output: str
    seconds: float = 0.0

    def recap(self, host: str) -> dict[str, int]:
        for match in RECAP.finditer(self.output):
            if match["host"] == host:
                return {k: int(v) for k, v in match.groupdict().items() if k != "host"}
        raise AssertionError(f"no recap line for {host} in:\n{self.output[-3000:]}")


def inventory_dir() -> Path:
    return Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent


def read_lock() -> dict:
    """The lock file, which molecule/shared/group_vars puts in the scenario's ephemeral folder."""
    return json.loads((Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "onecat.lock.json")
                      .read_text())


def playbook_runner(tmp_path: Path, *defaults: str):
    """Run a playbook text against the molecule fleet, the way a user runs ansible-playbook;
    `defaults` come before each run's own arguments (a scenario's standing choices)."""
    inventory = inventory_dir()

    def run(text: str, *extra: str) -> PlaybookRun:
        playbook = tmp_path / "play.yml"
        playbook.write_text(textwrap.dedent(text).replace("@PROJECT@", str(PROJECT)))
        started = time.monotonic()
        proc = subprocess.run(
            ["ansible-playbook", "-i", str(inventory), str(playbook),
             "-e", "onecat_driver_batch=100%", *defaults, *extra],
            capture_output=True,
            text=True,
            timeout=1800,  # a hang guard: the first fleet rollout takes ~10 min on 2 cores
            check=False,
            env={**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"},
        )
        return PlaybookRun(proc.returncode, proc.stdout + proc.stderr,
                           time.monotonic() - started)

    return run


@pytest.fixture
def run_playbook(tmp_path: Path):
    """A playbook runner with no standing choices (playbook_runner)."""
    return playbook_runner(tmp_path)


def wait_booted(host, seconds: float = 180) -> None:
    """Until the node's systemd has booted (running, or degraded by a unit the test ignores);
    the assertions after it say what is missing when it did not in time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if host.run("systemctl is-system-running").stdout.strip() in {"running", "degraded"}:
            return
        time.sleep(2)


# The kernel doubles' loaded module version (tests/kernel_doubles: a tmpfs, like /sys).
LOADED_MODULE = "/run/onecat-test/sys/module/nvidia/version"


def driver_userspace(host) -> str:
    """The installed driver's version (nvidia-smi's package, without epoch and Debian revision):
    the version a boot loads the module at."""
    version = host.check_output("dpkg-query -W -f='${Version}' nvidia-smi")
    return re.sub(r"-[^-]*$", "", version.split(":")[-1])


def boot_start(host) -> str:
    """PID 1's start time: it changes when the node (a container) booted again."""
    return host.check_output("cut -d' ' -f22 /proc/1/stat")


def wait_healthy(host, seconds: float = 90) -> None:
    """Until the node's server answers /health, else fail with its unit's last log lines."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if host.run("curl -fsS http://127.0.0.1:8000/health").rc == 0:
            return
        time.sleep(1)
    raise AssertionError(host.run("journalctl -u vllm -n 30 --no-pager").stdout)
