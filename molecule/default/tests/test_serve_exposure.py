"""Closed by default, and a rollback that restores exactly what ran (issue 17).

Runs after test_serve_changes.py: onecat-node1 is moved onto its network address (a key is
generated), then a failed upgrade that also changes the key is rolled back to the snapshot
with its own key; onecat-node2 gets an operator's hand-written unit and a first onecat deploy
that fails its gate. Every probe comes from the other node.
"""

from __future__ import annotations

import json

import pytest
from exposure import PATHS, node, node_address, status

SERVE = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/serve.yml"
UNIT = "/etc/systemd/system/vllm.service"
ENV = "/etc/onecat/vllm.env"
STATE = "/var/lib/onecat/serve"
MODEL = "qwen25-7b-nvfp4"


def env_keys(host) -> dict[str, str]:
    text = host.check_output(f"cat {ENV}")
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#"))


def completion_status(probe, url: str, key: str) -> int:
    body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 4, "temperature": 0})
    auth = f"-H 'Authorization: Bearer {key}' " if key else ""
    return int(probe.run(f"curl -s -o /dev/null -m 10 -w '%{{http_code}}' {auth}"
                         f"-H 'Content-Type: application/json' -d '{body}' {url}"
                         "/v1/completions").stdout.strip() or 0)


def test_open_address_gets_a_generated_key_and_closes_every_path(host, run_playbook):
    if host.backend.hostname != "onecat-node1":
        pytest.skip("runs once, against onecat-node1, probed from onecat-node2")
    run = run_playbook(SERVE, "--limit", "onecat-node1", "-e", "vllm_serve_bind_address=0.0.0.0")
    flat = " ".join(run.output.split())
    print(f"\nserve on 0.0.0.0 with a generated key, 1 node: {run.seconds:.0f} s")
    assert run.rc == 0, run.output[-3000:]
    assert ("onecat-node1: generated VLLM_API_KEY and ONECAT_METRICS_KEY into "
            "/etc/onecat/vllm.env (root only, 0600)") in flat
    keys = env_keys(host)
    api, metrics = keys["VLLM_API_KEY"], keys["ONECAT_METRICS_KEY"]
    assert api not in run.output and metrics not in run.output
    assert api not in host.file(UNIT).content_string
    assert "8000/tcp -> 0.0.0.0:8000" in host.check_output("docker port vllm").splitlines()
    probe, url = node("onecat-node2"), f"http://{node_address('onecat-node1')}:8000"
    for path in PATHS:
        assert status(probe, url + path) == 401, path
        assert status(probe, url + path, "not-the-key-" + api) == 401, path
    assert completion_status(probe, url, "") == 401
    assert completion_status(probe, url, api) == 200
    assert status(probe, url + "/v1/models", api) == 200
    assert status(probe, url + "/health", api) == 200
    # /metrics is for the scrapers' key only.
    assert status(probe, url + "/metrics", api) == 401
    assert status(probe, url + "/metrics", metrics) == 200


def test_failed_upgrade_restores_the_snapshot_with_its_own_key(host, run_playbook):
    if host.backend.hostname != "onecat-node1":
        pytest.skip("runs once, against onecat-node1")
    before = env_keys(host)
    unit_before = host.file(UNIT).content_string
    record_before = host.file(f"{STATE}/serving.json").content_string
    new_key = "n" * 40
    # A new key AND a garbage image: the gate fails, and the rollback must bring the old
    # unit, the old environment file (so the old key) and the old image back, and gate them
    # with the old key (the new one would get 401 and wait out the whole timeout).
    run = run_playbook(SERVE, "--limit", "onecat-node1", "-e", "vllm_serve_upgrade=true",
                       "-e", "vllm_serve_bind_address=0.0.0.0", "-e",
                       json.dumps({"vllm_serve_image_env": {"STANDIN_BROKEN": "1"},
                                   "vllm_serve_api_key": new_key}))
    flat = " ".join(run.output.split())
    print(f"\nfailed upgrade with a new key, rolled back, 1 node: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-3000:]
    assert ("rolled back to the previous unit and image, which passed the gate and serves "
            "again") in flat
    assert new_key not in run.output and before["VLLM_API_KEY"] not in run.output
    assert env_keys(host) == before
    assert host.file(UNIT).content_string == unit_before
    assert host.file(f"{STATE}/serving.json").content_string == record_before
    probe, url = node("onecat-node2"), f"http://{node_address('onecat-node1')}:8000"
    assert completion_status(probe, url, before["VLLM_API_KEY"]) == 200
    assert completion_status(probe, url, new_key) == 401
    assert run.seconds < 300  # the rollback gate did not wait out its timeout


def test_failed_first_deploy_is_disabled_and_the_operators_unit_is_kept(host, run_playbook):
    if host.backend.hostname != "onecat-node2":
        pytest.skip("runs once, against onecat-node2")
    handwritten = ("[Unit]\nDescription=vLLM, by hand\n\n[Service]\n"
                   "ExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n")
    host.check_output("systemctl disable --now vllm.service")
    host.check_output(f"rm -rf {STATE}/serving.json {STATE}/previous {STATE}/vllm.service.original")
    host.check_output(f"printf '%s' '{handwritten}' > {UNIT} && systemctl daemon-reload")
    run = run_playbook(SERVE, "--limit", "onecat-node2", "-e",
                       json.dumps({"vllm_serve_env": {"STANDIN_BROKEN": "1"}}))
    flat = " ".join(run.output.split())
    print(f"\nfailed first deploy, 1 node: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-3000:]
    assert ("no snapshot of a server that passed its gate to roll back to; the unit is "
            "stopped and disabled") in flat
    assert host.run("systemctl is-enabled vllm.service").stdout.strip() == "disabled"
    assert host.run("systemctl is-active vllm.service").stdout.strip() != "active"
    assert not host.file(f"{STATE}/serving.json").exists
    original = host.file(f"{STATE}/vllm.service.original")
    assert original.content_string == handwritten and original.mode == 0o600
    # A good deploy afterwards serves; the operator's unit stays kept, never overwritten.
    run = run_playbook(SERVE, "--limit", "onecat-node2")
    assert run.rc == 0, run.output[-3000:]
    assert host.run("systemctl is-enabled vllm.service").stdout.strip() == "enabled"
    assert host.file(f"{STATE}/vllm.service.original").content_string == handwritten
