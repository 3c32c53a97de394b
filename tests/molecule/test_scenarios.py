"""Run each molecule scenario end to end: create, converge, idempotence, verify, destroy.

The scenarios converge real Debian 12 systemd nodes in Docker; their own
verify steps (testinfra, under molecule/<scenario>/tests) hold the assertions.
Here a scenario passes only when molecule's whole test sequence exits 0.
The scenarios run side by side from the start of the session (tests/conftest.py,
tests/molecule_runs.py); each test prints its scenario's log and its verdict.
Deselect with `-m "not molecule"` for a quick run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import molecule_runs


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", molecule_runs.SCENARIOS)
def test_molecule_scenario(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    problem = molecule_runs.docker_problem()
    assert problem is None, problem
    # Stream molecule's own log: when a scenario fails in CI, this is what explains it.
    with capsys.disabled():
        returncode = molecule_runs.run(scenario).follow(sys.stdout)
    assert returncode == 0, (f"molecule scenario {scenario} failed (log above); its failures:\n"
                             f"{molecule_runs.run(scenario).failures()}")
