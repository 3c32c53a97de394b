"""library/gateway_node.py through Ansible (`ansible localhost -c local -m gateway_node`).

Writes node.json and the agent's answer, changes nothing the second time, writes nothing in
check mode, holds a node out with its reason, and repairs a file edited by hand. The agent's own
script (from the role's unit template, run with sh as systemd runs it) answers maint for a node
that booted since it was admitted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from adhoc_module import run_module
from gateway_agent import exec_start, render_unit

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module writes root-owned files")


def run(args: dict[str, Any], *, check: bool = False) -> dict[str, Any]:
    return run_module("gateway_node", args, check=check)


def test_records_the_node_once_and_holds_it_out_with_its_reason(tmp_path: Path) -> None:
    unit = tmp_path / "vllm.service"
    unit.write_text("ExecStart=/usr/bin/docker run img --max-num-seqs=32\n")
    folder = tmp_path / "gateway"
    base = {
        "state_dir": str(folder),
        "address": "10.0.0.5",
        "port": 8000,
        "agent_port": 8003,
        "unit_file": str(unit),
        "admitted_file": str(tmp_path / "run" / "admitted"),
    }

    dry = run(base, check=True)
    assert dry["changed"] is True and not folder.exists()
    assert dry["state"]["max_num_seqs"] == "32"

    first = run(base)
    assert first["changed"] is True, first
    assert json.loads((folder / "node.json").read_text()) == first["state"]
    assert (folder / "agent-state").read_text() == "up\n"
    assert oct((folder / "node.json").stat().st_mode & 0o777) == "0o644"
    assert oct(folder.stat().st_mode & 0o777) == "0o755"

    again = run(base)
    assert again["changed"] is False, again

    held = run({**base, "in_rotation": False, "serving": False, "reason": "gate failed: no answer"})
    assert held["changed"] is True
    assert (folder / "agent-state").read_text() == "maint down #gate failed: no answer\n"
    state = json.loads((folder / "node.json").read_text())
    assert state["in_rotation"] is False and state["reason"] == "gate failed: no answer"

    # An answer edited by hand (or a mode changed) is put back.
    (folder / "agent-state").write_text("up\n")
    (folder / "node.json").chmod(0o600)
    repaired = run(base)
    assert repaired["changed"] is True
    assert (folder / "agent-state").read_text() == "up\n"
    assert oct((folder / "node.json").stat().st_mode & 0o777) == "0o644"
    assert json.loads((folder / "node.json").read_text())["in_rotation"] is True


def agent(state_dir: Path, admitted: Path) -> str:
    """The agent's answer: its unit's ExecStart, run as systemd runs it (tests/gateway_agent.py)."""
    argv = exec_start(render_unit(state_dir, admitted))
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout


def test_a_node_that_booted_since_its_admission_is_out_until_admitted_again(tmp_path: Path) -> None:
    # /run is a tmpfs: a boot, planned or not, removes the marker. The serve stage writes it
    # again only when the node passes its gate (and burn-in) and goes back in rotation.
    folder, admitted = tmp_path / "gateway", tmp_path / "run" / "onecat-gateway" / "admitted"
    base = {"state_dir": str(folder), "address": "10.0.0.5", "port": 8000,
            "unit_file": str(tmp_path / "none.service"), "admitted_file": str(admitted)}
    assert agent(folder, admitted).startswith("maint down #booted since it was admitted")

    admitted_run = run(base)
    assert admitted_run["changed"] is True and admitted.exists()
    assert oct(admitted.parent.stat().st_mode & 0o777) == "0o755"
    assert agent(folder, admitted) == "ready up\n"
    (folder / "watch-state").write_text("drain\n")
    assert agent(folder, admitted) == "drain\n"
    (folder / "watch-state").unlink()
    assert run(base)["changed"] is False

    # The boot: the marker goes, the deploy's "up" no longer counts.
    admitted.unlink()
    assert agent(folder, admitted).startswith("maint down #booted since it was admitted")
    # Held out (a failed gate after the boot): the marker stays missing, the node stays out.
    held = run({**base, "in_rotation": False, "reason": "gate failed"})
    assert held["changed"] is True and not admitted.exists()
    assert agent(folder, admitted).startswith("maint down #")
    # In check mode nothing is written, but the change is reported.
    assert run(base, check=True)["changed"] is True and not admitted.exists()
    assert run(base)["changed"] is True and agent(folder, admitted) == "ready up\n"


def test_the_agent_answers_the_whole_state_on_every_check_and_the_deploys_drain_first(
        tmp_path: Path) -> None:
    """Issue 46: `ready up` on every check while the deploy and the watch want the node in;
    the deploy's hold, then its drain (deploy-drain), then an expired watch, then the watch's
    own answer come first, in that order; recording the node's state ends the deploy's drain
    without reporting a change (it is transient)."""
    folder, admitted = tmp_path / "gateway", tmp_path / "run" / "onecat-gateway" / "admitted"
    base = {"state_dir": str(folder), "address": "10.0.0.5", "port": 8000,
            "unit_file": str(tmp_path / "none.service"), "admitted_file": str(admitted)}
    run(base)
    assert [agent(folder, admitted) for _ in range(3)] == ["ready up\n"] * 3
    (folder / "watch-state").write_text("up\n")
    assert agent(folder, admitted) == "ready up\n"
    # The repair runner's drain speaks while the watch says up (an operator's order, once its
    # lease is granted), never over the watch's own drain or maint.
    (folder / "repair-drain").write_text("drain #onecat-repair: requested by an operator\n")
    assert agent(folder, admitted) == "drain #onecat-repair: requested by an operator\n"
    (folder / "watch-state").write_text("maint down #onecat-watch repairing: x\n")
    assert agent(folder, admitted) == "maint down #onecat-watch repairing: x\n"
    (folder / "repair-drain").unlink()
    (folder / "watch-state").write_text("drain #onecat-watch: Xid 48\n")
    assert agent(folder, admitted) == "drain #onecat-watch: Xid 48\n"
    (folder / "watch-expires").write_text(f"{int(time.time()) - 1}\n")
    assert agent(folder, admitted).startswith("drain #onecat-watch: no look for three")
    (folder / "deploy-drain").write_text("drain #onecat-deploy: a restart\n")
    assert agent(folder, admitted) == "drain #onecat-deploy: a restart\n"
    (folder / "deploy-drain").write_text("")
    assert agent(folder, admitted) == "drain #onecat-deploy\n"
    held = run({**base, "in_rotation": False, "reason": "gate failed"})
    assert held["changed"] is True and not (folder / "deploy-drain").exists()
    assert agent(folder, admitted) == "maint down #gate failed\n"
    (folder / "watch-expires").unlink()
    (folder / "watch-state").write_text("up\n")
    assert run(base)["changed"] is True and agent(folder, admitted) == "ready up\n"
    (folder / "deploy-drain").write_text("drain #onecat-deploy: a restart\n")
    assert run(base, check=True)["changed"] is False and (folder / "deploy-drain").exists()
    assert run(base)["changed"] is False and not (folder / "deploy-drain").exists()
    assert agent(folder, admitted) == "ready up\n"


def test_an_empty_address_is_refused_with_the_fix(tmp_path: Path) -> None:
    result = run({"state_dir": str(tmp_path / "g"), "address": " ", "port": 8000})
    assert result.get("failed") is True
    assert "onecat_gateway_address" in result["msg"]
    assert not (tmp_path / "g").exists()
