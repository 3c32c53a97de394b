"""A fleet key rotation without an outage: a real HAProxy (the gateway role's template) in front
of stand-in engines that load the role's key guard, with the environment file the serve role
renders (roles/vllm_serve/templates/vllm.env.j2), restarted one at a time as the serve stage
does (drain, wait idle, restart, ready), under a streaming load.

The stand-in checks its keys as the pinned fork does (tests/standin_engine/README.md): the
guard in front of it, vLLM's own check of VLLM_API_KEY inside.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jinja2
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "standin_engine"))

from gateway_harness import Engine, base_vars, haproxy, render, wait_until  # noqa: E402
from gateway_load import LoadClient, failed, truncated  # noqa: E402
from standin_harness import standin  # noqa: E402

from onecat.gateway import backends  # noqa: E402
from onecat.gateway.runtime import Runtime, servers  # noqa: E402

MODEL = "standin-model"
OLD = "old-fleet-key-" + "o" * 29
NEW = "new-fleet-key-" + "n" * 29
METRICS = "metrics-key-" + "m" * 31
GUARD_DIR = REPO / "roles" / "vllm_serve" / "files"
TOKENS = 40
SLOW = {"STANDIN_DECODE_MS": "15"}

needs_haproxy = pytest.mark.skipif(shutil.which("haproxy") is None,
                                   reason="haproxy is not installed (bootstrap.sh installs it)")


def env_file(api_key: str, retiring: list[str]) -> dict[str, str]:
    """The serve role's environment file for these keys, read as `docker run --env-file` does."""
    template = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(REPO / "roles" / "vllm_serve" / "templates")),
        trim_blocks=True, undefined=jinja2.StrictUndefined).get_template("vllm.env.j2")
    text = template.render(ansible_managed="test", vllm_serve_unit_name="vllm",
                           __vllm_serve_api_key=api_key, __vllm_serve_metrics_key=METRICS,
                           __vllm_serve_retiring_api_keys=retiring, vllm_serve_open_paths=[],
                           vllm_serve_secret_env={})
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def status(url: str, key: str = "", body: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"}
        if key else {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 2}


class GuardedEngine(Engine):
    """A stand-in as the serve role runs it: --middleware onecat_guard.Guard, keys from the
    rendered environment file; ready when /health answers the key it was started with."""

    def start(self, env: dict[str, str] | None = None) -> GuardedEngine:
        from standin_harness import command, environment

        env = env or {}
        argv = command("serve", str(self.model_dir), "--host", "127.0.0.1", "--port",
                       str(self.port), "--served-model-name", self.model_name, "--dtype", "half",
                       "--disable-uvicorn-access-log", "--middleware", "onecat_guard.Guard")
        sink = (self.workdir / f"engine-{self.name}.log").open("ab")
        path = f"{GUARD_DIR}:{REPO / 'tests' / 'standin_engine'}"
        self.process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                        env=environment({**SLOW, **env, "PYTHONPATH": path}))
        key = env.get("VLLM_API_KEY", "")
        if not wait_until(lambda: self._health(key), timeout=20, interval=0.05):
            raise RuntimeError(f"engine {self.name} did not start")
        return self

    def _health(self, key: str) -> bool:
        try:
            return status(self.url + "/health", key)[0] == 200
        except OSError:
            return False


def gateway_vars(tmp_path: Path, engines: list[Engine], engine_key: str) -> dict:
    variables = base_vars(tmp_path)
    nodes = {e.name: {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                      "port": e.port, "max_num_seqs": 8, "agent_port": 0} for e in engines}
    variables["gateway_servers"] = [s.as_dict() for s in backends.select(nodes).servers]
    variables["gateway_engine_api_key"] = engine_key
    return variables


def all_up(runtime: Runtime, count: int) -> bool:
    return len([s for s in servers(runtime.stat(), "onecat_nodes")
                if s.status.startswith("UP")]) == count


def rolling_restart(runtime: Runtime, engines: list[GuardedEngine], env: dict[str, str]) -> None:
    """What the serve stage does per node: drain at the gateway, wait idle, restart, ready."""
    for engine in engines:
        runtime.set_state("onecat_nodes", engine.name, "drain")
        idle, left, waited = runtime.wait_idle("onecat_nodes", engine.name, timeout=30)
        assert idle, f"{engine.name} still has {left} session(s) after {waited:.1f} s"
        engine.stop()
        engine.start(env)
        runtime.set_state("onecat_nodes", engine.name, "ready")
        assert wait_until(lambda: all_up(runtime, len(engines)), timeout=10), runtime.stat()


@pytest.fixture
def fleet(tmp_path: Path):
    started = [GuardedEngine(tmp_path, name).start(env_file(OLD, []))
               for name in ("node-a", "node-b", "node-c")]
    yield started
    for engine in started:
        engine.stop()


