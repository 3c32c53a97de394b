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


def test_a_state_that_says_created_with_no_node_there_is_forgotten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone at a path an earlier run used, on a machine whose containers were removed:
    molecule's state says created, so it skipped create and prepare and every verify test
    failed on missing nodes (a fresh-clone run of this stop, before the fix)."""
    monkeypatch.setenv("ONECAT_MOLECULE_DESTROY", "never")
    state = tmp_path / "state.yml"
    state.write_text("# Molecule managed\n\n---\nconverged: true\ncreated: true\nprepared: true\n")
    assert molecule_runs.forget_stale_state("fleet", ["fleet-a"], state) is False  # destroy first
    assert state.exists()
    assert molecule_runs.forget_stale_state("fleet", [], state) is True
    assert not state.exists()
    state.write_text("---\ncreated: false\n")
    assert molecule_runs.forget_stale_state("fleet", [], state) is False and state.exists()
    monkeypatch.delenv("ONECAT_MOLECULE_DESTROY")
    state.write_text("---\ncreated: true\n")
    assert molecule_runs.forget_stale_state("fleet", [], state) is False  # molecule's own destroy


def test_the_state_file_is_where_molecule_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from molecule.text import checksum

    monkeypatch.delenv("MOLECULE_EPHEMERAL_DIRECTORY", raising=False)
    path = molecule_runs.state_file("fleet", Path("/somewhere/main"))
    assert path == (Path.home() / ".ansible" / "tmp" / f"molecule.{checksum('main', 4)}.fleet"
                    / "state.yml")
