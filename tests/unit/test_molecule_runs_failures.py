"""A failed scenario's assertion names its failing verify tests (CI shows only the end)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import molecule_runs


def test_the_failures_are_the_verify_verdicts_and_their_assertions() -> None:
    run = molecule_runs.Run("fleet")
    run.lines = [
        "[fleet +1.0s] tests/test_rollout.py::test_rerun PASSED",
        "[fleet +2.0s] E       AssertionError: fleet-a still MAINT",
        "[fleet +2.1s] E       assert False",
        "[fleet +3.0s] FAILED tests/test_rollout.py::test_watch - AssertionError: fleet-a",
        "[fleet +3.5s] INFO     [fleet > verify] Executed: Failed (Verifier tests failed)",
    ]
    assert run.failures().splitlines() == [
        "E       AssertionError: fleet-a still MAINT",
        "E       assert False",
        "FAILED tests/test_rollout.py::test_watch - AssertionError: fleet-a",
    ]
    assert run.failures(limit=1) == "E       AssertionError: fleet-a still MAINT"
