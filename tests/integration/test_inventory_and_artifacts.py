"""Issue 17: an inventory that cannot drive a run fails loudly; the literal README command
works from the repository root; secrets stay out of results/<run-id>/."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onecat.cli import main as onecat_main
from onecat.fleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "ansible-playbook"), *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def empty_group(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yml"
    path.write_text("all:\n  children:\n    v100:\n      hosts: {}\n")
    return path


def test_the_readme_command_resolves_v100_hosts_from_the_repository_root():
    done = playbook("site.yml", "-i", "v100-hosts", "--list-hosts")
    assert done.returncode == 0, done.stderr
    assert "gpu-node-01" in done.stdout
    # The group's knobs come along (group_vars next to the inventory file).
    shown = subprocess.run([str(BIN / "ansible-inventory"), "-i", "v100-hosts", "--host",
                            "gpu-node-01"], cwd=REPO, env=ENV, capture_output=True, text=True,
                           timeout=120, check=True)
    assert json.loads(shown.stdout)["onecat_engine"] == "1cat-vllm"


def test_an_inventory_that_does_not_parse_fails_the_playbook():
    done = playbook("site.yml", "-i", "no-such-hosts")
    assert done.returncode != 0
    assert "No inventory was parsed" in done.stdout + done.stderr


def test_an_empty_group_stops_site_yml_and_names_the_inventory(empty_group):
    done = playbook("site.yml", "-i", str(empty_group))
    assert done.returncode != 0
    output = " ".join((done.stdout + done.stderr).split())
    assert f"the inventory {empty_group} has no hosts in group v100" in output
    assert "-i inventory/v100-hosts.yml" in output


@pytest.mark.parametrize("command", [["deploy"], ["health"], ["bench"]])
@pytest.mark.parametrize("inventory", ["garbage", "empty"])
def test_fleet_commands_refuse_a_useless_inventory_before_running(
        tmp_path, capsys, empty_group, command, inventory):
    path = empty_group
    if inventory == "garbage":
        path = tmp_path / "garbage.yml"
        path.write_text("[[[\n")
    results = sorted((REPO / "results").glob("*")) if (REPO / "results").is_dir() else []
    assert onecat_main([*command, "-i", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err
    assert ("cannot be parsed" if inventory == "garbage" else "no hosts in group v100") in err
    after = sorted((REPO / "results").glob("*")) if (REPO / "results").is_dir() else []
    assert after == results, "a refused run must not create a results folder"


def test_secrets_given_with_e_and_in_the_environment_stay_out_of_the_artifacts(
        tmp_path, monkeypatch):
    secrets = {"api": "sk-onecat-test-api-key-1", "token": "hf_onecat_test_token_2",
               "env": "env-secret-value-3"}
    digest = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in secrets.items()}
    play = tmp_path / "check.yml"
    play.write_text(f"""---
- name: Check that the extra variables arrived.
  hosts: localhost
  gather_facts: true
  tasks:
    - name: Compare the variables with the expected digests.
      ansible.builtin.assert:
        that:
          - (onecat_api_key | hash('sha256')) == '{digest['api']}'
          - (hf_token | hash('sha256')) == '{digest['token']}'
          - onecat_run_id is defined
""")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {sys.executable}\n")
    monkeypatch.setenv("ONECAT_TEST_SECRET_TOKEN", secrets["env"])
    outcome = run_playbook(str(play), str(inventory), results_dir=tmp_path / "results",
                           extra_vars=[f"onecat_api_key={secrets['api']}",
                                       json.dumps({"hf_token": secrets["token"]})],
                           stream=io.StringIO())
    assert outcome.rc == 0, (outcome.run_dir / "runner" / "artifacts" / "ansible" /
                             "stdout").read_text()
    leaks = [str(path.relative_to(outcome.run_dir)) for path in outcome.run_dir.rglob("*")
             if path.is_file() and any(v.encode() in path.read_bytes()
                                       for v in secrets.values())]
    assert leaks == []
    command = json.loads((outcome.run_dir / "runner" / "artifacts" / "ansible" / "command")
                         .read_text())
    assert command["env"]["ONECAT_TEST_SECRET_TOKEN"] == "<redacted by onecat>"
    assert command["env"]["ANSIBLE_CONFIG"].endswith("ansible.cfg")
    assert not (outcome.run_dir / "runner" / "env").exists()
