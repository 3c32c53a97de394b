"""Refusals and rollbacks: a model that does not fit, an image that produces garbage."""

from __future__ import annotations

import json
import re

import pytest
from conftest import read_lock

SERVE = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/serve.yml"
UNIT = "/etc/systemd/system/vllm.service"


def _node(host) -> bool:
    return host.backend.hostname == "onecat-node1"


def test_planner_refuses_a_model_that_does_not_fit(host, run_playbook):
    if _node(host):
        pytest.skip("runs once, against onecat-node2")
    before = host.file(UNIT).content_string
    run = run_playbook(
        SERVE, "--limit", "onecat-node2", "-e", "vllm_serve_model_dir=llama31-70b-fp16"
    )
    assert run.rc == 2, run.output[-3000:]
    assert run.recap("onecat-node2")["failed"] == 1
    assert "onecat-node2: /srv/models/llama31-70b-fp16 (fp16) cannot be served" in " ".join(
        run.output.split()), run.output[-3000:]
    assert "Suggestions:" in run.output
    # Nothing was installed: the node still serves its previous model.
    assert host.file(UNIT).content_string == before
    assert host.run("curl -fsS http://127.0.0.1:8000/health").rc == 0


def test_garbage_image_is_rolled_back(host, run_playbook):
    if not _node(host):
        pytest.skip("runs once, against onecat-node1")
    lock_before = read_lock()
    unit_before = host.file(UNIT).content_string
    run = run_playbook(SERVE, "--limit", "onecat-node1", "-e", "vllm_serve_upgrade=true",
                       "-e", json.dumps({"vllm_serve_image_env": {"STANDIN_BROKEN": "1"}}))
    flat = " ".join(run.output.split())
    assert run.rc == 2, run.output[-3000:]
    assert ("failed its smoke test: the smoke completion has degenerated (collapsed into "
            "repetition: '!'") in flat
    assert ("rolled back to the previous unit and image, which passed the gate and serves "
            "again") in flat
    assert "Last " in flat and "lines of the vllm container's log" in flat
    # The previous unit and image serve again; the lock still names them.
    assert host.file(UNIT).content_string == unit_before
    assert host.service("vllm").is_running
    text = json.loads(host.check_output(
        "curl -sS -H 'Content-Type: application/json' -d "
        "'{\"model\": \"qwen25-7b-nvfp4\", \"prompt\": \"Hi\", \"max_tokens\": 8, "
        "\"temperature\": 0}' http://127.0.0.1:8000/v1/completions"))["choices"][0]["text"]
    assert "!" not in text and text.strip()
    assert read_lock() == lock_before
    broken = [tag for tag in host.check_output(
        "docker images --format '{{.Repository}}:{{.Tag}}' onecat/engine").split()
        if re.match(r"onecat/engine:1cat-vllm-1\.5\.0-", tag)]
    assert len(broken) == 2  # the locked image and the rejected one


def test_rerun_with_nothing_changed_changes_nothing(host, run_playbook):
    if not _node(host):
        pytest.skip("runs once, against onecat-node1")
    run = run_playbook(SERVE)
    assert run.rc == 0, run.output[-3000:]
    assert run.recap("onecat-node1")["changed"] == 0, run.output[-3000:]
    assert run.recap("onecat-node2")["changed"] == 0, run.output[-3000:]
