"""The one blocking HTTP client of onecat: the gate, the watch's probe and likelihoods, the bench's
/metrics scraper and prefix-cache counters, `--gateway-stats` and the repair runner's drain wait.

Stdlib only (http.client), because it runs where nothing can be installed: as the gate's
``ansible.module_utils.onecat.httpsync`` under the node's system Python, and in the watch.
What this adds to http.client: http(s) URLs only (no file:, no proxies, no redirects: every
caller talks to a fleet address), a timeout on every call, bounded bodies, a body cut short
detected (``read(n)`` returns it without a word), and one error type, ``BadAnswer``, for every
answer that is not well-formed HTTP (IncompleteRead, LineTooLong, BadStatusLine, bad chunking,
an over-long body, not JSON), whose text is one printable line. Nothing answering is an
OSError, as from the socket; ``AnswerTimeout`` (one) when the server took the request and
said nothing in time (a stuck engine, onecat/answers/hung.py).
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_BODY = 8 << 20  # larger than any answer onecat reads (vLLM's /metrics, HAProxy's CSV)


class BadAnswer(ValueError):
    """Something answered, but not with well-formed HTTP: str() is one printable line."""


class TooLarge(BadAnswer):
    """The body is over the caller's limit (a page onecat reads is never that large)."""


class AnswerTimeout(TimeoutError):
    """The server accepted the connection and the request, then said nothing for the whole
    timeout: a server that is there but stuck, unlike one that refuses or cannot be reached
    (a plain OSError, a TimeoutError while connecting). An OSError still, for callers that
    only ask whether anything answered."""


def one_line(error: BaseException) -> str:
    """`Type: detail`, printable and short (a bad answer's bytes may hold ESC or NUL)."""
    detail = "".join(ch if ch.isprintable() else "?" for ch in str(error))[:80]
    return f"{type(error).__name__}: {detail}" if detail else type(error).__name__


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON; BadAnswer when it is not."""
        try:
            return json.loads(self.body)
        except ValueError:  # UnicodeDecodeError is one
            raise BadAnswer(f"the body is not JSON ({self.body[:30]!r})") from None

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def split_url(url: str) -> tuple[bool, str, int, str]:
    """(tls, host, port, path with query); ValueError for anything but an http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"not an http(s) URL: {url[:80]!r}") from None
    if not url.isprintable() or " " in url:  # http.client would refuse it as a bad answer
        raise ValueError(f"not an http(s) URL: {url[:80]!r}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:80]!r}")
    tls = parts.scheme == "https"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return tls, parts.hostname, port or (443 if tls else 80), path


def _read(response: http.client.HTTPResponse, limit: int) -> bytes:
    pieces, size = [], 0
    while size <= limit:
        piece = response.read(min(65536, limit + 1 - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    body = b"".join(pieces)
    if size > limit:
        raise TooLarge(f"the answer is over {limit} bytes")
    if response.length:  # Content-Length promised more than came before the close
        raise BadAnswer(one_line(http.client.IncompleteRead(body, response.length)))
    return body


class Connection:
    """One kept-alive connection to one server, reopened after an error (the /metrics scraper
    polls twice a second: one TCP connection for the whole level)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None,
                 timeout: float = 10.0) -> None:
        self.tls, self.host, self.port, path = split_url(url)
        self.base_path = path.rstrip("/") if path != "/" else ""
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _open(self) -> http.client.HTTPConnection:
        if self.tls:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def request(self, method: str, path: str = "", body: bytes | None = None,
                headers: dict[str, str] | None = None, limit: int = MAX_BODY) -> Answer:
        """One exchange on base path + path. BadAnswer for a malformed answer, OSError when
        nothing answered; the connection is dropped after either."""
        reused = self._conn is not None
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = self._open()
            try:
                self._conn.request(method, self.base_path + path or "/", body=body,
                                   headers={**self.headers, **(headers or {})})
                response = self._conn.getresponse()
                answer = Answer(response.status, _read(response, limit))
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as error:
                self.close()
                if reused and attempt == 0:
                    continue  # an idle keep-alive connection the server had closed: once more
                if isinstance(error, http.client.RemoteDisconnected):  # accepted, no status line
                    raise BadAnswer(one_line(error)) from None
                raise
            except BadAnswer:
                self.close()
                raise
            except (http.client.HTTPException, ValueError) as error:
                # http.client's parser errors are no OSError; a bad chunk size is a ValueError
                # inside it on some paths.
                self.close()
                raise BadAnswer(one_line(error)) from None
            except TimeoutError as error:
                accepted = self._conn is not None and self._conn.sock is not None
                self.close()
                if accepted:
                    raise AnswerTimeout(f"no answer within {self.timeout:g} s") from error
                raise
            except OSError:
                self.close()
                raise
            if response.will_close:
                self.close()
            return answer
        raise AssertionError("unreachable")  # pragma: no cover


def request(url: str, method: str = "GET", body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 10.0,
            limit: int = MAX_BODY) -> Answer:
    """One request on a connection of its own (see Connection.request)."""
    conn = Connection(url, headers, timeout)
    try:
        return conn.request(method, "", body, limit=limit)
    finally:
        conn.close()


def request_json(url: str, body: Any = None, api_key: str = "", timeout: float = 10.0,
                 limit: int = MAX_BODY) -> Answer:
    """GET (no body) or POST a JSON body, with a bearer key when one is given."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None if body is None else json.dumps(body).encode()
    return request(url, "POST" if data is not None else "GET", data, headers, timeout, limit)
