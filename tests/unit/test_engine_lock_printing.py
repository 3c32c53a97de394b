"""What `onecat engine lock` prints from an index or a registry is printable (issue 49): an
error or a drift whose text holds escape sequences and newlines is one printable line."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from onecat.engine import cli
from onecat.engine.errors import EngineLockError

HOSTILE = "index said \x1b]0;pwned\x07no\x1b[2J\nonecat engine lock: up to date"


def printed_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    return (captured.out + captured.err).splitlines()


def test_an_error_from_the_index_is_one_printable_line(monkeypatch, capsys) -> None:
    def refuse(args: argparse.Namespace):
        raise EngineLockError(HOSTILE)

    monkeypatch.setattr(cli, "inputs_of", refuse)
    assert cli.main(argparse.Namespace()) == 2
    lines = printed_lines(capsys)
    assert len(lines) == 1 and lines[0].isprintable(), lines
    assert lines[0].startswith("onecat engine lock: index said")


def test_a_drift_from_the_registry_is_one_printable_line(monkeypatch, capsys,
                                                         tmp_path: Path) -> None:
    lock = tmp_path / "engine.lock.json"
    lock.write_text("{}")
    monkeypatch.setattr(cli, "inputs_of", lambda args: (SimpleNamespace(engine_version="x"), {}))
    monkeypatch.setattr(cli, "check", lambda inputs, path, given: SimpleNamespace(
        action="checked", reasons=[HOSTILE], path=path, lock={}, stats=None))
    args = argparse.Namespace(out=lock, check=True, frozen=False, json=False)
    assert cli.main(args) == 1
    lines = printed_lines(capsys)
    assert all(line.isprintable() for line in lines), lines
    assert [line for line in lines if line.startswith("onecat engine lock: drift")] == [
        "onecat engine lock: drift: index said ]0;pwned no [2J onecat engine lock: up to date"]
