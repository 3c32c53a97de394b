"""The load-generating connection: an asyncio Protocol that parses SSE replies as bytes arrive.

Why a Protocol and not StreamReader: at c=128 thousands of chunks arrive each
second; parsing inside data_received stamps each chunk with the time it came
off the socket (not when a coroutine got scheduled after its neighbours) and
costs no coroutine switch per chunk. Handles chunked, content-length and
close-delimited bodies on a keep-alive HTTP/1.1 connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

from onecat.bench.httpclient import Endpoint, HttpError, parse_size

OnEvent = Callable[[bytes, float], None]  # (data payload, arrival time) -> None; may raise


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self._reset_state(None, None)

    def _reset_state(self, on_event: OnEvent | None, done: asyncio.Future | None) -> None:
        self.on_event = on_event
        self.done = done
        self.buf = bytearray()
        self.events = bytearray()
        self.status: int | None = None
        self.mode = ""  # "chunked", "length", "close"
        self.remaining = 0  # bytes left in the current chunk / body
        self.received_any = False
        self.keep_alive = True

    # asyncio callbacks ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is None or self.done.done():
            return
        if self.mode == "close" and self.status == 200:
            self._flush_events(time.perf_counter())
            self._finish(None)
        elif not self.received_any:
            self._finish(HttpError("stale_connection" if exc is None else "connection_reset"))
        elif self.status == 200:
            self._finish(HttpError("truncated_stream", "connection closed inside the body"))
        else:
            self._finish(HttpError("connection_reset", str(exc or "closed")))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.done is None or self.done.done():
            return  # bytes after a finished exchange: ignore (the connection is dropped later)
        self.received_any = True
        self.buf += data
        try:
            self._parse(now)
        except HttpError as exc:
            self._finish(exc)
        except Exception as exc:  # a malformed chunk in on_event: the request failed
            self._finish(HttpError("bad_response", str(exc)[:200]))

    # parsing ----------------------------------------------------------------
    def _parse(self, now: float) -> None:
        if self.status is None and not self._parse_head():
            return
        if self.mode == "chunked":
            self._parse_chunked(now)
        elif self.mode == "length":
            take = min(self.remaining, len(self.buf))
            self._body(bytes(self.buf[:take]), now)
            del self.buf[:take]
            self.remaining -= take
            if self.remaining == 0:
                self._flush_events(now)
                self._finish(None)
        else:
            self._body(bytes(self.buf), now)
            self.buf.clear()

    def _parse_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[:end + 4]
        try:
            self.status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise HttpError("bad_response", f"status line {head[0][:80]!r}") from None
        headers = {}
        for line in head[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip().lower()
        self.keep_alive = headers.get("connection") != "close"
        if headers.get("transfer-encoding") == "chunked":
            self.mode = "chunked"
            self.remaining = -1  # expecting a size line
        elif "content-length" in headers:
            self.mode = "length"
            self.remaining = parse_size(headers["content-length"], 10, "content-length")
        else:
            self.mode = "close"
            self.keep_alive = False
        if self.status != 200:
            self.on_event = None  # an error body is read and dropped
        return True

    def _parse_chunked(self, now: float) -> None:
        while True:
            if self.remaining == -1:  # size line
                eol = self.buf.find(b"\r\n")
                if eol < 0:
                    return
                size = parse_size(bytes(self.buf[:eol]).split(b";", 1)[0].strip() or b"0", 16,
                             "chunk size")
                del self.buf[:eol + 2]
                self.remaining = size if size else -2
            elif self.remaining == -2:  # after the last chunk: trailers end with an empty line
                eol = self.buf.find(b"\r\n")
                if eol < 0:
                    return
                del self.buf[:eol + 2]
                if eol == 0:
                    self._flush_events(now)
                    self._finish(None)
                    return
            else:
                if len(self.buf) < self.remaining + 2:
                    return
                self._body(bytes(self.buf[:self.remaining]), now)
                del self.buf[:self.remaining + 2]
                self.remaining = -1

    def _body(self, data: bytes, now: float) -> None:
        if self.on_event is None:
            return
        self.events += data
        while True:
            end = self.events.find(b"\n\n")
            if end < 0:
                return
            event = bytes(self.events[:end])
            del self.events[:end + 2]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self.on_event(line[5:].strip(), now)

    def _flush_events(self, now: float) -> None:
        if self.events.strip() and self.on_event is not None:
            self.events += b"\n\n"
            self._body(b"", now)

    def _finish(self, error: HttpError | None) -> None:
        if self.done is None or self.done.done():
            return
        if error is None and self.status != 200:
            error = HttpError(f"http_{self.status}")
        if error is not None and error.reason not in (f"http_{self.status}",):
            self.keep_alive = False
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)


class StreamingConnection:
    """A keep-alive connection for POSTs whose SSE replies go to an on_event callback."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        base = {"host": f"{endpoint.host}:{endpoint.port}", **(headers or {}),
                "content-type": "application/json", "accept": "text/event-stream"}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in base.items())
        self._proto: _Protocol | None = None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context() if self.endpoint.tls else None
        try:
            _, proto = await loop.create_connection(_Protocol, self.endpoint.host,
                                                    self.endpoint.port, ssl=context)
        except ConnectionRefusedError as exc:
            raise HttpError("connection_refused", str(exc)) from None
        except OSError as exc:
            raise HttpError("connect_failed", str(exc)) from None
        return proto

    async def connect(self) -> None:
        """Open the connection ahead of time, so TTFT measures the server and not TCP setup."""
        if self._proto is None or self._proto.lost:
            self._proto = await self._open()

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None

    async def _exchange(self, proto: _Protocol, request: bytes, on_event: OnEvent) -> None:
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        proto._reset_state(on_event, done)
        assert proto.transport is not None
        proto.transport.write(request)
        try:
            await done
        finally:
            if not proto.keep_alive or proto.lost or not done.done():
                self.close()

    async def post(self, path: str, body: bytes, on_event: OnEvent,
                   request_id: str | None = None) -> None:
        """Send one POST; returns when the reply ended, raises HttpError with a reason."""
        extra = f"x-request-id: {request_id}\r\n" if request_id else ""
        request = (f"POST {self.endpoint.base_path}{path} HTTP/1.1\r\n{self._head}{extra}"
                   f"content-length: {len(body)}\r\n\r\n").encode("latin-1") + body
        reused = self._proto is not None and not self._proto.lost
        if not reused:
            self._proto = await self._open()
        try:
            await self._exchange(self._proto, request, on_event)  # type: ignore[arg-type]
        except HttpError as exc:
            if not (reused and exc.reason == "stale_connection"):
                if exc.reason == "stale_connection":
                    raise HttpError("connection_reset", "closed before answering") from None
                raise
            # The server had closed this idle keep-alive connection: retry once on a fresh one.
            self.close()
            self._proto = await self._open()
            try:
                await self._exchange(self._proto, request, on_event)
            except HttpError as again:
                if again.reason == "stale_connection":
                    raise HttpError("connection_reset", "closed before answering") from None
                raise
