"""vllm_serve: the fleet key's rotation without an outage, on the controller's files and in the
environment file each node gets (real ansible-playbook, local; tests/roles/ansible/
serve_fleet_key.yml runs the role's secrets.yml and fleet_key.yml in batches of one).

-e onecat_fleet_key_rotate=true: the key becomes the retiring key, a new one the key, once per
run; every node's environment file has both. The first run after the gateway sends the new key
(its sent file) drops the retiring key. Every key file is owner-only and holds one key of the
shared alphabet; no key is printed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .ansible_run import host_outcome, run_playbook

OLD = "O" * 43
NEW = "N" * 43


def _env(tmp: Path, host: str) -> dict[str, str]:
    text = (tmp / f"{host}.env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def _sent(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest() + "\n"


def _run(tmp: Path, files: dict[str, tuple[str, int]], hosts=("n1", "n2"), **extra) -> tuple:
    secrets = tmp / "secrets"
    secrets.mkdir(mode=0o700, exist_ok=True)
    key_file = secrets / "engine-api-key"
    for suffix, (content, mode) in files.items():
        path = secrets / ("engine-api-key" + suffix)
        path.write_text(content)
        path.chmod(mode)
    host_vars = {name: {"vllm_serve_env_file": str(tmp / f"{name}.current.env"),
                        "vllm_serve_fleet_key_file": str(key_file), **extra}
                 for name in hosts}
    data = run_playbook("serve_fleet_key.yml", host_vars, tmp, check=False,
                        groups={"gateway": ["gw"], "v100": list(hosts)})
    leaks = [task["task"]["name"] for play in data["plays"] for task in play["tasks"]
             for result in task["hosts"].values()
             for key in {OLD, NEW, *(c.strip() for c, _ in files.values())}
             if len(key) >= 16 and key in json.dumps(result)
             and task["task"]["name"] != "Write the rendered environment file."]
    assert not leaks, leaks
    return data, key_file


def test_a_rotation_keeps_the_old_key_as_retiring_once_and_every_node_accepts_both(tmp_path):
    data, key_file = _run(tmp_path, {"": (OLD + "\n", 0o600), ".sent": (_sent(OLD), 0o600)},
                          vllm_serve_fleet_key_rotate=True)
    for host in ("n1", "n2"):
        assert host_outcome(data, host)["failed_task"] is None, host_outcome(data, host)
    new = key_file.read_text().strip()
    retiring = Path(str(key_file) + ".retiring")
    # Once per run: the second batch (n2) found the rotation done and took the same keys.
    assert new != OLD and len(new) == 43 and new.isalnum()
    assert retiring.read_text() == OLD + "\n" and retiring.stat().st_mode & 0o777 == 0o600
    assert key_file.stat().st_mode & 0o777 == 0o600
    for host in ("n1", "n2"):
        env = _env(tmp_path, host)
        assert env["VLLM_API_KEY"] == new and env["ONECAT_RETIRING_API_KEYS"] == OLD


def test_the_retiring_key_stays_until_the_gateway_sends_the_new_one(tmp_path):
    files = {"": (NEW + "\n", 0o600), ".retiring": (OLD + "\n", 0o600),
             ".sent": (_sent(OLD), 0o600)}
    data, key_file = _run(tmp_path, files)
    assert host_outcome(data, "n1")["failed_task"] is None, host_outcome(data, "n1")
    assert Path(str(key_file) + ".retiring").exists()
    assert _env(tmp_path, "n2")["ONECAT_RETIRING_API_KEYS"] == OLD


def test_the_first_run_after_the_gateway_switched_drops_the_retiring_key(tmp_path):
    files = {"": (NEW + "\n", 0o600), ".retiring": (OLD + "\n", 0o600),
             ".sent": (_sent(NEW), 0o600)}
    data, key_file = _run(tmp_path, files)
    assert host_outcome(data, "n1")["failed_task"] is None, host_outcome(data, "n1")
    assert not Path(str(key_file) + ".retiring").exists()
    assert key_file.read_text() == NEW + "\n"
    for host in ("n1", "n2"):
        env = _env(tmp_path, host)
        assert env["VLLM_API_KEY"] == NEW and "ONECAT_RETIRING_API_KEYS" not in env
        assert OLD not in (tmp_path / f"{host}.env").read_text()


@pytest.mark.parametrize(("files", "extra", "expected"), [
    # A second rotation while the gateway may still send the retiring key would lock it out.
    ({"": (NEW + "\n", 0o600), ".retiring": (OLD + "\n", 0o600), ".sent": (_sent(OLD), 0o600)},
     {"vllm_serve_fleet_key_rotate": True}, "a rotation of the fleet key is still under way"),
    ({"": (NEW + "\n", 0o600), ".retiring": (OLD + "\n", 0o644)}, {},
     "engine-api-key.retiring on the controller is mode 0644: its group or anyone"),
    ({"": (NEW + "\n", 0o600), ".retiring": ("0123456789abcdef$HOME\n", 0o600)}, {},
     "does not hold one key of 16 to 512 letters"),
    # "rotate" says what it rotates: with onecat_api_key there is no fleet key to rotate.
    ({}, {"vllm_serve_fleet_key_rotate": True, "vllm_serve_api_key": NEW},
     "onecat_fleet_key_rotate rotates the key a gateway fleet's nodes share"),
])
def test_an_unsafe_rotation_or_key_file_is_refused_before_anything_changes(
        tmp_path, files, extra, expected):
    data, key_file = _run(tmp_path, files, hosts=("n1",), **extra)
    outcome = host_outcome(data, "n1")
    assert outcome["failed_task"] and expected in " ".join(outcome["msg"].split()), outcome
    assert not (tmp_path / "n1.env").exists()
    for suffix, (content, _) in files.items():
        assert Path(str(key_file) + suffix).read_text() == content
    assert not Path(str(key_file) + ".retiring").exists() or ".retiring" in files
