"""onecat's key guard: an ASGI middleware that closes every path of a vLLM server.

vLLM's own --api-key protects only /v1/*: /tokenize, /detokenize, /metrics, /health, /version
and the rest answer anyone. The engine loads this file with `--middleware onecat_guard.Guard`
(roles/vllm_serve copies it to the node as onecat_guard.py, mounts it read-only and puts it
on PYTHONPATH). Stdlib only, no import of Starlette: a plain ASGI class that vLLM adds with
`app.add_middleware(Guard)`.

Rules, read from the container's environment (the root-only --env-file):
- every path needs `Authorization: Bearer $VLLM_API_KEY`;
- /metrics needs the scrapers' own `Authorization: Bearer $ONECAT_METRICS_KEY` (the API key is
  not enough: clients do not read the server's metrics);
- paths listed in ONECAT_GUARD_OPEN_PATHS (comma-separated, exact) answer without a key;
- without VLLM_API_KEY nothing is let through (closed, not open, when misconfigured);
- keys listed in ONECAT_RETIRING_API_KEYS (comma-separated; the key alphabet has no comma) are
  accepted too, wherever VLLM_API_KEY is: a fleet key rotation keeps the previous key there
  until the gateway sends the new one (roles/vllm_serve/tasks/fleet_key.yml). A request that
  presents a retiring key goes on inward with `Authorization: Bearer $VLLM_API_KEY`, because
  vLLM's own AuthenticationMiddleware (inside this one: --middleware is added last, so it is
  the outermost) checks /v1 against VLLM_API_KEY alone.

The gateway's health check carries `X-Onecat-Gateway-Check` (roles/gateway's haproxy.cfg).
While the node's watch keeps a hold file (ONECAT_GUARD_HOLD_FILE, by default `hold` beside this
file: the host's guard folder, mounted read-only), that check alone is answered 503 with the
file's first line: the node's agent cannot be heard (issue 49), so the watch fails closed
through the one channel left, and HAProxy takes the node out on its health check. Requests
keep being served, and the serve gate's and the watch's own /health (without the header) are
answered as always.

Each client key's prefix cache is kept apart (issue 49): the gateway names the request's
tenant in `X-Onecat-Tenant` (the SHA-256 of its client key's name, haproxy.cfg; a client's own
header of that name is dropped there), and the guard puts it into the body of every completion
as vLLM's `cache_salt`, which the engine makes the first block's extra hash key (1Cat-vLLM
vllm/v1/core/kv_cache_utils.py `generate_block_hash_extra_keys`): two tenants share no cached
block, so neither can time the other's prompts through the prefix cache. A salt the client sent
itself is kept after the tenant's (`onecat-tenant-HASH:SALT`), so a client cannot name another
tenant's salt; a body that is no JSON object, or a cache_salt the engine refuses, goes in as it
came (the engine answers it).

Why not vLLM's own list of keys: the pinned fork's --api-key is `list[str]` ("the server will
require one of these keys", 1Cat-vLLM vllm/entrypoints/openai/cli_args.py:267-269, taking
precedence over VLLM_API_KEY, api_server.py:264-268), but it is an argument: on the command
line it is in every `ps` of the node, and as an argument (also from a --config YAML file,
vllm/utils/argparse_utils.py:443-560) it is printed at startup in "non-default args: {...}"
(vllm/entrypoints/utils.py:276-278, called from api_server.py:539), a line the serve role's
rollback copies into its failure message (roles/vllm_serve/tasks/rollback.yml). The keys stay
in the root-only environment file.
"""

from __future__ import annotations

import hmac
import json
import os

METRICS_PATH = "/metrics"
# The gateway's health check (haproxy.cfg's http-check) says who it is with this header.
GATEWAY_CHECK_HEADER = b"x-onecat-gateway-check"
HOLD_NAME = "hold"
# The tenant the gateway names (the SHA-256 of the client key's name, in hex), and the
# requests whose prefix cache it salts.
TENANT_HEADER = b"x-onecat-tenant"
SALTED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
# A larger body goes in unsalted (vLLM reads it whole all the same).
MAX_SALTED_BODY = 32 * 1024 * 1024
_HEX = frozenset("0123456789abcdef")


def _hold_file_from_env() -> str:
    return os.environ.get("ONECAT_GUARD_HOLD_FILE", "").strip() or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), HOLD_NAME)


def hold_reason(path: str) -> str | None:
    """The hold file's first line (printable, at most 200 characters), None without a file."""
    try:
        with open(path, "rb") as handle:
            first = handle.read(4096).decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return None
    except OSError:
        return "the node's watch holds it out (its hold file cannot be read)"
    text = "".join(c if c.isprintable() else " " for c in (first[0] if first else ""))
    return " ".join(text.split())[:200] or "the node's watch holds it out"


