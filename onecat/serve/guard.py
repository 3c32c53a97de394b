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
- without VLLM_API_KEY nothing is let through (closed, not open, when misconfigured).
"""

from __future__ import annotations

import hmac
import json
import os

METRICS_PATH = "/metrics"


def _keys_from_env() -> tuple[str, str, frozenset[str]]:
    listed = os.environ.get("ONECAT_GUARD_OPEN_PATHS", "").split(",")
    open_paths = frozenset(p.strip() for p in listed if p.strip())
    return (os.environ.get("VLLM_API_KEY", "").strip(),
            os.environ.get("ONECAT_METRICS_KEY", "").strip(), open_paths)


def bearer(headers: list[tuple[bytes, bytes]]) -> str:
    """The token of an `Authorization: Bearer TOKEN` header ('' when there is none)."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""


def _matches(token: str, key: str) -> bool:
    return bool(key) and hmac.compare_digest(token.encode(), key.encode())


def decide(path: str, token: str, api_key: str, metrics_key: str,
           open_paths: frozenset[str] = frozenset()) -> int:
    """0 to let the request through, else the HTTP status to answer with (401)."""
    if path in open_paths:
        return 0
    if path == METRICS_PATH or path.startswith(METRICS_PATH + "/"):
        return 0 if _matches(token, metrics_key) else 401
    return 0 if _matches(token, api_key) else 401


class Guard:
    """ASGI middleware: `Guard(app)`; answers 401 before the app sees an unauthorised request."""

    def __init__(self, app, api_key: str | None = None, metrics_key: str | None = None,
                 open_paths: frozenset[str] | None = None) -> None:
        self.app = app
        env_api, env_metrics, env_open = _keys_from_env()
        self.api_key = env_api if api_key is None else api_key
        self.metrics_key = env_metrics if metrics_key is None else metrics_key
        self.open_paths = env_open if open_paths is None else open_paths

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        status = decide(scope.get("path", ""), bearer(scope.get("headers") or []),
                        self.api_key, self.metrics_key, self.open_paths)
        if status == 0:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": {"message": "Unauthorized: send Authorization: Bearer KEY",
                                     "type": "AuthenticationError", "param": None,
                                     "code": status}}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})
