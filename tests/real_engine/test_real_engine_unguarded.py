"""The real engine as upstream vLLM starts it, without onecat's guard, and its death.

A server of this module's own (it is killed at the end): `--api-key` on the command line, the
way upstream's docs start it, which leaves /health open to anyone while /v1 needs the key.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import engine
import pytest

from onecat.answers.probe import probe
from onecat.serve.gate import wait_ready
from onecat.watch.look import Probe, run_probe

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engine.Server]:
    if engine.off():
        pytest.skip(engine.OFF_REASON)
    try:
        server = engine.start(tmp_path_factory.mktemp("bare-engine"), guard=False,
                              args=["--api-key", "bare-key"], api_key="bare-key")
    except engine.EngineUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


def test_the_gate_stops_at_once_when_the_models_list_refuses_the_key(
        bare_server: engine.Server) -> None:
    # Upstream answers /health to anyone and /v1/models 401 to a wrong key: the gate must not
    # wait out its whole timeout for a key the server will never take.
    assert engine.request(bare_server.base_url + "/health")[0] == 200
    began = time.monotonic()
    ready, why = wait_ready(bare_server.base_url, bare_server.served_name, 60, "wrong-key",
                            interval_s=0.5)
    assert not ready
    assert "does not accept the key" in why, why
    assert time.monotonic() - began < 10


def test_an_engine_core_that_dies_takes_the_server_down_and_the_gate_and_watch_say_so(
        bare_server: engine.Server, tmp_path: Path) -> None:
    cores = bare_server.engine_core_pids()
    assert cores, "vLLM V1 runs its engine core in a process of its own"
    os.kill(cores[0], signal.SIGKILL)
    # vLLM's API server sees its engine core gone (EngineDeadError) only when it next talks to
    # it: /health may still answer 200 right after the kill (seen here), a completion answers
    # 500, then the server shuts itself down and nothing answers. No completion after the kill.
    seen: set[tuple[str, int]] = set()
    body = {"model": bare_server.served_name, "prompt": "x", "max_tokens": 2}
    deadline = time.monotonic() + 60
    while bare_server.process.poll() is None and time.monotonic() < deadline:
        for path, payload in (("/health", None), ("/v1/completions", body)):
            try:
                seen.add((path, engine.request(bare_server.base_url + path, payload,
                                               bare_server.api_key, timeout=5)[0]))
            except OSError:
                seen.add((path, 0))  # refused: the server is gone
        time.sleep(0.2)
    assert bare_server.process.poll() is not None, bare_server.tail()
    assert ("/v1/completions", 200) not in seen, seen
    ready, why = wait_ready(bare_server.base_url, bare_server.served_name, 3,
                            bare_server.api_key, interval_s=0.5)
    assert not ready and "not ready after" in why, why
    result = probe(bare_server.base_url, bare_server.served_name, "The capital of France is",
                   api_key=bare_server.api_key, timeout_s=5)
    # Not reached (down), not timed out (nothing took the request): the gateway's health check
    # takes such a node out; the watch does not call it hung, nor a quality fault.
    assert not result.ok and not result.reached and not result.timed_out, result
    _, findings = run_probe(Probe(
        bare_server.base_url, bare_server.served_name, ["The capital of France is"],
        tmp_path / "references.json", api_key=bare_server.api_key, timeout_s=5))
    assert {finding.code for finding in findings} == {"probe_unreachable"}, findings
