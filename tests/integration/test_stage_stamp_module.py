"""library/stage_stamp.py through Ansible (`ansible localhost -c local -m stage_stamp`).

Record, check, drift, check mode and removal, with real dpkg-query (this machine is Debian);
units are not used here (no systemd in the test machine's container).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from adhoc_module import BIN, REPO, run_module

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")


def run(args: dict[str, Any], *, check: bool = False) -> dict[str, Any]:
    return run_module("stage_stamp", args, check=check)


def test_record_check_drift_and_removal(tmp_path: Path) -> None:
    managed = tmp_path / "daemon.json"
    managed.write_text("{}\n")
    stamps = tmp_path / "stamps"
    base = {"stage": "runtime", "want": "w1", "dir": str(stamps)}
    record = {**base, "state": "record", "files": [str(managed)], "packages": ["dpkg"],
              "outputs": {"result": {"serving": True}}}

    first = run({**base})
    assert first["current"] is False and "no stamp yet" in first["reason"]

    dry = run(record, check=True)
    assert dry["changed"] is True and not (stamps / "runtime.json").exists()

    written = run(record)
    assert written["changed"] is True, written
    assert written["fingerprint"]["package:dpkg"].startswith("ii ")
    assert run(record)["changed"] is False  # the same stamp again: nothing written

    same = run({**base})
    assert (same["current"], same["outputs"]) == (True, {"result": {"serving": True}})
    assert run({**base, "want": "w2"})["current"] is False

    managed.write_text('{"default-runtime": "runc"}\n')
    drift = run({**base})
    assert drift["current"] is False
    assert drift["reason"].startswith(f"drift on the node: file:{managed}: sha256 ")

    assert run({**base, "state": "absent"}, check=True)["changed"] is True
    assert (stamps / "runtime.json").exists()
    assert run({**base, "state": "absent"})["changed"] is True
    assert not (stamps / "runtime.json").exists()
    assert run({**base, "state": "absent"})["changed"] is False


def test_bad_input_gets_a_clear_message(tmp_path: Path) -> None:
    bad = run({"stage": "../etc", "want": "w", "dir": str(tmp_path)})
    assert bad.get("failed") is True and "letters, digits" in bad["msg"]
    empty = run({"stage": "serve", "state": "record", "dir": str(tmp_path)})
    assert empty.get("failed") is True and "want is empty for the serve stage" in empty["msg"]


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Check or record.
      ansible.builtin.include_role:
        name: stage_stamp
        tasks_from: "{{ step }}"
      vars:
        stage_stamp_stage: gpu
        stage_stamp_role: gpu_health
        stage_stamp_dir: "{{ stamps }}"
        stage_stamp_lock_file: "{{ stamps }}/no-lock.json"
        stage_stamp_manages: {files: [], packages: [], units: []}
    - name: Show the verdict.
      ansible.builtin.debug:
        msg: "CURRENT={{ 'gpu' in stage_stamp_current | default([]) }}"
"""


def test_what_is_wanted_covers_the_roles_files_and_the_onecat_variables_they_read(
        tmp_path: Path) -> None:
    """roles/stage_stamp's want digest: a changed file anywhere in the stage's role, or a new
    value of an onecat_* variable one of its files reads, runs the stage again."""
    roles = tmp_path / "roles"
    for name in ("stage_stamp", "gpu_health"):
        shutil.copytree(REPO / "roles" / name, roles / name)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(roles), "ANSIBLE_LIBRARY": str(REPO / "library"),
           "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"), "ANSIBLE_NOCOLOR": "1"}

    def current(step: str = "check", *extra: str) -> bool:
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
             "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"step={step}",
             "-e", f"stamps={tmp_path / 'stamps'}", *extra],
            env=env, capture_output=True, text=True, check=False, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert "Unable to find" not in done.stdout + done.stderr
        return "CURRENT=True" in done.stdout

    assert current("record") is False  # no stamp before the record
    assert current() is True
    # gpu_health's defaults read onecat_expected_gpus: a new value runs the stage.
    assert current("check", "-e", "onecat_expected_gpus=4") is False
    # A task file deep in the role changes: the stage runs again.
    (roles / "gpu_health" / "tasks" / "pynvml-venv.yml").write_text(
        (roles / "gpu_health" / "tasks" / "pynvml-venv.yml").read_text() + "\n# changed\n")
    assert current() is False


