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


def test_health_fleet_mode_passes_only_the_given_thresholds():
    from onecat.health.cli import _fleet_vars

    args = build_parser().parse_args(
        ["health", "-i", "inv.yml", "--fail-on", "warning", "--no-xid", "--allowed-process", "vllm"]
    )
    assert _fleet_vars(args) == [
        '{"gpu_health_allowed_processes": ["vllm"], "gpu_health_check_xid": false, '
        '"gpu_health_fail_on": "warning"}'
    ]
    assert _fleet_vars(build_parser().parse_args(["health", "-i", "inv.yml"])) == []


def test_health_fleet_mode_refuses_json(capsys, tmp_path):
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all: {}\n")
    assert main(["health", "-i", str(inventory), "--json"]) == 2
    assert "--json is for --local" in capsys.readouterr().err
