"""HTTP for the engine lock: urllib, a timeout on every call, failures named in one line."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from http.client import HTTPResponse

from .errors import EngineLockError

TIMEOUT = 30.0
USER_AGENT = "onecat-engine-lock"


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry a registry token to another host (blob CDNs and
    presigned storage URLs refuse, or would receive, a foreign Authorization header)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != \
                urllib.parse.urlsplit(req.full_url).netloc:
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new


_OPENER = urllib.request.build_opener(_Redirects)


def request(url: str, *, what: str, method: str = "GET", headers: Mapping[str, str] | None = None,
            timeout: float = TIMEOUT, ok: tuple[int, ...] = (200,)) -> HTTPResponse:
    """Open `url`; an unreachable host or an unexpected status is an EngineLockError.

    A status in `ok` returns the open response (the caller reads and closes it); an
    HTTPError whose status is in `ok` (e.g. 401 for a token challenge) is returned too.
    """
    req = urllib.request.Request(url, method=method,
                                 headers={"User-Agent": USER_AGENT, **(headers or {})})
    try:
        response = _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code in ok:
            return err  # type: ignore[return-value]
        err.close()
        raise EngineLockError(f"{what} answered HTTP {err.code} {err.reason} for {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise EngineLockError(f"{what} is unreachable: {url}: {reason}") from None
    if response.status not in ok:
        response.close()
        raise EngineLockError(f"{what} answered HTTP {response.status} for {url}")
    return response
