"""The serve stage makes the engine lock once, then reads it; hand-set pins win.

The role's validate.yml and recipe.yml run with ansible-playbook against localhost, the
engine lock against the loopback index and registry of tests/engine_parts.py (real uv,
real docker-registry): the first run makes the file and says so, the second reuses it
(nothing changed, nothing resolved), check mode writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_parts import BASE_REPO, BASE_TAG, Parts
from engine_registry import BINARY

from .ansible_run import host_outcome, run_playbook

pytestmark = pytest.mark.skipif(not Path(BINARY).exists(),
                                reason="docker-registry (Debian package) is not installed")
LOCK_TASK = "Make or reuse the engine lock on the controller."
LOCK_NAME = "1cat-vllm-1.5.0.lock.json"


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    parts = Parts(tmp_path_factory.mktemp("serve-engine-lock")).start()
    yield parts
    parts.stop()


def _host(parts: Parts, tmp: Path, **overrides) -> dict:
    return {
        "vllm_serve_model_dir": "qwen25-7b-nvfp4",
        "vllm_serve_env_file": str(tmp / "vllm.env"),
        "vllm_serve_wheel_url": parts.url,
        "vllm_serve_wheel_sha256": parts.sha256,
        "vllm_serve_image_base": f"{parts.registry.host}/{BASE_REPO}:{BASE_TAG}",
        "vllm_serve_image_torch_index_url": parts.index.url,
        "vllm_serve_image_pip_index_url": parts.index.url,
        "vllm_serve_engine_lock_file": str(tmp / "inventory" / "engine" / LOCK_NAME),
        "vllm_serve_engine_lock_cache_dir": str(tmp / "cache"),
        **overrides,
    }


def _run(parts: Parts, tmp: Path, check: bool = False, **overrides) -> tuple[dict, dict]:
    out = tmp / ("check" if check else "run")
    out.mkdir(parents=True, exist_ok=True)
    data = run_playbook("serve_engine_lock.yml", {"node": _host(parts, tmp, **overrides)},
                        out, check=check)
    outcome = host_outcome(data, "node")
    assert outcome["failed_task"] is None, outcome
    if not check:  # the test's own file changes with the note
        outcome["changed"].remove("Write what the recipe pins.")
    pins = {} if check else json.loads((out / "node.pins.json").read_text())
    return outcome, pins


def test_first_run_makes_the_lock_and_the_second_reuses_it(parts, tmp_path):
    lock_file = tmp_path / "inventory" / "engine" / LOCK_NAME
    checked, _ = _run(parts, tmp_path, check=True)
    assert not lock_file.exists() and LOCK_TASK not in checked["changed"]

    first, pins = _run(parts, tmp_path)
    assert LOCK_TASK in first["changed"]
    lock = json.loads(lock_file.read_text())
    assert pins["base_from"] == (f"{parts.registry.host}/{BASE_REPO}:{BASE_TAG}"
                                 f"@{parts.index_digest}")
    assert pins["recipe"]["base_digest"] == parts.index_digest
    assert lock["requirements"]["lock"].strip() in pins["requirements"]
    assert "alpha==1.1" in pins["requirements"] and "--hash=sha256:" in pins["requirements"]
    assert pins["note"].startswith(f"engine lock created: commit {lock_file}")

    before = lock_file.read_bytes()
    second, again = _run(parts, tmp_path)
    assert second["changed"] == [] and again["note"] == ""
    assert again["recipe"] == pins["recipe"] and lock_file.read_bytes() == before

    checked, _ = _run(parts, tmp_path, check=True)
    assert checked["changed"] == []


def test_hand_set_pins_win(parts, tmp_path):
    digest = "sha256:" + "ab" * 32
    _, pins = _run(parts, tmp_path, vllm_serve_image_base_digest=digest)
    assert pins["recipe"]["base_digest"] == digest and "alpha==1.1" in pins["requirements"]
    # Both set by hand: the engine lock is neither made nor read.
    hand = tmp_path / "hand"
    hand.mkdir()
    (hand / "req.lock").write_text("torch==2.10.0 --hash=sha256:" + "cd" * 32 + "\n")
    outcome, pins = _run(parts, hand, vllm_serve_image_base_digest=digest,
                         vllm_serve_image_requirements_lock=str(hand / "req.lock"))
    assert LOCK_TASK not in outcome["changed"]
    assert not (hand / "inventory").exists() and "alpha" not in pins["requirements"]


def test_a_tarball_base_is_pinned_by_the_lock(parts, tmp_path):
    """An air-gapped fleet carries the base in as a tarball: the lock pins the ID it loads as
    (the amd64 config digest in Docker's classic store; the manifest or index digest in the
    containerd store), with no digest set by hand."""
    tarball = tmp_path / "base.tar"
    tarball.write_bytes(b"")
    _, pins = _run(parts, tmp_path, vllm_serve_image_base_tarball=str(tarball))
    lock = json.loads((tmp_path / "inventory" / "engine" / LOCK_NAME).read_text())["base"]
    amd64 = json.loads(parts.registry.manifest_bytes(BASE_REPO, parts.manifests["amd64"]))
    assert lock["config_digest"] == amd64["config"]["digest"]
    assert pins["recipe"]["base_digest"] == lock["config_digest"]
    assert pins["base_ids"] == [lock["config_digest"], parts.manifests["amd64"],
                                parts.index_digest]
    # FROM names the loaded tag; the build host checks the loaded image's ID against base_ids.
    assert pins["base_from"] == f"{parts.registry.host}/{BASE_REPO}:{BASE_TAG}"


def test_a_lock_that_cannot_be_made_stops_the_stage_with_one_reason(parts, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    host = _host(parts, tmp_path, vllm_serve_wheel_sha256="0" * 64)
    outcome = host_outcome(run_playbook("serve_engine_lock.yml", {"node": host}, out,
                                        check=False), "node")
    assert outcome["failed_task"] == "Stop when the engine lock cannot be made or read."
    assert parts.sha256 in outcome["msg"] and "0" * 64 in outcome["msg"]


def test_the_lock_is_made_once_for_the_whole_fleet(parts, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    hosts = {name: _host(parts, tmp_path) for name in ("node1", "node2", "node3")}
    data = run_playbook("serve_engine_lock.yml", hosts, out, check=False)
    ran = [task for play in data["plays"] for task in play["tasks"]
           if task["task"]["name"].endswith(LOCK_TASK)]
    assert len(ran) == 1 and len([r for r in ran[0]["hosts"].values()
                                  if not r.get("skipped")]) == 1
    pins = [json.loads((out / f"{name}.pins.json").read_text()) for name in hosts]
    assert all(p["recipe"] == pins[0]["recipe"] for p in pins)
    assert pins[0]["recipe"]["base_digest"] == parts.index_digest
