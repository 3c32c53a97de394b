"""The guard's per-tenant cache_salt (issue 49 item 6): what it does to a completion's body,
and what it leaves alone (onecat/serve/guard.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from onecat.serve import guard

API = "a" * 32
TENANT = "ab" * 32


@pytest.mark.parametrize(("body", "salt"), [
    ({"prompt": "hi"}, f"onecat-tenant-{TENANT}"),
    ({"prompt": "hi", "cache_salt": "mine"}, f"onecat-tenant-{TENANT}:mine"),
    ({"prompt": "hi", "cache_salt": f"onecat-tenant-{'cd' * 32}"},
     f"onecat-tenant-{TENANT}:onecat-tenant-{'cd' * 32}"),
])
def test_the_tenants_salt_comes_first(body: dict, salt: str) -> None:
    out = json.loads(guard.salted(json.dumps(body).encode(), TENANT))
    assert out == {**body, "cache_salt": salt}


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"', b'{"cache_salt": ""}',
                                  b'{"cache_salt": 5}', b'{"cache_salt": ["x"]}', b"[" * 100000])
def test_a_body_the_engine_would_refuse_goes_in_as_it_came(body: bytes) -> None:
    assert guard.salted(body, TENANT) is None


def test_unicode_and_numbers_survive() -> None:
    body = '{"prompt": "héllo ✓", "temperature": 0.1, "seed": 12345678901234567890}'.encode()
    out = json.loads(guard.salted(body, TENANT))
    assert out["prompt"] == "héllo ✓" and out["temperature"] == 0.1
    assert out["seed"] == 12345678901234567890


@pytest.mark.parametrize(("value", "named"), [
    (TENANT.encode(), TENANT), (TENANT.upper().encode(), ""), (b"ab" * 31, ""),
    (TENANT.encode() + b"\n", TENANT), (b"x" * 64, ""), (b"", "")])
def test_only_a_sha256_names_a_tenant(value: bytes, named: str) -> None:
    assert guard.tenant([(b"X-Onecat-Tenant", value)]) == named


def _through(headers: list, body_chunks: list[bytes], path: str = "/v1/completions",
             method: str = "POST") -> tuple[bytes, dict]:
    seen: dict = {}
    chunks = [{"type": "http.request", "body": chunk, "more_body": i < len(body_chunks) - 1}
              for i, chunk in enumerate(body_chunks)]

    async def receive():
        return chunks.pop(0)

    async def app(scope, receive_, send_):
        seen["headers"] = dict(scope["headers"])
        body = b""
        while True:
            message = await receive_()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen["body"] = body

    async def send(message):
        seen.setdefault("sent", []).append(message)

    middleware = guard.Guard(app, api_key=API, metrics_key="m" * 32, retiring=(),
                             hold_file="/nonexistent/hold")
    scope = {"type": "http", "path": path, "method": method,
             "headers": [(b"authorization", f"Bearer {API}".encode()), *headers]}
    asyncio.run(middleware(scope, receive, send))
    return seen.get("body", b""), seen.get("headers", {})


def test_a_named_tenants_completion_reaches_the_engine_salted() -> None:
    body, headers = _through([(b"x-onecat-tenant", TENANT.encode()),
                              (b"content-length", b"16")], [b'{"prompt":', b' "hi"}'])
    assert json.loads(body) == {"prompt": "hi", "cache_salt": f"onecat-tenant-{TENANT}"}
    assert headers[b"content-length"] == str(len(body)).encode()


@pytest.mark.parametrize(("headers", "path", "method"), [
    ([], "/v1/completions", "POST"),  # no tenant: a caller with the engine key, as sent
    ([(b"x-onecat-tenant", TENANT.encode())], "/v1/models", "POST"),
    ([(b"x-onecat-tenant", TENANT.encode())], "/tokenize", "POST"),
    ([(b"x-onecat-tenant", TENANT.encode())], "/v1/completions", "GET"),
])
def test_everything_else_goes_in_as_it_came(headers: list, path: str, method: str) -> None:
    body, _ = _through(headers, [b'{"prompt": "hi"}'], path, method)
    assert body == b'{"prompt": "hi"}'


def test_a_body_over_the_bound_goes_in_unsalted(monkeypatch) -> None:
    monkeypatch.setattr(guard, "MAX_SALTED_BODY", 10)
    chunks = [b'{"prompt": "', b"x" * 20, b'"}']
    body, _ = _through([(b"x-onecat-tenant", TENANT.encode())], chunks)
    assert body == b"".join(chunks)


def test_a_lone_surrogate_is_salted_too_escaped_as_it_came() -> None:
    # Found by the cache_salt fuzzer: a body a client sends to skip the salt would otherwise
    # land in the unsalted cache.
    out = guard.salted(b'{"prompt": "\\ud800"}', TENANT)
    assert out is not None and b"\\ud800" in out
    assert json.loads(out)["cache_salt"] == f"onecat-tenant-{TENANT}"
