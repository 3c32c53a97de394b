"""The model role's controller half against the Hub stand-in: what the lock file names is what
is deployed, checked file by file (its manifest digest), not only by commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hub_standin
import model_fixtures as mf

from roles.ansible_run import host_outcome, run_playbook

TINY = {**mf.QWEN3_4B, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 4096}


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    model = mf.build_model(tmp_path / "hub", TINY, "nvfp4-ct", name="tiny", shards=1)
    server = hub_standin.HubStandin({"acme/tiny": {"revisions": {"main": str(model)}}}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    yield server
    server.stop()


def _run(tmp_path: Path, lock: dict | None, hosts: dict | None = None,
         data_out: list | None = None) -> dict:
    lock_file = tmp_path / "onecat.lock.json"
    if lock is not None:
        lock_file.write_text(json.dumps(lock))
    common = {"onecat_model": "hf:acme/tiny@main", "onecat_lock_file": str(lock_file),
              "onecat_model_cache_dir": str(tmp_path / "cache"), "onecat_gpu_memory_gib": 32}
    hosts = hosts or {"ctl": {}}
    data = run_playbook("model_controller.yml", {name: {**common, **extra}
                                                 for name, extra in hosts.items()},
                        tmp_path, check=False)
    if data_out is not None:
        data_out.append(data)
    return host_outcome(data, next(iter(hosts)))


def _plan_inputs(data: dict) -> dict:
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith("Plan the model before anything is transferred."):
                result = next(iter(task["hosts"].values()))
                return json.loads(result["stdout"])["inputs"]
    raise AssertionError("the plan task did not run")


def _said(data: dict, name: str) -> str:
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(name):
                return next(iter(task["hosts"].values()))["msg"]
    raise AssertionError(f"{name} did not run")


def _health(mib: int) -> dict:
    return {"verdict": "healthy", "gpus": [{"index": 0, "memory_total_mib": mib},
                                           {"index": 1, "memory_total_mib": mib}]}


def test_the_early_plan_uses_the_smallest_card_the_health_stage_saw(hub, tmp_path):
    runs: list = []
    outcome = _run(tmp_path, None, {"n1": {"test_gpu_health": _health(16160)},
                                    "n2": {"test_gpu_health": _health(15360)},
                                    "n3": {}}, runs)
    assert outcome["failed_task"] is None, outcome
    assert _plan_inputs(runs[0])["gpu_memory_gib"] == 15.0
    said = _said(runs[0], "Say which card size the early plan uses.")
    assert "15360 MiB (NVML, 2 host(s) with health facts)" in said


def test_without_health_facts_the_early_plan_says_it_is_nominal(hub, tmp_path):
    runs: list = []
    assert _run(tmp_path, None, None, runs)["failed_task"] is None
    assert _plan_inputs(runs[0])["gpu_memory_gib"] == 32.0
    said = _said(runs[0], "Say which card size the early plan uses.")
    assert "nominal card (--gpu-memory-gib=32)" in said and "no health facts" in said


def test_the_locked_commit_with_other_files_is_refused(hub, tmp_path):
    commit = hub.repos["acme/tiny"].refs["main"]
    lock = {"model": {"source": "hf:acme/tiny@main", "commit": commit,
                      "manifest_digest": "f" * 64}}
    outcome = _run(tmp_path, lock)
    assert outcome["failed_task"] == "Refuse files that differ from the ones the lock file names."
    assert "the files changed under the commit" in outcome["msg"]
    assert "ffffffffffff" in outcome["msg"] and "onecat_model_upgrade=true" in outcome["msg"]


def test_the_locked_files_pass(hub, tmp_path):
    first = _run(tmp_path, None)
    assert first["failed_task"] is None, first
    manifest = json.loads(next((tmp_path / "cache").glob("tiny@*/onecat-manifest.json"))
                          .read_text())
    lock = {"model": {"source": "hf:acme/tiny@main", "commit": manifest["commit"],
                      "manifest_digest": manifest["digest"]}}
    outcome = _run(tmp_path, lock)
    assert outcome["failed_task"] is None, outcome


@pytest.mark.parametrize("extra", [{"model_sync_bwlimit": "50m --rsh=/tmp/x"},
                                   {"model_sync_bwlimit": "fast"},
                                   {"model_sync_parallel": "-1"},
                                   {"model_sync_parallel": "{{ 2 }}; 3"}])
def test_transfer_limits_rsync_cannot_take_are_refused_first(hub, tmp_path, extra):
    outcome = _run(tmp_path, None, {"ctl": extra})
    refused = "Refuse transfer limits rsync and Ansible cannot take."
    assert outcome["failed_task"] == refused, outcome
    assert "model_sync_bwlimit" in outcome["msg"] and outcome["changed"] == []


def test_transfer_limits_with_units_pass(hub, tmp_path):
    outcome = _run(tmp_path, None, {"ctl": {"model_sync_bwlimit": "50m",
                                            "model_sync_parallel": 2}})
    assert outcome["failed_task"] is None, outcome


def test_the_early_plan_plans_the_flags_and_environment_the_server_gets(hub, tmp_path):
    # The serve stage starts the engine with vllm_serve_args over the plan's flags, then
    # vllm_serve_extra_args; the early plan must plan the same server before anything moves.
    runs: list = []
    outcome = _run(tmp_path, None, {"ctl": {
        "vllm_serve_args": {"max_num_seqs": 7, "enforce_eager": True},
        "vllm_serve_extra_args": ["--max-num-batched-tokens=1536"],
        "vllm_serve_env": {"VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS": "0", "OTHER": "a b"}}}, runs)
    assert outcome["failed_task"] is None, outcome
    inputs = _plan_inputs(runs[0])
    assert inputs["max_num_seqs"] == 7 and inputs["max_num_batched_tokens"] == 1536, inputs
