"""The serve stage on two simulated nodes: built once, shipped, gated, locked, self-healing."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from conftest import read_lock, wait_healthy
from exposure import answers_without_key, listeners, node, node_address

MODEL = "qwen25-7b-nvfp4"
UNIT = "/etc/systemd/system/vllm.service"


def completion(host) -> str:
    body = json.dumps({"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8,
                       "temperature": 0})
    out = host.check_output(
        f"curl -sS -H 'Content-Type: application/json' -d '{body}' "
        "http://127.0.0.1:8000/v1/completions")
    return json.loads(out)["choices"][0]["text"]


def unit_image(host) -> str:
    match = re.search(r"^# onecat-image: (\S+)", host.file(UNIT).content_string, re.MULTILINE)
    assert match, host.file(UNIT).content_string
    return match.group(1)


def test_server_passed_its_gate_and_answers(host):
    assert host.service("vllm").is_running
    assert host.service("vllm").is_enabled
    models = json.loads(host.check_output("curl -fsS http://127.0.0.1:8000/v1/models"))
    assert [m["id"] for m in models["data"]] == [MODEL]
    text = completion(host)
    assert text.strip() and len(set(text.split())) > 1, text


def test_unit_runs_the_locked_image_with_the_v100_flags(host):
    unit = host.file(UNIT)
    assert unit.mode == 0o644
    content = unit.content_string
    lock = read_lock()["engine_image"]
    revision = f"{MODEL}@{read_lock()['model']['commit'][:12]}"
    assert unit_image(host) == lock["image_id"]
    assert f"    {lock['image_id']} \\\n    serve /models/{MODEL} \\\n" in content
    for line in (
        "ExecStartPre=-/usr/bin/docker rm --force vllm",
        "ExecStop=/usr/bin/docker stop --time 60 vllm",
        "Restart=on-failure",
        "RestartSec=2",
        "StartLimitBurst=5",
        "TimeoutStartSec=900",
        "    --ipc=host \\",
        "    --publish 127.0.0.1:8000:8000 \\",
        # The model stage's verified revision, mounted at a path that does not change.
        f"    --volume /srv/models/{revision}:/models/{MODEL}:ro \\",
        "    --env-file /etc/onecat/vllm.env \\",
        "    --env CUDA_DEVICE_ORDER=PCI_BUS_ID \\",
        "    --env HF_HUB_OFFLINE=1 \\",
        "    --entrypoint vllm \\",
        f"    --served-model-name {MODEL} \\",
        "    --dtype half \\",
        "    --tensor-parallel-size 2 \\",
        "    --max-model-len 8192 \\",
        "    --gpu-memory-utilization 0.85 \\",
    ):
        assert line in content.splitlines() or line in content, line
    # Custom all-reduce is off on every sm_70 pair, NVLink too (1Cat-vLLM #652/#430, PR #88);
    # the health facts decide NCCL P2P: off on the PCIe pair (node1, P2P not supported by its
    # chipset), on for the NVLink pair (node2, P2P OK).
    pcie = host.backend.hostname == "onecat-node1"
    assert re.search(r"^    --disable-custom-all-reduce( \\)?$", content, re.MULTILINE)
    assert ("NCCL_P2P_DISABLE=1" in content) is pcie
    assert "--attention-backend FLASH_ATTN_V100" in content
    assert re.search(r"^    --max-num-seqs \d+ \\$", content, re.MULTILINE)
    assert "--gpus" not in content  # the test seam: no NVIDIA runtime in these nodes
    env = host.file("/etc/onecat/vllm.env")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    assert host.file(UNIT + ".d").is_directory


def test_image_built_once_and_shipped(host):
    lock = read_lock()["engine_image"]
    assert lock["recipe"]["source"] == "build"
    assert lock["image_tag"].startswith("onecat/engine:1cat-vllm-1.5.0-")
    inspect = json.loads(host.check_output(f"docker image inspect {lock['image_id']}"))[0]
    assert lock["image_tag"] in inspect["RepoTags"]
    assert inspect["Config"]["Labels"]["org.onecat.wheel-sha256"] == lock["recipe"]["wheel_sha256"]
    built_here = host.file("/var/lib/onecat/engine-build").exists
    assert built_here == (host.backend.hostname == "onecat-node1")


LOCK_STEP = """
- name: Pin the engine image's sources as the serve stage does.
  hosts: v100
  gather_facts: false
  tasks:
    - name: Make or reuse the engine lock as the serve stage does.
      ansible.builtin.include_role:
        name: vllm_serve
        tasks_from: validate.yml