def _listed(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _keys_from_env() -> tuple[str, str, frozenset[str], tuple[str, ...]]:
    open_paths = frozenset(_listed(os.environ.get("ONECAT_GUARD_OPEN_PATHS", "")))
    return (os.environ.get("VLLM_API_KEY", "").strip(),
            os.environ.get("ONECAT_METRICS_KEY", "").strip(), open_paths,
            _listed(os.environ.get("ONECAT_RETIRING_API_KEYS", "")))


def bearer(headers: list[tuple[bytes, bytes]]) -> str:
    """The token of the `Authorization: Bearer TOKEN` header ('' when there is none). Only the
    first Authorization header counts, as in vLLM's own check behind this one (Starlette's
    Headers.get, server_utils.py AuthenticationMiddleware): a request that repeats the header
    is judged by what vLLM would read (found by tests/fuzz/test_fuzz_guard.py)."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _matches(token: str, key: str) -> bool:
    return bool(key) and hmac.compare_digest(token.encode(), key.encode())


def decide(path: str, token: str, api_key: str, metrics_key: str,
           open_paths: frozenset[str] = frozenset(), retiring: tuple[str, ...] = ()) -> int:
    """0 to let the request through, else the HTTP status to answer with (401).

    A retiring key opens what the API key opens, and only while there is an API key."""
    if path in open_paths:
        return 0
    if path == METRICS_PATH or path.startswith(METRICS_PATH + "/"):
        return 0 if _matches(token, metrics_key) else 401
    if _matches(token, api_key):
        return 0
    # Every retiring key is compared (no early exit): the time taken does not say which matched.
    matched = [_matches(token, old) for old in retiring]
    return 0 if api_key and any(matched) else 401


def tenant(headers: list[tuple[bytes, bytes]]) -> str:
    """The gateway's tenant name (64 lower-case hex digits), '' when there is none."""
    for name, value in headers:
        if name.lower() == TENANT_HEADER:
            text = value.decode("latin-1").strip()
            return text if len(text) == 64 and set(text) <= _HEX else ""
    return ""


def salted(body: bytes, tenant_name: str) -> bytes | None:
    """The completion's body with the tenant's cache_salt (a client's own salt after it);
    None for a body to pass as it came (no JSON object, or a cache_salt vLLM refuses)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    own = document.get("cache_salt")
    if own is not None and (not isinstance(own, str) or not own):
        return None
    document["cache_salt"] = f"onecat-tenant-{tenant_name}" + (f":{own}" if own else "")
    try:
        return json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (`"\ud800"`): escaped, as it came
        return json.dumps(document).encode("ascii")


def _replay(first: list[dict], receive):
    """A receive that gives `first` again, then what the connection sends."""
    pending = list(first)

    async def replayed():
        if pending:
            return pending.pop(0)
        return await receive()
    return replayed


def with_bearer(headers: list[tuple[bytes, bytes]], token: str) -> list[tuple[bytes, bytes]]:
    """The headers with every Authorization header replaced by one `Bearer TOKEN`."""
    kept = [(name, value) for name, value in headers if name.lower() != b"authorization"]
    return [*kept, (b"authorization", f"Bearer {token}".encode("latin-1"))]


class Guard:
    """ASGI middleware: `Guard(app)`; answers 401 before the app sees an unauthorised request."""

    def __init__(self, app, api_key: str | None = None, metrics_key: str | None = None,
                 open_paths: frozenset[str] | None = None,
                 retiring: tuple[str, ...] | None = None, hold_file: str | None = None) -> None:
        self.app = app
        self.hold_file = _hold_file_from_env() if hold_file is None else hold_file
        env_api, env_metrics, env_open, env_retiring = _keys_from_env()
        self.api_key = env_api if api_key is None else api_key
        self.metrics_key = env_metrics if metrics_key is None else metrics_key
        self.open_paths = env_open if open_paths is None else open_paths
        self.retiring = env_retiring if retiring is None else tuple(retiring)

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path, headers = scope.get("path", ""), scope.get("headers") or []
        token = bearer(headers)
        status = decide(path, token, self.api_key, self.metrics_key, self.open_paths,
                        self.retiring)
        if status == 0 and scope["type"] == "http" and _checked_by_gateway(headers):
            held = hold_reason(self.hold_file)
            if held is not None:
                await _answer(send, 503, {"error": {
                    "message": f"held out by the node's watch: {held}",
                    "type": "ServiceUnavailable", "param": None, "code": 503}})
                return
        if status == 0:
            if self.api_key and token and any(_matches(token, old) for old in self.retiring):
                # A retiring key: vLLM's own check inside accepts only VLLM_API_KEY.
                scope = {**scope, "headers": with_bearer(headers, self.api_key)}
            named = tenant(headers) if (scope["type"] == "http" and path in SALTED_PATHS
                                        and scope.get("method") == "POST") else ""
            if named:
                await self._salted(scope, receive, send, named)
                return
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _answer(send, status, {"error": {
            "message": "Unauthorized: send Authorization: Bearer KEY",
            "type": "AuthenticationError", "param": None, "code": status}},
            [(b"www-authenticate", b"Bearer")])

    async def _salted(self, scope, receive, send, named: str) -> None:
        """Read the body, put the tenant's cache_salt in, hand the app the new body."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message.get("type") != "http.request":  # the client left: the app sees it
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                break
            if size > MAX_SALTED_BODY:
                partial = {"type": "http.request", "body": b"".join(chunks), "more_body": True}
                await self.app(scope, _replay([partial], receive), send)
                return
        body = b"".join(chunks)
        new = salted(body, named)
        if new is not None:
            body = new
            kept = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
            scope = {**scope, "headers": [*kept, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, _replay([{"type": "http.request", "body": body,
                                        "more_body": False}], receive), send)


def _checked_by_gateway(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() == GATEWAY_CHECK_HEADER for name, _ in headers)


async def _answer(send, status: int, document: dict,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(document).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
