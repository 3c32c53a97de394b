"""A small keep-alive HTTP/1.1 client on asyncio streams for the side requests of a run.

Probing /v1/models and /tokenize go through here; the timed streaming requests use
onecat.bench.sse, and /metrics is scraped from a thread (onecat.bench.observe). Stdlib
only, so the client also runs from a bare venv on a node.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit


class HttpError(Exception):
    """A failure with a short machine-readable reason (counted in `errors`)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
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


def parse_size(text: bytes | str, base: int, what: str) -> int:
    """A chunk size (hex) or Content-Length (decimal); HttpError when it is not one."""
    try:
        value = int(text, base)
    except ValueError:
        raise HttpError("bad_response", f"{what} {text[:20]!r}") from None
    if value < 0:
        raise HttpError("bad_response", f"negative {what}")
    return value


class Response:
    def __init__(self, conn: Connection, status: int, headers: dict[str, str]) -> None:
        self.conn = conn
        self.status = status
        self.headers = headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked, content-length or until close)."""
        reader = self.conn.reader
        assert reader is not None
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                line = await _readline(reader)
                if not line:
                    raise HttpError("truncated_stream", "connection closed inside the body")
                size = parse_size(line.split(b";", 1)[0].strip() or b"0", 16, "chunk size")
                if size == 0:
                    await _readline(reader)  # trailer end
                    return
                try:
                    data = await reader.readexactly(size + 2)
                except asyncio.IncompleteReadError:
                    raise HttpError("truncated_stream", "connection closed inside a chunk") \
                        from None
                yield data[:-2]
        elif "content-length" in self.headers:
            remaining = parse_size(self.headers["content-length"].strip(), 10, "content-length")
            while remaining > 0:
                data = await reader.read(min(remaining, 65536))
                if not data:
                    raise HttpError("truncated_stream", "connection closed inside the body")
                remaining -= len(data)
                yield data
        else:
            self.conn.reusable = False
            while data := await reader.read(65536):
                yield data

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    async def json(self) -> object:
        try:
            return json.loads(await self.read())
        except ValueError as exc:
            raise HttpError("bad_response", f"invalid JSON: {exc}") from None


async def _readline(reader: asyncio.StreamReader) -> bytes:
    """One line; a line longer than the reader's limit is a bad response, not a crash."""
    try:
        return await reader.readline()
    except (ValueError, asyncio.LimitOverrunError):
        raise HttpError("bad_response", "a header or chunk-size line is too long") from None


class _Stale(Exception):
    """The server closed the connection before answering."""


_DROPPED = (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError, _Stale)


def _reset(exc: BaseException) -> HttpError:
    return HttpError("connection_reset", str(exc) or type(exc).__name__)


class Connection:
    """One keep-alive connection; reopened transparently when the server closed it."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.base_headers = {"host": f"{endpoint.host}:{endpoint.port}", **(headers or {})}
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reusable = False

    async def _open(self) -> None:
        context = ssl.create_default_context() if self.endpoint.tls else None
        try:
            self.reader, self.writer = await asyncio.open_connection(
                self.endpoint.host, self.endpoint.port, ssl=context, limit=1 << 20)
        except ConnectionRefusedError as exc:
            raise HttpError("connection_refused", str(exc)) from None
        except OSError as exc:
            raise HttpError("connect_failed", str(exc)) from None
        self.reusable = True

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
        self.reusable = False

    async def request(self, method: str, path: str, body: object | None = None) -> Response:
        """Send one request and read the status line and headers (the body is left to read)."""
        reused = self.writer is not None and self.reusable
        if not reused:
            self.close()
            await self._open()
        try:
            return await self._exchange(method, path, body)
        except _DROPPED as exc:
            self.close()
            if not reused:
                raise _reset(exc) from None
        # An idle keep-alive connection the server had closed: retry once on a fresh one.
        await self._open()
        try:
            return await self._exchange(method, path, body)
        except _DROPPED as exc:
            self.close()
            raise _reset(exc) from None

    async def _exchange(self, method: str, path: str, body: object | None) -> Response:
        assert self.reader is not None and self.writer is not None
        payload = b"" if body is None else json.dumps(body).encode()
        headers = dict(self.base_headers)
        if body is not None:
            headers["content-type"] = "application/json"
        headers["content-length"] = str(len(payload))
        head = f"{method} {self.endpoint.base_path}{path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        self.writer.write(head.encode("latin-1") + payload)
        await self.writer.drain()
        status_line = await _readline(self.reader)
        if not status_line:
            raise _Stale("closed before the status line")
        try:
            status = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise HttpError("bad_response", f"status line {status_line[:80]!r}") from None
        response_headers: dict[str, str] = {}
        while True:
            line = await _readline(self.reader)
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            response_headers[key.strip().lower()] = value.strip()
        if response_headers.get("connection", "").lower() == "close":
            self.reusable = False
        return Response(self, status, response_headers)

    async def get_json(self, path: str) -> tuple[int, object]:
        response = await self.request("GET", path)
        if response.status != 200:
            await response.read()
            return response.status, None
        return response.status, await response.json()

    async def post_json(self, path: str, body: object) -> tuple[int, object]:
        response = await self.request("POST", path, body)
        if response.status != 200:
            await response.read()
            return response.status, None
        return response.status, await response.json()