"""


def test_day_0_made_the_engine_lock_once_and_the_build_used_it(host, run_playbook):
    """Nothing is pinned by hand: converge made the lock, and the build host loaded the
    tarball base that the lock pins (the registry's config digest is the image ID)."""
    sim = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
    path = sim / "engine" / "1cat-vllm.lock.json"
    lock = json.loads(path.read_text())
    base = lock["base"]
    assert base["image"] == (sim / "engine-base.ref").read_text().strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base["registry"]), base
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", base["config_digest"]), base
    assert lock["wheel"]["sha256"] == (sim / "standin-wheel.sha256").read_text().strip()
    assert lock["tools"]["uv"] and lock["requirements"]["lock"].startswith("# nothing")
    image = json.loads(host.check_output(
        f"docker image inspect {read_lock()['engine_image']['image_id']}"))[0]
    assert image["Config"]["Labels"]["org.onecat.base-digest"] == base["config_digest"]
    if host.backend.hostname == "onecat-node1":  # the build host loaded the tarball
        loaded = host.check_output(f"docker image inspect --format '{{{{.Id}}}}' {base['image']}")
        assert loaded.strip() == base["config_digest"]
        # The idempotence run's summary (the last rollout) made no lock: it was reused.
        notes = json.loads((sim / "results" / "rollout.json").read_text()).get("notes", [])
        assert not [note for note in notes if "engine lock" in note], notes
        # The stage's lock step again, as a later deploy runs it: reused, nothing changed.
        before = path.read_bytes()
        run = run_playbook(LOCK_STEP)
        assert run.rc == 0, run.output[-3000:]
        assert "Make or reuse the engine lock on the controller." in run.output
        assert all(run.recap(name)["changed"] == 0 for name in ("onecat-node1", "onecat-node2"))
        assert path.read_bytes() == before


def test_lock_names_the_image_that_serves(host):
    lock = read_lock()["engine_image"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", lock["image_id"])
    running = host.check_output("docker inspect --format '{{.Image}}' vllm")
    assert running == lock["image_id"]


def test_docker_kill_is_healed_by_systemd(host):
    before = host.check_output("docker inspect --format '{{.State.StartedAt}}' vllm")
    host.run("docker kill vllm")
    time.sleep(3)
    wait_healthy(host)
    after = host.check_output("docker inspect --format '{{.State.StartedAt}}' vllm")
    assert after != before
    restarts = int(host.check_output("systemctl show vllm -p NRestarts --value"))
    assert restarts >= 1
    assert completion(host).strip()


def test_what_served_is_recorded_for_the_next_rollback(host):
    record = json.loads(host.file("/var/lib/onecat/serve/serving.json").content_string)
    assert record["image_id"] == read_lock()["engine_image"]["image_id"]
    assert record["served_model_name"] == MODEL
    assert record["url"] == "http://127.0.0.1:8000"
    assert record["unit_sha256"] == host.file(UNIT).sha256sum
    assert record["env_sha256"] == host.file("/etc/onecat/vllm.env").sha256sum
    assert host.file("/var/lib/onecat/serve/serving.json").mode == 0o600


def test_fresh_rollout_answers_nothing_without_a_key_from_another_node(host):
    """Done-when of issue 17: no port answers without a key on a non-loopback address."""
    if host.backend.hostname != "onecat-node1":
        pytest.skip("runs once: onecat-node2 probes onecat-node1")
    assert host.check_output("docker port vllm").splitlines() == ["8000/tcp -> 127.0.0.1:8000"]
    print(f"\nonecat-node1 listens on: {listeners(host)}")
    open_ports = [port for address, port in listeners(host) if not address.is_loopback]
    probe = node("onecat-node2")
    address = node_address("onecat-node1")
    # The server really is up (on loopback), and nothing else answers from outside.
    assert host.run("curl -fsS http://127.0.0.1:8000/health").rc == 0
    assert answers_without_key(probe, address, 8000) == []
    for port in open_ports:
        assert answers_without_key(probe, address, port) == [], f"port {port}"
