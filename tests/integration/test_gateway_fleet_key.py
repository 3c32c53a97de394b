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


# A change of the key set by hand (onecat_api_key, with onecat_api_key_retiring the previous
# one): the same choice as the fleet key's rotation, with no key file on the controller.
def _hand_set(new: str = NEW, retiring: str = OLD) -> tuple[str, str]:
    return "-e", f'{{"onecat_api_key": "{new}", "onecat_api_key_retiring": "{retiring}"}}'


def test_the_gateway_sends_the_new_hand_set_key_once_every_back_end_accepts_it(tmp_path):
    with contextlib.ExitStack() as stack:
        nodes = {n: _node(_engine(stack, tmp_path, n, NEW, OLD)) for n in ("n1", "n2")}
        proc = run_role(tmp_path, nodes, "-e", "onecat_gateway_agent_port=0", *_hand_set())
    output = proc.stdout + proc.stderr
    assert (tmp_path / "haproxy.cfg").exists(), output[-3000:]
    assert _sent_in_config(tmp_path) == "new"
    assert NEW not in output and OLD not in output
    assert not list(tmp_path.glob("secrets/engine-api-key*"))  # no fleet key file is made
    # Asked, not assumed: each back end was asked with the new key before it was sent.
    probe = output.split("Ask each back end whether it accepts the new engines' key.]", 1)[-1]
    probe = probe.split("TASK [", 1)[0]
    assert probe.count("ok: [gw] => (item=") == 2 and "skipping" not in probe, output[-3000:]


def test_the_gateway_keeps_the_old_hand_set_key_while_a_back_end_refuses_the_new_one(tmp_path):
    with contextlib.ExitStack() as stack:
        nodes = {"n1": _node(_engine(stack, tmp_path, "n1", NEW, OLD)),
                 "n2": _node(_engine(stack, tmp_path, "n2", OLD))}  # not restarted yet
        proc = run_role(tmp_path, nodes, "-e", "onecat_gateway_agent_port=0", *_hand_set())
    output = " ".join((proc.stdout + proc.stderr).split())
    assert (tmp_path / "haproxy.cfg").exists(), output[-3000:]
    assert _sent_in_config(tmp_path) == "old"
    assert "a change of onecat_api_key (onecat_api_key_retiring is set) is under way, but n2 " \
           "refuse(s) the new key" in output, output[-3000:]
    assert "keep onecat_api_key_retiring until it says it sends the new key" in output
    assert NEW not in output and OLD not in output


@pytest.mark.parametrize(("extra", "expected"), [
    (_hand_set(NEW, NEW), "onecat_api_key_retiring (gateway_engine_api_key_retiring) is the "
                          "same key as onecat_api_key"),
    (("-e", f'{{"onecat_api_key_retiring": "{OLD}"}}'),
     "onecat_api_key_retiring (gateway_engine_api_key_retiring) is set, but onecat_api_key"),
    (_hand_set(NEW, "0123456789abcdef$HOME"), "the key being retired"),
])
def test_a_retiring_hand_set_key_that_retires_nothing_or_is_malformed_is_refused(
        tmp_path, extra, expected):
    _secrets(tmp_path)  # a fleet key file too: onecat_api_key_retiring never stands for it
    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    node = {"serving": True, "in_rotation": True, "address": "127.0.0.1", "port": 8000,
            "max_num_seqs": 8}
    proc = run_role(tmp_path, {"n1": node}, "-e", "onecat_gateway_agent_port=0", *extra)
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and expected in output, output[-2000:]
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"
    assert NEW not in output and OLD not in output and "$HOME" not in output
