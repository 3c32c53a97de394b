"""The streaming requests of `onecat bench` (aiohttp + the SSE splitter) against tiny scripted
HTTP servers on loopback."""

from __future__ import annotations

import asyncio

import pytest

from onecat.bench.httpclient import Client, Endpoint, HttpError


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_OK = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
          + _chunk(b'data: {"n": 1}\n\ndata: {"n"') + _chunk(b': 2}\n\n')  # split event
          + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def _serve(replies: list[bytes], close_after_each: bool = True):
    """A server answering each request with the next scripted reply."""
    served = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while replies:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            served.append(head)
            writer.write(replies.pop(0))
            await writer.drain()
            if close_after_each:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], served


def _post(client: Client, events: list[bytes], request_id: str | None = None):
    return client.stream("/v1/completions", b"{}", lambda data, now: events.append(data),
                         request_id)


def test_events_split_across_chunks_and_a_silently_closed_keep_alive_connection():
    async def scenario() -> tuple[list[bytes], list[bytes]]:
        # The server closes after every answer without saying so (uvicorn's keep-alive timeout).
        server, port, served = await _serve([SSE_OK, SSE_OK])
        conn = Client(Endpoint("127.0.0.1", port, False, ""))
        events: list[bytes] = []
        async with server:
            await _post(conn, events, "req-1")
            await asyncio.sleep(0.05)
            await _post(conn, events)  # the closed keep-alive connection is replaced
            await conn.close()
        return events, served

    events, served = asyncio.run(scenario())
    assert events == [b'{"n": 1}', b'{"n": 2}', b"[DONE]"] * 2
    assert b"x-request-id: req-1\r\n" in served[0].lower()
    assert b"x-request-id" not in served[1].lower()


@pytest.mark.parametrize(("reply", "reason"), [
    (b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\n\r\noops!", "http_500"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + _chunk(b"data: {}\n\n"),
     "truncated_stream"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + _chunk(b"data: x\n\n"),
     "bad_response"),
    (b"garbage\r\n\r\n", "bad_response"),
])
def test_failures_have_reasons(reply, reason):
    async def scenario() -> str:
        server, port, _ = await _serve([reply])
        conn = Client(Endpoint("127.0.0.1", port, False, ""))

        def on_event(data: bytes, now: float) -> None:
            if data == b"x":
                raise ValueError("not JSON")

        async with server:
            try:
                await conn.stream("/v1/completions", b"{}", on_event)
            except HttpError as exc:
                return exc.reason
            finally:
                await conn.close()
        return "no error"

    assert asyncio.run(scenario()) == reason


def test_refused_connection():
    async def scenario() -> str:
        server, port, _ = await _serve([])
        server.close()
        await server.wait_closed()
        conn = Client(Endpoint("127.0.0.1", port, False, ""))
        with pytest.raises(HttpError) as err:
            await _post(conn, [])
        await conn.close()
        return err.value.reason

    assert asyncio.run(scenario()) == "connection_refused"
