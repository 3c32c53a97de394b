"""Exposure: where the API is published, the key guard in front of every path, host keys.

The guard (onecat/serve/guard.py) is the file the role mounts into the engine container and
loads with vLLM's --middleware; here it runs in the stand-in engine, which applies
--middleware classes as ASGI middleware the way vLLM does.
"""

from __future__ import annotations

import asyncio
import configparser
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from onecat.fleet.runner import runner_env
from onecat.serve import guard
from onecat.serve.gate import key_from_env_file, wait_ready
from onecat.serve.inputs import control_problems, env_problems, exposure, name_problems

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "standin_engine"
sys.path.insert(0, str(STANDIN))

from standin_harness import standin  # noqa: E402

API, METRICS = "a" * 40, "m" * 40


@pytest.mark.parametrize(("bind", "publish", "url", "exposed"), [
    ("127.0.0.1", "127.0.0.1:8000:8000", "http://127.0.0.1:8000", False),
    ("127.0.0.2", "127.0.0.2:8000:8000", "http://127.0.0.2:8000", False),
    ("::1", "[::1]:8000:8000", "http://[::1]:8000", False),
    ("0.0.0.0", "0.0.0.0:8000:8000", "http://127.0.0.1:8000", True),
    ("::", "[::]:8000:8000", "http://[::1]:8000", True),
    ("10.1.2.3", "10.1.2.3:8000:8000", "http://10.1.2.3:8000", True),
])
def test_exposure_of_an_address(bind, publish, url, exposed):
    assert exposure(bind, 8000) == ({"publish": publish, "url": url, "exposed": exposed}, [])


@pytest.mark.parametrize(("bind", "port"), [
    ("", 8000), ("localhost", 8000), ("0.0.0.0\n", 8000), ("10.0.0.1:80", 8000),
    ("127.0.0.1", 0), ("127.0.0.1", 70000), ("127.0.0.1", "80\n"), ("127.0.0.1", "8o"),
])
def test_exposure_refuses_what_is_not_an_address_and_port(bind, port):
    published, problems = exposure(bind, port)
    assert published == {} and len(problems) == 1


def test_control_characters_are_found_anywhere_in_a_value():
    assert control_problems("x", {"a": ["ok", "b\rc"]}) == [
        "x.a[1] contains the control character '\\r' at position 1; values that reach the unit, "
        "the environment file or a command line must be one line of printable text"]
    assert control_problems("x", {"k\n": "v"})[0].startswith("x.k\n contains")
    assert control_problems("x", ["tab\there"]) and control_problems("x", "\u2028")
    assert control_problems("x", {"fine": ["a b", "%$"], "n": 3}) == []


def test_names_are_matched_whole():
    # `$` lets a trailing newline through; the rules match the whole value.
    assert name_problems({"vllm_serve_engine_version": "1.5.0\n"})
    assert name_problems({"vllm_serve_unit_name": "vllm.service\nExecStartPre=/x"})
    assert name_problems({"image_id": "sha256:" + "a" * 64 + "\n"})
    assert name_problems({"vllm_serve_engine_version": "1.5.0", "image_id": "",
                          "vllm_serve_unit_name": "vllm@a.service"}) == []


def test_secret_and_role_owned_environment_is_refused_outside_the_file():
    problems = env_problems("vllm_serve_env", {"VLLM_API_KEY": "", "HF_TOKEN": "x",
                                               "OPENAI_API_KEY": "x", "PYTHONPATH": "/x",
                                               "VLLM_LOGGING_LEVEL": "INFO", "1X": "y"})
    assert len(problems) == 5
    assert env_problems("vllm_serve_secret_env", {"HF_TOKEN": "x"}, secrets=True) == []
    assert env_problems("vllm_serve_secret_env", {"VLLM_API_KEY": "x"}, secrets=True)


@pytest.mark.parametrize(("path", "token", "status"), [
    ("/v1/models", API, 0), ("/v1/models", "", 401), ("/v1/models", METRICS, 401),
    ("/tokenize", "", 401), ("/health", "", 401), ("/version", "", 401),
    ("/metrics", API, 401), ("/metrics", METRICS, 0), ("/metrics/", "", 401),
    ("/open", "", 0), ("/v1/models", API[:-1], 401),
])
def test_guard_decides_every_path(path, token, status):
    assert guard.decide(path, token, API, METRICS, frozenset({"/open"})) == status


