"""Verify helpers of this scenario: the shared ones, in molecule/shared/verify_helpers.py."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from verify_helpers import (
    LOADED_MODULE,
    PROJECT,
    PlaybookRun,
    driver_userspace,
    playbook_runner,
    read_lock,
    wait_booted,
    wait_healthy,
)


@pytest.fixture
def run_playbook(tmp_path: Path):
    """The verify runs skip the burn-in (`onecat_burnin=false`, the user's own switch): this
    scenario proves each stage on its two nodes, and a burn-in after each of its restarts would
    prove nothing new (about half a minute a node, on the CPU the fleet scenario beside it
    needs). Its converge burns both nodes in as a user's first run does; molecule/fleet proves
    the burn-in in every rollout, tests/integration/test_burnin.py its verdicts."""
    return playbook_runner(tmp_path, "-e", "onecat_burnin=false")

__all__ = ["LOADED_MODULE", "PROJECT", "PlaybookRun", "driver_userspace",
           "read_lock", "run_playbook", "wait_booted", "wait_healthy"]
