"""vllm_serve: a change of the key set by hand (onecat_api_key) without an outage (real
ansible-playbook, local). With onecat_api_key_retiring, the previous key, every node's
environment file holds both keys (VLLM_API_KEY and ONECAT_RETIRING_API_KEYS, the key guard's);
without it, the new key alone. A retiring key equal to the key, set without a key of its own,
or outside the key alphabet is refused before anything is written; the serve stage's stamp
changes when it is set and when it is removed, so the stage runs on every node. No key is
printed.
"""

from __future__ import annotations

import json
from pathlib import Path

from .ansible_run import host_outcome, run_playbook
from .test_serve_role import _host, wheel  # noqa: F401 (the module-scoped wheel fixture)

OLD = "old-hand-set-key-" + "o" * 26
NEW = "new-hand-set-key-" + "n" * 26


def _env(tmp: Path, host: str) -> dict[str, str]:
    text = (tmp / f"{host}.env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def _leaks(data: dict, keys: tuple[str, ...], own: str) -> list[str]:
    """Tasks (other than the test playbook's own `own`) whose result shows a key."""
    return [task["task"]["name"] for play in data["plays"] for task in play["tasks"]
            for result in task["hosts"].values() for key in keys
            if key in json.dumps(result) and not task["task"]["name"].endswith(own)]


def test_every_node_accepts_the_new_and_the_retiring_key_and_only_the_new_one_without_it(
        tmp_path):
    hosts = {"rolling": {"onecat_api_key": NEW, "onecat_api_key_retiring": OLD},
             "done": {"onecat_api_key": NEW}}
    for name, host in hosts.items():
        host["vllm_serve_env_file"] = str(tmp_path / f"{name}.current.env")
    data = run_playbook("serve_fleet_key.yml", hosts, tmp_path, check=False,
                        groups={"gateway": ["gw"], "v100": list(hosts)})
    for name in hosts:
        assert host_outcome(data, name)["failed_task"] is None, host_outcome(data, name)
    rolling = _env(tmp_path, "rolling")
    assert rolling["VLLM_API_KEY"] == NEW and rolling["ONECAT_RETIRING_API_KEYS"] == OLD
    done = _env(tmp_path, "done")
    assert done["VLLM_API_KEY"] == NEW and "ONECAT_RETIRING_API_KEYS" not in done
    assert OLD not in (tmp_path / "done.env").read_text()
    assert not _leaks(data, (OLD, NEW), "Write the rendered environment file."), \
        _leaks(data, (OLD, NEW), "Write the rendered environment file.")


REFUSED = {
    "same": ({"onecat_api_key": NEW, "onecat_api_key_retiring": NEW},
             "onecat_api_key_retiring (vllm_serve_api_key_retiring) on same is the same key as "
             "onecat_api_key (vllm_serve_api_key)"),
    "alone": ({"onecat_api_key_retiring": OLD, "vllm_serve_bind_address": "0.0.0.0"},
              "onecat_api_key_retiring (vllm_serve_api_key_retiring) on alone is set, but "
              "onecat_api_key (vllm_serve_api_key) is not"),
    # A '$' would be expanded by HAProxy in the gateway's "Bearer ..." while the key is sent.
    "dollar": ({"onecat_api_key": NEW, "onecat_api_key_retiring": "0123456789abcdef$HOME"},
               "vllm_serve_api_key_retiring must be 16 to 512 letters, digits or . _ ~ + / = -"),
}


def test_a_retiring_key_that_retires_nothing_or_is_malformed_is_refused(tmp_path, wheel):  # noqa: F811
    hosts = {}
    for name, (overrides, _) in REFUSED.items():
        (tmp_path / name).mkdir()
        hosts[name] = _host(tmp_path / name, wheel, **overrides)
    data = run_playbook("serve_render.yml", hosts, tmp_path, check=False)
    for name, (_, expected) in REFUSED.items():
        outcome = host_outcome(data, name)
        assert outcome["failed_task"] is not None, f"{name} was not refused"
        assert expected in " ".join(outcome["msg"].split()), outcome["msg"]
        assert outcome["changed"] == [] and not (tmp_path / f"{name}.env").exists()
    assert not _leaks(data, (OLD, NEW, "0123456789abcdef$HOME"), "Write the rendered files.")


def _want(tmp: Path, hosts: dict[str, dict]) -> dict[str, str]:
    """What the controller wants for the serve stage on each host (the check's digest)."""
    hosts = {name: {"stage_stamp_stage": "serve", "stage_stamp_role": "vllm_serve",
                    "onecat_api_key": NEW, **extra} for name, extra in hosts.items()}
    data = run_playbook("stamp_want.yml", hosts, tmp, check=False)
    wants = {}
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith("Compare the stage's stamp with what is wanted "
                                             "and what the node holds."):
                for name, result in task["hosts"].items():
                    wants[name] = result["invocation"]["module_args"]["want"]
    assert set(wants) == set(hosts), data
    return wants


def test_the_serve_stamp_changes_when_the_retiring_key_is_set_and_when_it_is_removed(tmp_path):
    other = "another-old-key-" + "a" * 20
    wants = _want(tmp_path, {"without": {}, "with": {"onecat_api_key_retiring": OLD},
                             "other": {"onecat_api_key_retiring": other}, "again": {}})
    assert wants["with"] != wants["without"] and wants["other"] not in (wants["with"],
                                                                        wants["without"])
    assert wants["again"] == wants["without"]  # removed: as before the change rolled out
    assert OLD not in json.dumps(wants) and other not in json.dumps(wants)
