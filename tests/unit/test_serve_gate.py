"""The health gate and the smoke verdict, against a small real HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from onecat.serve.gate import judge_smoke, smoke, wait_ready


@pytest.mark.parametrize(("text", "piece"), [
    ("!!!!!!!!", "'!'"),
    (" the" * 16, "' the'"),
    ("abc" * 8, "'abc'"),
    (" !" * 8, "' !'"),
    ("Paris. It is the capital", None),
    ("!!", None),  # too short to call it garbage
])
def test_a_repeated_token_fails_the_smoke(text, piece):
    # The repeated piece is named in the reason; what is not garbage passes.
    ok, reason = judge_smoke(text)
    assert ok is (piece is None), reason
    if piece is not None:
        assert f"collapsed into repetition: {piece}" in reason, reason


def test_judge_smoke_reasons():
    assert judge_smoke("   ") == (False, "the smoke completion returned no text")
    ok, reason = judge_smoke("!!!!!!!!!!!!!!!!")
    assert not ok
    assert reason.startswith("the smoke completion has degenerated (collapsed into repetition: "
                             "'!' 16 times at the end")
    assert reason.endswith("the garbage/NaN symptom of a broken engine or kernel")
    assert judge_smoke(" Paris, a city") == (True, "the smoke completion answered 'Paris, a city'")


class FakeVllm(BaseHTTPRequestHandler):
    """Answers like vLLM: health after `ready_after` polls, a model list, completions."""

    state: ClassVar[dict] = {}

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, body: object) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        state = self.state
        if self.path == "/health":
            state["polls"] += 1
            self._json(200 if state["polls"] > state["ready_after"] else 503, {})
        elif self.path == "/v1/models":
            # Upstream vLLM's --api-key guards /v1 only (/health answers anyone).
            if state.get("key") and self.headers.get("Authorization") != f"Bearer {state['key']}":
                self._json(401, {"error": "Unauthorized"})
                return
            self._json(200, {"object": "list", "data": [{"id": state["name"]}]})
        else:
            self._json(404, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.state["requests"].append(body)
        self._json(200, {"choices": [{"text": self.state["text"]}]})


@pytest.fixture
def server() -> Iterator[tuple[str, dict]]:
    FakeVllm.state = {"polls": 0, "ready_after": 2, "name": "m", "text": " Paris.",
                      "requests": []}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", FakeVllm.state
    httpd.shutdown()


def test_wait_ready_polls_until_health_and_name(server):
    url, state = server
    ok, reason = wait_ready(url, "m", 10, interval_s=0.01)
    assert (ok, reason) == (True, "/health is 200 and /v1/models lists 'm'")
    assert state["polls"] == 3


def test_wait_ready_times_out_when_the_name_is_missing(server):
    url, state = server
    state["ready_after"] = 0
    ticks = iter(range(100))
    ok, reason = wait_ready(url, "other", 5, interval_s=0, clock=lambda: next(ticks),
                            sleep=lambda s: None)
    assert not ok
    assert reason == "not ready after 5 s: /v1/models answered 200 listing ['m'] (waiting for " \
                     "'other')"


def test_wait_ready_stops_when_the_unit_died(server):
    url, state = server
    state["ready_after"] = 10**6
    ok, reason = wait_ready(url, "m", 600, is_dead=lambda: "vllm.service is failed",
                            interval_s=0)
    assert (ok, reason) == (False, "the server died while starting: vllm.service is failed")


def test_wait_ready_stops_at_once_when_the_model_list_refuses_the_key(server):
    url, state = server
    state.update(ready_after=0, key="right")
    ok, reason = wait_ready(url, "m", 600, "wrong", interval_s=0)
    assert not ok
    assert reason.startswith("/v1/models answered 401: the server does not accept the key")
    assert state["polls"] == 1  # not one poll more: the key will not change
    assert wait_ready(url, "m", 5, "right", interval_s=0)[0]


def test_wait_ready_with_nothing_listening():
    ok, reason = wait_ready("http://127.0.0.1:9", "m", 0, interval_s=0)
    assert (ok, reason) == (False, "not ready after 0 s: nothing answered yet")


def test_smoke_sends_a_short_greedy_completion(server):
    url, state = server
    assert smoke(url, "m", "The capital of France is", 16) == (
        True, "the smoke completion answered 'Paris.'", " Paris.")
    assert state["requests"] == [{"model": "m", "prompt": "The capital of France is",
                                  "max_tokens": 16, "temperature": 0}]


def test_smoke_fails_on_garbage(server):
    url, state = server
    state["text"] = "!" * 16
    passed, reason, text = smoke(url, "m", "x", 16)
    assert not passed and text == "!" * 16
    assert "has degenerated (collapsed into repetition: '!'" in reason
