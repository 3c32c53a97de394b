"""The gateway role during a fleet key rotation (real ansible-playbook, local, in front of
stand-in engines that load the serve role's key guard): it sends the new key once every back
end accepts it, else keeps the previous one; a readable key file is refused.

The role runs until it starts HAProxy (no systemd here): haproxy.cfg is written by then, after
`haproxy -c`. Recording the sent key (after the reload) is the molecule fleet scenario's part.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests" / "standin_engine"))

from standin_harness import standin  # noqa: E402
from test_gateway_role import run_role  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy is not installed (bootstrap.sh installs it)")

OLD = "old-fleet-key-" + "o" * 29
NEW = "new-fleet-key-" + "n" * 29
PYTHONPATH = f"{REPO / 'roles' / 'vllm_serve' / 'files'}:{REPO / 'tests' / 'standin_engine'}"
GUARD = {"PYTHONPATH": PYTHONPATH, "ONECAT_METRICS_KEY": "m" * 32}


def _engine(stack: contextlib.ExitStack, tmp: Path, name: str, key: str, retiring: str = ""):
    env = {**GUARD, "VLLM_API_KEY": key, "ONECAT_RETIRING_API_KEYS": retiring}
    (tmp / name).mkdir()
    return stack.enter_context(standin(tmp / name, env=env, ready_key=key,
                                       args=["--middleware", "onecat_guard.Guard"]))


def _node(server) -> dict:
    return {"serving": True, "in_rotation": True, "address": "127.0.0.1",
            "port": int(server.url.rsplit(":", 1)[1]), "max_num_seqs": 8}


def _secrets(tmp: Path, mode: int = 0o600) -> Path:
    secrets = tmp / "secrets"
    secrets.mkdir(mode=0o700)
    key_file = secrets / "engine-api-key"
    key_file.write_text(NEW + "\n")
    key_file.chmod(mode)
    retiring = secrets / "engine-api-key.retiring"
    retiring.write_text(OLD + "\n")
    retiring.chmod(0o600)
    (secrets / "engine-api-key.sent").write_text(
        "sha256:" + hashlib.sha256(OLD.encode()).hexdigest() + "\n")
    return key_file


def _sent_in_config(tmp: Path) -> str:
    text = (tmp / "haproxy.cfg").read_text()
    return "new" if f"Bearer {NEW}" in text and OLD not in text else \
        "old" if f"Bearer {OLD}" in text and NEW not in text else "?"


def test_the_gateway_sends_the_new_key_once_every_back_end_accepts_it(tmp_path):
    _secrets(tmp_path)
    with contextlib.ExitStack() as stack:
        nodes = {n: _node(_engine(stack, tmp_path, n, NEW, OLD)) for n in ("n1", "n2")}
        proc = run_role(tmp_path, nodes, "-e", "onecat_gateway_agent_port=0")
    output = proc.stdout + proc.stderr
    assert (tmp_path / "haproxy.cfg").exists(), output[-3000:]
    assert _sent_in_config(tmp_path) == "new"
    assert NEW not in output and OLD not in output


def test_the_gateway_keeps_the_old_key_while_a_back_end_refuses_the_new_one(tmp_path):
    _secrets(tmp_path)
    with contextlib.ExitStack() as stack:
        nodes = {"n1": _node(_engine(stack, tmp_path, "n1", NEW, OLD)),
                 "n2": _node(_engine(stack, tmp_path, "n2", OLD))}  # not restarted yet
        proc = run_role(tmp_path, nodes, "-e", "onecat_gateway_agent_port=0")
    output = " ".join((proc.stdout + proc.stderr).split())
    assert (tmp_path / "haproxy.cfg").exists(), output[-3000:]
    assert _sent_in_config(tmp_path) == "old"
    assert "n2 refuse(s) the new key" in output and "keeps sending the previous key" in output
    assert NEW not in output and OLD not in output


def test_a_fleet_key_file_others_can_read_is_refused(tmp_path):
    _secrets(tmp_path, mode=0o640)
    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    node = {"serving": True, "in_rotation": True, "address": "127.0.0.1", "port": 8000,
            "max_num_seqs": 8}
    proc = run_role(tmp_path, {"n1": node}, "-e", "onecat_gateway_agent_port=0")
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "mode 0640: its group or anyone" in output, output[-2000:]
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"
