"""The real engine's death: its engine core killed, on the tier's shared server, which this
test ends (tests/real_engine/conftest.py runs it after every other test of the tier).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import engine
import pytest

from onecat.answers.probe import probe
from onecat.serve.gate import wait_ready
from onecat.watch.look import Probe, run_probe

pytestmark = pytest.mark.real_engine


def test_an_engine_core_that_dies_takes_the_server_down_and_the_gate_and_watch_say_so(
        dying_server: engine.Server, tmp_path: Path) -> None:
    cores = dying_server.engine_core_pids()
    assert cores, "vLLM V1 runs its engine core in a process of its own"
    os.kill(cores[0], signal.SIGKILL)
    # vLLM's API server sees its engine core gone (EngineDeadError) only when it next talks to
    # it: /health may still answer 200 right after the kill (seen here), a completion answers
    # 500, then the server shuts itself down and nothing answers. No completion after the kill.
    seen: set[tuple[str, int]] = set()
    body = {"model": dying_server.served_name, "prompt": "x", "max_tokens": 2}
    deadline = time.monotonic() + 60
    while dying_server.process.poll() is None and time.monotonic() < deadline:
        for path, payload in (("/health", None), ("/v1/completions", body)):
            try:
                seen.add((path, engine.request(dying_server.base_url + path, payload,
                                               dying_server.api_key, timeout=5)[0]))
            except OSError:
                seen.add((path, 0))  # refused: the server is gone
        time.sleep(0.2)
    assert dying_server.process.poll() is not None, dying_server.tail()
    assert ("/v1/completions", 200) not in seen, seen
    ready, why = wait_ready(dying_server.base_url, dying_server.served_name, 3,
                            dying_server.api_key, interval_s=0.5)
    assert not ready and "not ready after" in why, why
    result = probe(dying_server.base_url, dying_server.served_name, "The capital of France is",
                   api_key=dying_server.api_key, timeout_s=5)
    # Not reached (down), not timed out (nothing took the request): the gateway's health check
    # takes such a node out; the watch does not call it hung, nor a quality fault.
    assert not result.ok and not result.reached and not result.timed_out, result
    _, findings = run_probe(Probe(
        dying_server.base_url, dying_server.served_name, ["The capital of France is"],
        tmp_path / "references.json", api_key=dying_server.api_key, timeout_s=5))
    assert {finding.code for finding in findings} == {"probe_unreachable"}, findings
