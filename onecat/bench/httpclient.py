"""The bench's HTTP client on aiohttp, as `vllm bench serve`: one session (a pool of keep-alive
connections) per level or run; the timed streams and the side requests (/v1/models, /tokenize).

aiohttp parses status lines, headers, chunked and length framing; this module maps what it
raises to a short reason (counted in a level's `errors`), stamps each piece of a stream with its
arrival time and hands it to the SSE splitter (onecat.bench.sse). /metrics is scraped from a
thread with onecat.httpsync. Needs aiohttp: the controller's venv, and on nodes the venv that
the burn-in and the benchmark roles install it into.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from onecat.bench.sse import OnEvent, SseSplitter

MAX_SIDE_BODY = 8 << 20  # /v1/models and /tokenize answers are a few kB


class HttpError(Exception):
    """A failure with a short machine-readable reason (counted in `errors`)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        # One printable line: aiohttp's parser messages span lines and quote the bad bytes.
        detail = " ".join("".join(ch if ch.isprintable() else " " for ch in detail).split())
        super().__init__(f"{reason}: {detail[:200]}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.hostname, port, parts.scheme == "https", parts.path.rstrip("/"))

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{self.base_path}{path}"


def public_url(url: str) -> str:
    """The URL as results and messages may show it: credentials and query values removed
    (http://user:pw@host/?key=x -> http://***@host/?key=***)."""
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        netloc = parts.netloc
    except ValueError:
        return "(unparseable URL)"
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "&".join(f"{item.partition('=')[0]}=***" if "=" in item else item
                     for item in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def reason_of(error: BaseException) -> HttpError:
    """What aiohttp (or the socket) raised, as a counted reason."""
    detail = str(error)[:200]
    if isinstance(error, HttpError):
        return error
    if isinstance(error, aiohttp.ClientConnectorError):
        refused = isinstance(error.os_error, ConnectionRefusedError)
        return HttpError("connection_refused" if refused else "connect_failed", detail)
    if isinstance(error, aiohttp.ClientPayloadError):
        # The body ended before its framing said it would (the connection closed inside it).
        cut = "Not enough data" in detail or "not completed" in detail
        return HttpError("truncated_stream" if cut else "bad_response", detail)
    if isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError
                  | ConnectionError):
        return HttpError("connection_reset", detail)
    if isinstance(error, aiohttp.ClientError | HttpProcessingError | ValueError):
        # Status line, headers or chunk sizes that are not HTTP (aiohttp's parser refused them).
        return HttpError("bad_response", detail)
    if isinstance(error, OSError):
        return HttpError(f"os_error_{error.errno}" if error.errno else "os_error", detail)
    raise error


@contextlib.contextmanager
def _watch_close(response: aiohttp.ClientResponse) -> Iterator[None]:
    """Fail the body when the connection closes before it ended, while it is read. aiohttp
    3.14's C parser drops a chunk-size error that arrives after the head: without this the
    read waits for the request's timeout."""
    content, connection = response.content, response.connection
    closed = getattr(connection.protocol, "closed", None) if connection else None
    if closed is None:  # an older aiohttp: the timeout still ends the read
        yield
        return

    def check(_: object) -> None:
        if not content.is_eof() and content.exception() is None:
            content.set_exception(HttpError("bad_response", "the connection closed inside the "
                                            "body (malformed framing)"))

    closed.add_done_callback(check)
    try:
        yield
    finally:  # a kept-alive connection serves many requests: one callback at a time
        closed.remove_done_callback(check)


async def _drain(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, bounded: a side answer over `limit` bytes is not the server's."""
    pieces, size = [], 0
    async for piece in response.content.iter_any():
        size += len(piece)
        if size > limit:
            raise HttpError("bad_response", f"the answer is over {limit} bytes")
        pieces.append(piece)
    return b"".join(pieces)


class Client:
    """One aiohttp session against one endpoint: `connections` keep-alive connections at most."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str] | None = None,
                 connections: int = 16) -> None:
        self.endpoint = endpoint
        self.headers = dict(headers or {})
        self.connections = max(1, connections)
        self._session: aiohttp.ClientSession | None = None
        self._warm = 0

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            context = ssl.create_default_context() if self.endpoint.tls else False
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=context,
                                             keepalive_timeout=60)
            # No session-wide deadline: each call has its own (wait_for in the callers).
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None
        self._warm = 0

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _call(self, method: str, path: str, body: object | None,
                    ) -> tuple[int, object]:
        session = self._open()
        try:
            async with session.request(method, self.endpoint.url(path), json=body) as response:
                with _watch_close(response):
                    raw = await _drain(response, MAX_SIDE_BODY)
                if response.status != 200:
                    return response.status, None
        except Exception as error:
            raise reason_of(error) from None
        try:
            return 200, json.loads(raw)
        except (ValueError, RecursionError):
            raise HttpError("bad_response", "the answer is not JSON") from None

    async def get_json(self, path: str) -> tuple[int, object]:
        return await self._call("GET", path, None)

    async def post_json(self, path: str, body: object) -> tuple[int, object]:
        return await self._call("POST", path, body)

    async def warm(self, count: int, timeout: float = 10.0) -> None:
        """Open `count` keep-alive connections ahead of the timed requests, so that TTFT
        measures the server and not TCP setup. No request is sent (a gateway's counts stay
        the timed requests'); failures are left to the timed requests to report."""
        count = min(count, self.connections) - self._warm
        if count <= 0:
            return
        self._warm += count
        session = self._open()
        loop = asyncio.get_running_loop()

        async def one() -> None:
            # aiohttp opens connections only for a request: ask its connector for one, as
            # ClientSession does, and put it back in the pool unused.
            # (ssl left at its default, as the session's requests: the pool is keyed by it)
            request = aiohttp.ClientRequest("GET", URL(self.endpoint.url("/")), loop=loop)
            conn = await session.connector.connect(  # type: ignore[union-attr]
                request, [], aiohttp.ClientTimeout(total=timeout))
            conn.release()

        # asyncio.TimeoutError: not yet the builtin on Python 3.10 (Ubuntu 22.04 nodes).
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(one() for _ in range(count)), return_exceptions=True), timeout)

    async def stream(self, path: str, body: bytes, on_event: OnEvent,
                     request_id: str | None = None) -> None:
        """POST and hand each SSE `data:` payload to on_event(payload, arrival time) as the
        piece that carried it arrives; returns when the answer ended, raises HttpError."""
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if request_id:
            headers["x-request-id"] = request_id
        for attempt in (0, 1):
            try:
                await self._stream(path, body, headers, on_event)
                return
            except aiohttp.ServerDisconnectedError as error:
                # Closed before any answer: an idle keep-alive connection the server had
                # dropped (uvicorn's keep-alive timeout). Once more on a fresh one.
                if attempt == 0 and not getattr(error, "_onecat_answered", False):
                    continue
                raise reason_of(error) from None
            except Exception as error:
                raise reason_of(error) from None

    async def _stream(self, path: str, body: bytes, headers: dict[str, str],
                      on_event: OnEvent) -> None:
        session = self._open()
        async with session.post(self.endpoint.url(path), data=body,
                                headers=headers) as response:
            try:
                with _watch_close(response):
                    await self._read_stream(response, on_event)
            except aiohttp.ServerDisconnectedError as error:
                error._onecat_answered = True  # type: ignore[attr-defined]
                raise

    @staticmethod
    async def _read_stream(response: aiohttp.ClientResponse, on_event: OnEvent) -> None:
        if response.status != 200:
            await _drain(response, MAX_SIDE_BODY)  # an error body: read and dropped
            raise HttpError(f"http_{response.status}")
        events = SseSplitter(on_event)
        clock = time.perf_counter
        # iter_any: each piece as soon as the loop hands it over, stamped then (as vLLM's).
        try:
            async for piece in response.content.iter_any():
                events.feed(piece, clock())
            events.end(clock())
        except (HttpError, aiohttp.ClientError, HttpProcessingError, OSError):
            raise
        except Exception as error:  # on_event refused a chunk: the request failed
            raise HttpError("bad_response", str(error)[:200]) from None