@needs_haproxy
def test_a_rotation_with_a_retiring_key_loses_no_request(tmp_path: Path, fleet) -> None:
    variables = gateway_vars(tmp_path, fleet, OLD)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3)), runtime.stat()
        load = LoadClient(gw.url, MODEL, workers=4, max_tokens=TOKENS, max_seconds=120).start()
        try:
            time.sleep(0.8)
            # 1. The serve stage of the rotating run: every node accepts the new and the old key.
            rolling_restart(runtime, fleet, env_file(NEW, [OLD]))
            # 2. Its gateway stage: every back end accepts the new key, so HAProxy sends it.
            for engine in fleet:
                assert status(engine.url + "/v1/models", NEW)[0] == 200
            gw.config.write_text(render({**variables, "gateway_engine_api_key": NEW}))
            gw.reload()
            time.sleep(1.0)
            assert wait_until(lambda: all_up(runtime, 3), timeout=10), runtime.stat()
            # 3. The next serve stage: the retiring key is dropped, node by node.
            rolling_restart(runtime, fleet, env_file(NEW, []))
            time.sleep(0.8)
        finally:
            outcomes = load.stop()
        assert len(outcomes) > 20, len(outcomes)
        assert not failed(outcomes), failed(outcomes)[:3]
        assert not truncated(outcomes, TOKENS), truncated(outcomes, TOKENS)[:3]
        for engine in fleet:  # the old key is refused everywhere at the end, the new one works
            assert status(engine.url + "/v1/completions", OLD, COMPLETION)[0] == 401
            assert status(engine.url + "/health", OLD)[0] == 401
            assert status(engine.url + "/v1/completions", NEW, COMPLETION)[0] == 200
        assert wait_until(lambda: all_up(runtime, 3), timeout=5), runtime.stat()


@needs_haproxy
def test_the_rotation_without_a_retiring_key_drops_the_nodes(tmp_path: Path, fleet) -> None:
    """The control (the documented rotation before): a node restarted with the new key alone
    answers the gateway's old key with 401, fails its checks and drops out."""
    variables = gateway_vars(tmp_path, fleet, OLD)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3)), runtime.stat()
        engine = fleet[0]
        runtime.set_state("onecat_nodes", engine.name, "drain")
        assert runtime.wait_idle("onecat_nodes", engine.name, timeout=30)[0]
        engine.stop()
        engine.start(env_file(NEW, []))
        runtime.set_state("onecat_nodes", engine.name, "ready")
        assert status(engine.url + "/v1/models", OLD)[0] == 401
        assert wait_until(lambda: (s := runtime.status("onecat_nodes", engine.name))
                          and s.status.startswith("DOWN"), timeout=10), runtime.stat()


def test_the_stand_in_takes_several_keys_as_the_fork_does(tmp_path: Path) -> None:
    # --api-key KEY KEY: any one opens /v1; it wins over VLLM_API_KEY; /health stays open;
    # the 401 body is the fork's; the scheme is case-insensitive.
    with standin(tmp_path, env={"VLLM_API_KEY": "env-key-" + "e" * 20},
                 args=["--api-key", OLD, NEW]) as server:
        assert status(server.url + "/v1/models", OLD)[0] == 200
        assert status(server.url + "/v1/models", NEW)[0] == 200
        code, body = status(server.url + "/v1/models", "env-key-" + "e" * 20)
        assert code == 401 and json.loads(body) == {"error": "Unauthorized"}
        assert status(server.url + "/health")[0] == 200
        request = urllib.request.Request(server.url + "/v1/models",
                                         headers={"authorization": f"bEaReR {NEW}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        # Why the serve role does not pass them there: the fork prints its arguments.
        assert NEW in server.log.read_text()
    (tmp_path / "env").mkdir()
    with standin(tmp_path / "env", env={"VLLM_API_KEY": NEW}) as server:
        assert status(server.url + "/v1/models", NEW)[0] == 200
        assert status(server.url + "/v1/models", OLD)[0] == 401
        assert NEW not in server.log.read_text()


def test_the_guard_accepts_the_retiring_key_and_hands_vllm_the_current_one(tmp_path: Path):
    env = {**env_file(NEW, [OLD]),
           "PYTHONPATH": f"{GUARD_DIR}:{REPO / 'tests' / 'standin_engine'}"}
    with standin(tmp_path, env=env, ready_key=NEW,
                 args=["--middleware", "onecat_guard.Guard"]) as server:
        for key in (NEW, OLD):
            assert status(server.url + "/v1/completions", key, COMPLETION)[0] == 200
            assert status(server.url + "/tokenize", key, {"prompt": "hi"})[0] == 200
        assert status(server.url + "/v1/models", "wrong-" + NEW)[0] == 401
        assert status(server.url + "/metrics", OLD)[0] == 401
        assert status(server.url + "/metrics", METRICS)[0] == 200
        assert OLD not in server.log.read_text() and NEW not in server.log.read_text()