def test_guard_without_keys_lets_nothing_through():
    assert guard.decide("/health", "", "", "") == 401
    assert guard.decide("/metrics", "", API, "") == 401


def test_guard_is_plain_asgi():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope.get("path", scope["type"]))

    sent = []

    async def send(message):
        sent.append(message)

    middleware = guard.Guard(app, api_key=API, metrics_key=METRICS)
    headers = [(b"authorization", f"Bearer {API}".encode())]
    asyncio.run(middleware({"type": "http", "path": "/tokenize", "headers": headers}, None, send))
    asyncio.run(middleware({"type": "http", "path": "/tokenize", "headers": []}, None, send))
    asyncio.run(middleware({"type": "lifespan"}, None, send))
    assert seen == ["/tokenize", "lifespan"]
    assert sent[0]["status"] == 401 and json.loads(sent[1]["body"])["error"]["code"] == 401


def _status(url: str, key: str = "", body: dict | None = None) -> int:
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers={"authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    env = {"VLLM_API_KEY": API, "ONECAT_METRICS_KEY": METRICS,
           "PYTHONPATH": f"{REPO / 'roles' / 'vllm_serve' / 'files'}:{STANDIN}"}
    with standin(tmp_path_factory.mktemp("guarded"), env=env, ready_key=API,
                 args=["--middleware", "onecat_guard.Guard"]) as server:
        yield server


@pytest.mark.parametrize(("path", "body"), [
    ("/health", None), ("/v1/models", None), ("/metrics", None), ("/version", None),
    ("/tokenize", {"prompt": "hi"}), ("/v1/completions", {"model": "standin-model",
                                                          "prompt": "hi", "max_tokens": 2}),
])
def test_no_path_answers_without_the_key(guarded, path, body):
    # vLLM's own --api-key leaves /health, /metrics and /tokenize open; the guard closes them.
    assert _status(guarded.url + path, "", body) == 401
    assert _status(guarded.url + path, "wrong-" + API, body) == 401


def test_the_key_opens_the_api_and_only_the_scrapers_key_opens_metrics(guarded):
    assert _status(guarded.url + "/health", API) == 200
    assert _status(guarded.url + "/tokenize", API, {"prompt": "hi"}) == 200
    assert _status(guarded.url + "/metrics", API) == 401
    assert _status(guarded.url + "/metrics", METRICS) == 200
    assert _status(guarded.url + "/v1/models", METRICS) == 401


def test_the_gate_reads_the_key_from_the_env_file(guarded, tmp_path):
    env_file = "# managed\nVLLM_API_KEY=" + API + "\nONECAT_METRICS_KEY=" + METRICS + "\n"
    key = key_from_env_file(env_file)
    assert key == API and key_from_env_file("# VLLM_API_KEY=x\n") == ""
    # One reader for every client (the gate, the watch, the repair runner, the burn-in, the
    # benchmark): a file a user wrote for a shell reads the same.
    assert key_from_env_file("export VLLM_API_KEY='abc'\n") == "abc"
    assert key_from_env_file('export ONECAT_METRICS_KEY="d=f"\n', "ONECAT_METRICS_KEY") == "d=f"
    assert wait_ready(guarded.url, "standin-model", 5, key)[0]
    ready, reason = wait_ready(guarded.url, "standin-model", 60, "wrong-" + API, interval_s=0.1)
    assert not ready and "/health answered 401: the server does not accept the key" in reason


def test_ssh_host_keys_are_checked_except_on_the_simulated_fleet():
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config.getboolean("defaults", "host_key_checking", fallback=True) is True
    # ansible-runner switches checking off unless the environment says otherwise.
    assert runner_env()["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    shared = yaml.safe_load((REPO / "molecule" / "shared" / "group_vars" / "all.yml").read_text())
    assert shared["ansible_host_key_checking"] is False
    for inventory in (REPO / "inventory").rglob("*.yml"):
        if inventory.name == "simulated.yml":  # the simulated fleet's own inventory
            continue
        text = inventory.read_text()
        assert "host_key_checking" not in text and "StrictHostKeyChecking" not in text, inventory
