"""The key guard during a fleet key rotation: the retiring key opens what the key opens, and
what reaches vLLM inside carries the current key (its own check knows VLLM_API_KEY alone)."""

from __future__ import annotations

import asyncio

import pytest

from onecat.serve import guard

API, OLD, METRICS = "a" * 32, "o" * 32, "m" * 32


@pytest.mark.parametrize(("path", "token", "status"), [
    ("/v1/completions", API, 0), ("/v1/completions", OLD, 0), ("/health", OLD, 0),
    ("/v1/completions", "x" * 32, 401), ("/v1/completions", "", 401),
    ("/metrics", OLD, 401), ("/metrics", METRICS, 0),
])
def test_a_retiring_key_opens_what_the_key_opens(path, token, status):
    assert guard.decide(path, token, API, METRICS, frozenset(), (OLD,)) == status


def test_a_retiring_key_alone_opens_nothing():
    # Closed when misconfigured: no current key, the retiring one is no key either.
    assert guard.decide("/v1/models", OLD, "", METRICS, frozenset(), (OLD,)) == 401


def _through(middleware: guard.Guard, token: str) -> tuple[list, list]:
    seen, sent = [], []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send_):
        seen.append(dict(scope["headers"]))

    middleware.app = app
    headers = [(b"x-other", b"1"), (b"authorization", f"Bearer {token}".encode())]
    asyncio.run(middleware({"type": "http", "path": "/v1/models", "headers": headers}, None, send))
    return seen, sent


def test_the_retiring_key_goes_inward_as_the_current_key():
    middleware = guard.Guard(None, api_key=API, metrics_key=METRICS, retiring=(OLD,))
    seen, _ = _through(middleware, OLD)
    assert seen == [{b"x-other": b"1", b"authorization": f"Bearer {API}".encode()}]
    seen, _ = _through(middleware, API)
    assert seen == [{b"x-other": b"1", b"authorization": f"Bearer {API}".encode()}]
    seen, sent = _through(middleware, "x" * 32)
    assert seen == [] and sent[0]["status"] == 401


def test_the_retiring_keys_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", API)
    monkeypatch.setenv("ONECAT_METRICS_KEY", METRICS)
    monkeypatch.setenv("ONECAT_RETIRING_API_KEYS", f" {OLD} ,, ")
    assert guard.Guard(None).retiring == (OLD,)
    monkeypatch.delenv("ONECAT_RETIRING_API_KEYS")
    assert guard.Guard(None).retiring == ()
