"""Under ONECAT_MOLECULE_DESTROY=never a scenario whose nodes an earlier run left is destroyed
first: molecule's create would take the old containers as they are, and the verify would judge
the last run's leftovers (stop 55's CI did, on a machine that had run the tests before)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import molecule_runs


def test_the_platform_names_are_each_scenarios_nodes() -> None:
    assert molecule_runs.platform_names("default") == ["onecat-node1", "onecat-node2"]
    assert molecule_runs.platform_names("fleet") == ["fleet-a", "fleet-b", "fleet-c"]


def test_never_with_leftovers_destroys_them_before_the_test(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONECAT_MOLECULE_DESTROY", "never")
    assert molecule_runs.commands("fleet", "molecule", ["fleet-b"]) == [
        ["molecule", "destroy", "-s", "fleet"],
        ["molecule", "test", "-s", "fleet", "--destroy", "never"],
    ]


def test_never_on_a_clean_machine_runs_the_test_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONECAT_MOLECULE_DESTROY", "never")
    assert molecule_runs.commands("fleet", "molecule", []) == [
        ["molecule", "test", "-s", "fleet", "--destroy", "never"]]


def test_always_leaves_the_destroy_to_molecule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONECAT_MOLECULE_DESTROY", raising=False)
    assert molecule_runs.commands("default", "molecule", ["onecat-node1"]) == [
        ["molecule", "test", "-s", "default", "--destroy", "always"]]
