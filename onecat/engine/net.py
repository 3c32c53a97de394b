"""HTTP for the engine lock: urllib, a timeout on every call, failures named in one line."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from .errors import EngineLockError

TIMEOUT = 30.0
USER_AGENT = "onecat-engine-lock"
# What a whole answer read at once (a manifest, a config blob, a token) may weigh; the wheel
# is read in pieces. A registry's answers are kilobytes: a bigger one is refused, not kept.
MAX_ANSWER = 16 * 1024 * 1024
SCHEMES = ("http", "https")
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def plain_http_refused(url: str) -> str:
    """Why `url` may not be asked ("" when it may): http(s) only, and plain http only on
    loopback (a registry, a token service or an index over plain http elsewhere can be
    answered by anyone on the path)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return f"{url[:200]!r} is not a URL"
    if parts.scheme not in SCHEMES:
        return f"{parts.scheme or 'no'} scheme in {url[:200]!r}: only https (http on loopback)"
    if parts.scheme == "http" and host not in LOOPBACK:
        return (f"{url[:200]!r} is plain http off loopback: use https (a mirror on this "
                "machine may be http://127.0.0.1)")
    return ""


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry a registry token to another host (blob CDNs and
    presigned storage URLs refuse, or would receive, a foreign Authorization header)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if urllib.parse.urlsplit(newurl).scheme not in SCHEMES:
            raise EngineLockError(f"{req.full_url} redirected to {newurl[:200]!r}: only http "
                                  "and https are followed")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != \
                urllib.parse.urlsplit(req.full_url).netloc:
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new


def _opener() -> urllib.request.OpenerDirector:
    """http and https only: no file:, ftp: or data: handler (build_opener adds them), so no
    answer can make the lock read a local file or talk FTP."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                    urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                    urllib.request.HTTPDefaultErrorHandler(), _Redirects(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


_OPENER = _opener()


def _malformed(what: str, url: str, err: http.client.HTTPException) -> EngineLockError:
    detail = str(err).splitlines()[0][:120] if str(err) else ""
    return EngineLockError(f"{what} gave a malformed HTTP answer for {url} "
                           f"({type(err).__name__}{': ' + detail if detail else ''})")


class Answer:
    """An open response whose reads turn a malformed body (IncompleteRead, a bad chunk) into
    one EngineLockError line, like the opening does."""

    def __init__(self, response: Any, what: str, url: str) -> None:
        self._response, self._what, self._url = response, what, url
        self.status: int = response.status
        self.headers = response.headers

    def read(self, size: int | None = None) -> bytes:
        """`size` bytes, or the whole answer up to MAX_ANSWER (more is an EngineLockError)."""
        if size is None or size < 0:
            pieces: list[bytes] = []
            total = 0
            while piece := self.read(64 * 1024):
                pieces.append(piece)
                total += len(piece)
                if total > MAX_ANSWER:
                    self.close()
                    raise EngineLockError(f"{self._what} answered more than {MAX_ANSWER} "
                                          f"bytes for {self._url}: refused")
            return b"".join(pieces)
        try:
            data = self._response.read(size)
        except http.client.HTTPException as err:
            raise _malformed(self._what, self._url, err) from None
        # read(n) at the end of a body shorter than its Content-Length returns b"" quietly.
        left = getattr(self._response, "length", None)
        if size and not data and left:
            raise _malformed(self._what, self._url,
                             http.client.IncompleteRead(b"", left))
        return data

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request(url: str, *, what: str, method: str = "GET", headers: Mapping[str, str] | None = None,
            timeout: float = TIMEOUT, ok: tuple[int, ...] = (200,)) -> Answer:
    """Open `url`; an unreachable host or an unexpected status is an EngineLockError.

    A status in `ok` returns the open response (the caller reads and closes it); an
    HTTPError whose status is in `ok` (e.g. 401 for a token challenge) is returned too.
    """
    refused = plain_http_refused(url)
    if refused:
        raise EngineLockError(f"{what}: {refused}")
    req = urllib.request.Request(url, method=method,
                                 headers={"User-Agent": USER_AGENT, **(headers or {})})
    try:
        response = _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code in ok:
            return Answer(err, what, url)
        err.close()
        raise EngineLockError(f"{what} answered HTTP {err.code} {err.reason} for {url}") from None
    except http.client.HTTPException as err:  # not HTTP, an over-long line, a cut head
        raise _malformed(what, url, err) from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise EngineLockError(f"{what} is unreachable: {url}: {reason}") from None
    if response.status not in ok:
        response.close()
        raise EngineLockError(f"{what} answered HTTP {response.status} for {url}")
    return Answer(response, what, url)
