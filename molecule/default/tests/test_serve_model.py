"""The model stage: fetched once from the Hub stand-in, distributed, verified, repaired, pinned.

Runs after the other verify files (it changes the served revision at the end).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from conftest import read_lock

MODEL = "qwen25-7b-nvfp4"
REPO = "onecat-test/qwen25-7b-nvfp4"
SHARD = "model.safetensors"
UNIT = "/etc/systemd/system/vllm.service"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
MODEL_STAGE = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/model.yml"
MODEL_AND_SERVE = """
- ansible.builtin.import_playbook: @PROJECT@/playbooks/model.yml
- ansible.builtin.import_playbook: @PROJECT@/playbooks/serve.yml
- ansible.builtin.import_playbook: @PROJECT@/playbooks/model_finalize.yml
"""


def hub_requests() -> list[dict]:
    lines = (EPHEMERAL / "hub" / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def weight_downloads() -> dict[str, int]:
    """Whole-file GETs of LFS blobs (the CDN) per sha256 (range reads are the planner's)."""
    counts: dict[str, int] = {}
    for r in hub_requests():
        if (r["method"] == "GET" and r["path"].startswith("/cdn/") and r["sent"]
                and not r["range"]):
            counts[r["path"]] = counts.get(r["path"], 0) + 1
    return counts


def standin_commit(ref: str) -> str:
    out = (EPHEMERAL / "hub" / "standin.out").read_text()
    return re.search(rf"^{re.escape(REPO)}@{ref} ([0-9a-f]{{40}})$", out, re.MULTILINE)[1]


def revision_dir(commit: str) -> str:
    return f"/srv/models/{MODEL}@{commit[:12]}"


def manifest(commit: str) -> dict:
    return json.loads((EPHEMERAL / "models" / f"{MODEL}@{commit[:12]}" /
                       "onecat-manifest.json").read_text())


def test_fetched_once_for_the_fleet_not_once_per_node(host):
    # converge and idempotence both ran, on two nodes: every weight file left the Hub once.
    downloads = weight_downloads()
    assert downloads and set(downloads.values()) == {1}, downloads
    # The plans (one per run) read the weights' headers only: range reads of ~100 KB.
    ranged = [r for r in hub_requests() if r["range"] and r["method"] == "GET"]
    assert ranged and all(r["sent"] < 1_000_000 for r in ranged)
    assert all(r["range"].startswith(("bytes=0-", "bytes=8-")) for r in ranged)


def test_the_node_serves_the_distributed_revision(host):
    commit = standin_commit("main")
    lock = read_lock()["model"]
    assert lock["commit"] == commit and lock["source"] == f"hf:{REPO}@main"
    expected = manifest(commit)
    assert lock["manifest_digest"] == expected["digest"]
    node_manifest = json.loads(host.file(f"{revision_dir(commit)}/onecat-manifest.json")
                               .content_string)
    assert node_manifest["digest"] == expected["digest"]
    config = host.file(f"{revision_dir(commit)}/config.json").content
    row = next(f for f in expected["files"] if f["path"] == "config.json")
    assert hashlib.sha256(config).hexdigest() == row["sha256"]
    assert host.file(f"/srv/models/{MODEL}").linked_to == revision_dir(commit)
    unit = host.file(UNIT).content_string
    assert f"--volume {revision_dir(commit)}:/models/{MODEL}:ro" in unit
    # The weights stay sparse on the node (rsync --sparse): a 5 GiB shard costs little disk.
    shard = host.file(f"{revision_dir(commit)}/{SHARD}")
    blocks = int(host.check_output(f"stat -c %b {revision_dir(commit)}/{SHARD}"))
    assert blocks * 512 < shard.size // 10


def test_a_corrupted_file_is_repaired_from_the_controller(host, run_playbook):
    if host.backend.hostname != "onecat-node1":
        pytest.skip("runs once, against onecat-node1")
    commit = standin_commit("main")
    path = f"{revision_dir(commit)}/{SHARD}"
    host.check_output(f"printf 'X' | dd of={path} bs=1 seek=4096 conv=notrunc status=none")
    before = weight_downloads()
    run = run_playbook(MODEL_STAGE, "--limit", "onecat-node1")
    assert run.rc == 0, run.output[-3000:]
    assert run.recap("onecat-node1")["changed"] >= 1
    # Repaired from the controller's copy: the Hub was not asked again.
    assert weight_downloads() == before
    check = run_playbook(MODEL_STAGE, "--limit", "onecat-node1", "-e", "onecat_model_verify=full")
    assert check.rc == 0 and check.recap("onecat-node1")["changed"] == 0, check.output[-3000:]
    print(f"repair run: {run.seconds:.1f} s; full re-verify: {check.seconds:.1f} s")


def test_a_current_node_costs_seconds_and_changes_nothing(host, run_playbook):
    if host.backend.hostname != "onecat-node2":
        pytest.skip("runs once, against onecat-node2")
    run = run_playbook(MODEL_STAGE)
    assert run.rc == 0, run.output[-3000:]
    for name in ("onecat-node1", "onecat-node2"):
        assert run.recap(name)["changed"] == 0, run.output[-3000:]
    print(f"model stage re-run, 2 current nodes: {run.seconds:.1f} s")


def test_a_revision_change_deploys_the_new_commit_and_keeps_the_old(host, run_playbook):
    if host.backend.hostname != "onecat-node2":
        pytest.skip("runs once, against onecat-node2 (the whole fleet changes)")
    old, new = standin_commit("main"), standin_commit("v2")
    before = weight_downloads()
    run = run_playbook(MODEL_AND_SERVE, "-e", f"onecat_model=hf:{REPO}@v2")
    assert run.rc == 0, run.output[-4000:]
    # Same weights, new config: nothing heavy left the Hub again.
    assert weight_downloads() == before
    assert read_lock()["model"]["commit"] == new
    unit = host.file(UNIT).content_string
    assert f"--volume {revision_dir(new)}:/models/{MODEL}:ro" in unit
    assert host.file(f"/srv/models/{MODEL}").linked_to == revision_dir(new)
    # The previous revision stays for a rollback (onecat_model_keep 2).
    assert host.file(revision_dir(old)).is_directory
    gen = json.loads(host.file(f"{revision_dir(new)}/generation_config.json").content_string)
    assert gen["temperature"] == 0.6
    assert host.run("curl -fsS http://127.0.0.1:8000/health").rc == 0
    # Unchanged weights are hard links of the previous revision's, not a second copy.
    inode = host.check_output(
        f"stat -c %i {revision_dir(old)}/{SHARD} {revision_dir(new)}/{SHARD}").split()
    assert inode[0] == inode[1]


def test_the_forks_hybrid_flagship_shape_is_planned_fetched_and_served(host, run_playbook):
    # A Qwen3.5 Gated DeltaNet hybrid (text model nested in text_config, a vision tower): the
    # planner lays it out as vLLM's hybrid KV-cache manager does and serves it text-only; the
    # stand-in engine reads text_config as vLLM does and the gate passes. Runs last: the whole
    # fleet changes model.
    if host.backend.hostname != "onecat-node2":
        pytest.skip("runs once, against onecat-node2 (the whole fleet changes)")
    hybrid = "qwen35-tiny-nvfp4"
    run = run_playbook(MODEL_AND_SERVE, "-e", f"onecat_model=hf:onecat-test/{hybrid}@main")
    assert run.rc == 0, run.output[-4000:]
    assert read_lock()["model"]["source"] == f"hf:onecat-test/{hybrid}@main"
    unit = host.file(UNIT).content_string
    assert "--language-model-only" in unit and f":/models/{hybrid}:ro" in unit
    seqs = int(re.search(r"--max-num-seqs (\d+)", unit)[1])
    assert 1 <= seqs <= 256
    models = json.loads(host.check_output("curl -fsS http://127.0.0.1:8000/v1/models"))
    assert [m["id"] for m in models["data"]] == [hybrid]
    # The engine took it as a hybrid (its start-up line about one page size for both).
    assert host.run("journalctl -u vllm.service --no-pager -o cat "
                    "| grep -q 'attention page size is >= mamba page size'").rc == 0
    print(f"hybrid model + serve run, 2 nodes: {run.seconds:.1f} s")
