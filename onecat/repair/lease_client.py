"""The node's side of the repair lease (stdlib urllib): ask, renew, give back.

    answer = take(url, "gpu-node-01", token, "reset: Xid 79 on GPU 1", ttl_s=1800)
    if not answer.granted:      # refused (answer.holders say who repairs), or answer.error
        ...                     # no repair: the node stays drained
    release(url, "gpu-node-01", token)   # True, False (held none), None (no answer)

Never raises on a network error or a garbage answer: any failure is
`Answer(granted=False, error="<one line why>")`, so the caller fails closed.
`url` is the server's base (http://GATEWAY:8043), the fact gateway_repair_lease_url of
roles/gateway/tasks/repair_lease_token.yml; the token is the node's file
(gateway_repair_lease_token_file, /etc/onecat/repair-lease.token).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .lease import Answer, answer_from

MAX_ANSWER_BYTES = 256 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a lease is asked of this server, not of one it points to


# No proxy from the environment (the token would go to it), no redirect.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def _one_line(text: object, limit: int = 200) -> str:
    return " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())[:limit]


def _call(url: str, path: str, token: str, body: dict[str, Any] | None,
          timeout_s: float) -> tuple[int, Any]:
    """(status, parsed JSON) of one request; ValueError/OSError/HTTPException otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{_one_line(url, 80)!r} is not an http(s) URL of the lease server")
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        url.rstrip("/") + path, data=data, method="GET" if body is None else "POST",
        headers={"Authorization": f"Bearer {token.strip()}", "Content-Type": "application/json",
                 "Accept": "application/json"})
    try:
        response = _OPENER.open(request, timeout=timeout_s)
    except urllib.error.HTTPError as error:
        response = error  # 409 and the others carry a JSON body too
    with response:
        status = response.status if hasattr(response, "status") else response.code
        raw = response.read(MAX_ANSWER_BYTES + 1)
    if len(raw) > MAX_ANSWER_BYTES:
        raise ValueError(f"the answer is over {MAX_ANSWER_BYTES} bytes")
    try:
        return status, json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError(f"HTTP {status} with a body that is not JSON") from None


def _why(error: BaseException) -> str:
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        error_text = _one_line(getattr(error, "reason", error))
        return f"cannot reach the lease server: {error_text}"
    if isinstance(error, (TimeoutError, OSError)):
        return f"cannot reach the lease server: {type(error).__name__} {_one_line(error)}"
    if isinstance(error, http.client.HTTPException):
        return f"a malformed HTTP answer ({type(error).__name__})"
    return _one_line(error) or type(error).__name__


def take(url: str, node: str, token: str, reason: str, ttl_s: float,
         timeout_s: float = 5.0) -> Answer:
    """Ask for (or renew) `node`'s repair lease for ttl_s seconds."""
    try:
        status, data = _call(url, "/v1/lease", token,
                             {"node": node, "reason": reason, "ttl_s": ttl_s}, timeout_s)
        if status not in (200, 409):
            error = data.get("error") if isinstance(data, dict) else None
            return Answer(False, error=f"the lease server answered HTTP {status}"
                                       + (f": {_one_line(error)}" if error else ""))
        answer = answer_from(data)
        if answer.granted != (status == 200):
            return Answer(False, error=f"HTTP {status} with granted={answer.granted}")
        return answer
    except Exception as error:  # never raises: the caller fails closed
        return Answer(False, error=_why(error))


def release(url: str, node: str, token: str, timeout_s: float = 5.0) -> bool | None:
    """Give `node`'s lease back: True, False (it held none), None (no valid answer)."""
    try:
        status, data = _call(url, "/v1/release", token, {"node": node}, timeout_s)
    except Exception:
        return None
    if status != 200 or not isinstance(data, dict) or not isinstance(data.get("released"), bool):
        return None
    return data["released"]


def out(url: str, node: str, token: str, reason: str, ttl_s: float = 120.0,
        timeout_s: float = 5.0) -> tuple[bool, str]:
    """Ask the fleet's floor whether `node` may leave rotation (the server's /v1/out):
    (granted, why). No valid answer is a refusal that says why: a node whose floor cannot
    be asked keeps serving (its cause does not make answers wrong; floor.py)."""
    try:
        status, data = _call(url, "/v1/out", token,
                             {"node": node, "reason": reason, "ttl_s": ttl_s}, timeout_s)
    except Exception as error:  # never raises: the caller keeps the node in
        return False, f"the fleet's floor cannot be asked: {_why(error)}"
    why = _one_line(data.get("why")) if isinstance(data, dict) else ""
    granted = isinstance(data, dict) and data.get("granted") is True
    if status == 200 and granted:
        return True, why
    if status == 409 and isinstance(data, dict) and data.get("granted") is False:
        return False, why or "the fleet's floor keeps it in"
    return False, (f"the fleet's floor answered HTTP {status}" + (f": {why}" if why else ""))
