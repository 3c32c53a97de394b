"""Fuzz the engine's key guard (onecat/serve/guard.py, vLLM's --middleware): hostile paths and
Authorization headers from the network, with a fleet key rotation under way or not.

The contract under test: the guard never raises; the application behind it sees a request only
on an open path, on /metrics with the scrapers' key, or elsewhere with the API key or a
retiring key (and never without an API key); a request let in with a retiring key reaches it
with exactly one `Authorization: Bearer <API key>` (vLLM's own check behind it knows only that
key; on an open path too, where it makes no difference), any other request with its headers
untouched; every refusal is a 401 (or a websocket close) that carries no key. Only the first
Authorization header counts, as in vLLM's own check.
"""

from __future__ import annotations

import asyncio
import json

from fuzzkit import examples, fuzz
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.serve import guard as guard_module
from onecat.serve.guard import Guard

API = "NewKey-0123456789abcdefghijklmnopqrstuvwxyz"
OLD = "OldKey-0123456789abcdefghijklmnopqrstuvwxyz"
METRICS = "Metrics-0123456789abcdefghijklmnopqrstuvwx"
OPEN = frozenset({"/health"})

TOKEN = (st.sampled_from([API, OLD, METRICS, "", API + " ", " " + OLD, API.lower(), OLD[:-1],
                          f"{OLD},{API}", "\x00" + API])
         | st.text(max_size=60))
AUTH_VALUE = (TOKEN.map(lambda t: f"Bearer {t}")
              | TOKEN.map(lambda t: f"bearer\t{t}") | TOKEN.map(lambda t: f"Basic {t}")
              | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
HEADERS = st.lists(
    st.tuples(st.sampled_from([b"authorization", b"Authorization", b"x-forwarded-for",
                               b"content-type"]) | st.binary(max_size=12),
              AUTH_VALUE.map(lambda v: v.encode("utf-8"))),
    max_size=4)
PATH = (st.sampled_from(["/v1/completions", "/metrics", "/metrics/", "/metricsx", "/health",
                         "/health/", "/tokenize", "", "/v1/../metrics", "/%2e%2e/metrics"])
        | st.text(max_size=30))
KEYS = st.sampled_from([(API, (OLD,)), (API, ()), ("", (OLD,)), (API, (OLD, "x" * 16))])


def run_guard(api: str, retiring: tuple[str, ...], kind: str, path: str,
              headers: list[tuple[bytes, bytes]]) -> tuple[list, list]:
    seen: list = []
    sent: list = []

    async def app(scope, receive, send) -> None:
        seen.append(scope)

    async def send(message) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    guard = Guard(app, api_key=api, metrics_key=METRICS, open_paths=OPEN, retiring=retiring)
    asyncio.run(guard({"type": kind, "path": path, "headers": list(headers)}, receive, send))
    return seen, sent


def token_of(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


@settings(max_examples=examples(400))
@given(KEYS, st.sampled_from(["http", "websocket"]), PATH, HEADERS)
@example((API, (OLD,)), "http", "/v1/models", [(b"authorization", f"Bearer {OLD}".encode())])
@example(("", (OLD,)), "http", "/v1/models", [(b"authorization", f"Bearer {OLD}".encode())])
@example((API, (OLD,)), "http", "/v1/completions",  # found by benchmarks/fuzz.py --factor 10
         [(b"authorization", f"bearer\t{API}".encode()),
          (b"authorization", f"Bearer {API}".encode())])
@fuzz("key guard")
def test_fuzz_key_guard(keys: tuple[str, tuple[str, ...]], kind: str, path: str,
                        headers: list[tuple[bytes, bytes]]) -> None:
    api, retiring = keys
    seen, sent = run_guard(api, retiring, kind, path, headers)
    token = token_of(headers)
    if path in OPEN:
        allowed = True
    elif path == "/metrics" or path.startswith("/metrics/"):
        allowed = token == METRICS
    else:
        allowed = bool(api) and (token == api or token in retiring)
    assert bool(seen) == allowed, (path, headers, seen, sent)
    if seen:
        inner = seen[0]["headers"]
        if api and token and token in retiring and token != api:
            assert [v for n, v in inner if n.lower() == b"authorization"] == [
                f"Bearer {api}".encode()], inner
        else:
            assert inner == headers
        return
    if kind == "websocket":
        assert sent == [{"type": "websocket.close", "code": 1008}]
        return
    assert sent[0]["status"] == 401
    body = sent[1]["body"].decode()
    assert all(key not in body for key in (API, OLD, METRICS))


TENANT = "ab" * 32
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
BODY = (st.dictionaries(st.sampled_from(["prompt", "cache_salt", "messages", "model", "x"]),
                        JSON_VALUE, max_size=4).map(lambda d: json.dumps(d).encode())
        | JSON_VALUE.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=200))


@settings(max_examples=examples(300))
@given(BODY)
@example(b'{"prompt": "x", "cache_salt": ""}')
@example(b'{"cache_salt": "a", "cache_salt": 5}')
@example(b"[" * 5000)
@example(b'{"prompt": "\\ud800"}')
@fuzz("key guard: cache_salt")
def test_fuzz_cache_salt(body: bytes) -> None:
    """A completion body from the network: salted() gives a JSON object whose cache_salt starts
    with the tenant's (and keeps every other field), or None (the body goes in as it came);
    it never raises."""
    out = guard_module.salted(body, TENANT)
    if out is None:
        return
    document, before = json.loads(out), json.loads(body)
    assert document["cache_salt"].startswith(f"onecat-tenant-{TENANT}")
    document.pop("cache_salt")
    before.pop("cache_salt", None)
    assert json.dumps(document, sort_keys=True) == json.dumps(before, sort_keys=True)
