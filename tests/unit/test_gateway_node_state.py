"""onecat.gateway.node_state: what a node tells the gateway."""

from __future__ import annotations

import json

from ansible.plugins.filter.core import to_nice_json

from onecat.gateway.node_state import agent_answer, max_num_seqs, node_state, render_state

UNIT = "ExecStart=/usr/bin/docker run ... --max-num-seqs 64 --port 8000\n"


def test_max_num_seqs_is_read_from_the_unit_in_either_spelling() -> None:
    assert max_num_seqs(UNIT) == "64"
    assert max_num_seqs("--max-num-seqs=128 ") == "128"
    assert max_num_seqs("ExecStart=vllm serve /model\n") is None


def test_a_node_in_rotation_keeps_no_reason() -> None:
    state = node_state(
        serving=True,
        in_rotation=True,
        reason="old reason",
        address=" 10.0.0.5\n",
        port=8000,
        agent_port=8003,
        unit_text=UNIT,
    )
    assert state == {
        "serving": True,
        "in_rotation": True,
        "reason": "",
        "address": "10.0.0.5",
        "port": 8000,
        "agent_port": 8003,
        "max_num_seqs": "64",
    }


def test_a_held_node_keeps_its_reason_on_one_line() -> None:
    state = node_state(
        serving=False,
        in_rotation=False,
        reason="gate failed:\n  no answer\t(300 s)",
        address="10.0.0.5",
        port=8000,
        agent_port=0,
        unit_text="",
    )
    assert state["reason"] == "gate failed: no answer (300 s)"
    assert state["max_num_seqs"] is None


def test_node_json_is_written_as_ansible_wrote_it_before() -> None:
    # Same bytes as `{{ state | to_nice_json }}\n`: an upgrade does not rewrite every node.
    for state in (
        node_state(
            serving=True,
            in_rotation=True,
            reason="",
            address="172.17.0.2",
            port=8000,
            agent_port=8003,
            unit_text=UNIT,
        ),
        node_state(
            serving=False,
            in_rotation=False,
            reason="temperature 91 °C",
            address="h",
            port=1,
            agent_port=0,
            unit_text="",
        ),
    ):
        assert render_state(state) == to_nice_json(state) + "\n"
        assert json.loads(render_state(state)) == state


def test_agent_answers_up_or_maint_with_a_short_printable_reason() -> None:
    assert agent_answer(True, "ignored") == "up\n"
    held = agent_answer(False, "GPU 1 at 91 °C\nsecond line " + "x" * 300)
    assert held.startswith("maint down #GPU 1 at 91 C second line x")
    assert held.endswith("\n") and held.count("\n") == 1
    assert len(held) == len("maint down #") + 200 + 1