# Two stages, the second built on the first (as runtime on driver): the first runs where its
# stamp is not current, putting its file back as wanted, and records its stamp; then the second
# is checked.
PLAY_AFTER = """
- hosts: localhost
  gather_facts: false
  vars:
    __stamps: &stamps
      stage_stamp_dir: "{{ stamps }}"
      stage_stamp_lock_file: "{{ stamps }}/no-lock.json"
  tasks:
    - name: Check the first stage.
      ansible.builtin.include_role:
        name: stage_stamp
        tasks_from: check
      vars:
        <<: *stamps
        stage_stamp_stage: first
        stage_stamp_role: gpu_health
    - name: Run the first stage where it is due.
      when: "'first' not in stage_stamp_current | default([])"
      block:
        - name: Put the first stage's file as it wants it.
          ansible.builtin.copy:
            content: "wanted\\n"
            dest: "{{ stamps }}/managed"
            mode: "0644"
        - name: Record the first stage.
          ansible.builtin.include_role:
            name: stage_stamp
            tasks_from: record
          vars:
            <<: *stamps
            stage_stamp_stage: first
            stage_stamp_role: gpu_health
            stage_stamp_manages: {files: ["{{ stamps }}/managed"]}
    - name: Check the second stage.
      ansible.builtin.include_role:
        name: stage_stamp
        tasks_from: check
      vars:
        <<: *stamps
        stage_stamp_stage: second
        stage_stamp_role: burnin
        stage_stamp_after: [first]
    - name: Record the second stage where it ran.
      ansible.builtin.include_role:
        name: stage_stamp
        tasks_from: record
      vars:
        <<: *stamps
        stage_stamp_stage: second
        stage_stamp_role: burnin
      when: "'second' not in stage_stamp_current | default([])"
    - name: Show the verdicts.
      ansible.builtin.debug:
        msg: >-
          FIRST={{ 'first' in stage_stamp_current | default([]) }}
          SECOND={{ 'second' in stage_stamp_current | default([]) }}
"""


def test_a_stage_that_ran_but_left_its_stamp_as_it_was_lets_the_next_trust_its_own(
        tmp_path: Path) -> None:
    """A driver stage that only put drift back (or only rebooted the node) records the stamp it
    had: the runtime stage built on it is checked against its own stamp instead of running in
    full. A first stage whose record differs (a wanted change) still runs the second."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY_AFTER)
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
           "ANSIBLE_LIBRARY": str(REPO / "library"),
           "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"), "ANSIBLE_NOCOLOR": "1"}

    def verdicts(*extra: str) -> str:
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
             "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"stamps={stamps}",
             *extra],
            env=env, capture_output=True, text=True, check=False, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        found = re.search(r"FIRST=(\w+) SECOND=(\w+)", done.stdout)
        assert found, done.stdout[-3000:]
        return found[0]

    assert verdicts() == "FIRST=False SECOND=False"  # no stamps yet: both run
    assert verdicts() == "FIRST=True SECOND=True"
    (stamps / "managed").write_text("edited by hand\n")
    # The first stage runs and puts the file back: its stamp is as it was, the second skips.
    assert verdicts() == "FIRST=False SECOND=True"
    assert (stamps / "managed").read_text() == "wanted\n"
    # gpu_health reads onecat_expected_gpus (burnin does not): the first stage's record differs.
    assert verdicts("-e", "onecat_expected_gpus=4") == "FIRST=False SECOND=False"
    assert verdicts("-e", "onecat_expected_gpus=4") == "FIRST=True SECOND=True"


def test_a_pruned_image_or_a_changed_model_file_is_seen(tmp_path: Path, monkeypatch) -> None:
    # The image is asked of Docker (a double here: `docker image inspect` answers 1 and "No
    # such image" once the image is gone), the model folder stat'ed file by file.
    doubles = tmp_path / "bin"
    doubles.mkdir()
    images = tmp_path / "images"
    images.write_text("sha256:feed\n")
    docker = doubles / "docker"
    docker.write_text(f'#!/bin/sh\nid="$5"\nif grep -qx "$id" {images}; then echo "$id"; '
                      'else echo "Error: No such image: $id" >&2; exit 1; fi\n')
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{doubles}:{os.environ['PATH']}")
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    base = {"stage": "serve", "want": "w", "dir": str(tmp_path / "stamps")}
    written = run({**base, "state": "record", "images": ["sha256:feed"], "trees": [str(model)]})
    assert written["fingerprint"]["image:sha256:feed"] == "sha256:feed", written
    assert written["fingerprint"][f"tree:{model}"].startswith("1 files, ")
    assert run(base)["current"] is True

    images.write_text("")  # `docker image prune -a` while the unit was stopped
    pruned = run(base)
    assert pruned["current"] is False and "image:sha256:feed" in pruned["reason"], pruned
    images.write_text("sha256:feed\n")
    assert run(base)["current"] is True
    (model / "model.safetensors").write_bytes(b"\0" * 8)  # a shard cut short behind our back
    cut = run(base)
    assert cut["current"] is False and f"tree:{model}" in cut["reason"], cut


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_gpu_settings_without_nvidia_smi_and_a_field_that_is_not_one(tmp_path: Path) -> None:
    # A host without nvidia-smi has a state of its own (stable, so the stage is not re-run for
    # it); a field name is checked before it reaches nvidia-smi's argument.
    base = {"stage": "driver", "want": "w", "dir": str(tmp_path), "state": "record"}
    written = run({**base, "gpus": ["persistence_mode"]})
    assert written["fingerprint"]["gpu:persistence_mode"] == "no nvidia-smi", written
    refused = run({**base, "gpus": ["persistence_mode,uuid --loop=1"]})
    assert refused.get("failed") and "is not an nvidia-smi --query-gpu field" in refused["msg"]
