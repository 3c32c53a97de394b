"""The onecat command line wires subcommands and fails cleanly."""

from __future__ import annotations

import subprocess
import sys

from onecat.cli import SUBCOMMANDS, build_parser, main


def test_every_registered_subcommand_has_a_parser():
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "fleet" in choices
    assert len(choices) >= len(SUBCOMMANDS)


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: onecat" in capsys.readouterr().err


def test_fleet_rejects_an_unknown_scenario(capsys):
    assert main(["fleet", "up", "--scenario", "no-such-scenario"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onecat fleet: no molecule scenario 'no-such-scenario' under ")


def test_module_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "onecat", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert "fleet" in proc.stdout
