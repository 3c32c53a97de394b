"""Fuzz what `onecat bench` reads from a server and from its command line.

Server side: the SSE stream of a completion (HTTP framing, chunk splits, event JSON, usage),
the side requests' HTTP replies (/v1/models, /tokenize), /metrics text. Every reply either
measures or fails that one request with a short reason; the run itself never crashes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import socket
import threading
from pathlib import Path

from fuzzkit import JSON, dumps, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.bench import cli as command
from onecat.bench import prompts
from onecat.bench.httpclient import Client, Endpoint, HttpError
from onecat.bench.observe import http_metrics_fetch, parse_gauges
from onecat.bench.runner import LiveCounters, Target, send
from onecat.bench.session import LIMITS, BenchError, BenchOptions, _probe
from onecat.httpsync import BadAnswer

ENDPOINT = Endpoint("127.0.0.1", 8000, False, "")
TARGET = Target(ENDPOINT, "m", False, {}, 5.0)
CHAT_TARGET = Target(ENDPOINT, "m", True, {}, 5.0)

COMPLETION_CHUNK = {"id": "cmpl-1", "object": "text_completion", "model": "m",
                    "choices": [{"index": 0, "text": " time", "finish_reason": None}]}
CHAT_CHUNK = {"id": "chat-1", "object": "chat.completion.chunk", "model": "m",
              "choices": [{"index": 0, "delta": {"content": " time"}}]}
USAGE_CHUNK = {"id": "cmpl-1", "choices": [],
               "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}


@st.composite
def sse_events(draw: st.DrawFn, chat: bool) -> bytes:
    """An event stream: well-formed chunks, mutated chunks, junk lines, [DONE] or not."""
    chunk = CHAT_CHUNK if chat else COMPLETION_CHUNK
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(("good", "good", "mutated", "usage", "junk", "comment")))
        if kind == "good":
            parts.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        elif kind == "mutated":
            doc = draw(mutated(chunk) | JSON)
            parts.append(b"data: " + dumps(doc).encode() + b"\n\n")
        elif kind == "usage":
            doc = draw(mutated(USAGE_CHUNK, max_edits=2))
            parts.append(b"data: " + dumps(doc).encode() + b"\n\n")
        elif kind == "comment":
            parts.append(b": keep-alive\n\n")
        else:
            parts.append(draw(st.binary(max_size=24)))
    if draw(st.integers(0, 4)):
        parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


@st.composite
def http_response(draw: st.DrawFn, body: bytes) -> bytes:
    """`body` framed as chunked, content-length or close-delimited, sometimes framed wrong."""
    status = draw(st.sampled_from((400, 401, 404, 500, 503)) | st.integers(0, 999)) \
        if draw(st.integers(0, 4)) == 0 else 200
    status_line = f"HTTP/1.1 {status} X" if draw(st.integers(0, 9)) else draw(st.sampled_from(
        (f"HTTP/1.1 {status}", "HTTP/1.1", "")) | st.text(max_size=16))
    framing = draw(st.sampled_from(("chunked", "length", "close"))) if draw(
        st.integers(0, 4)) else draw(st.sampled_from(("bad-length", "bad-chunk")))
    headers = ["content-type: text/event-stream"]
    if framing == "chunked":
        headers.append("transfer-encoding: chunked")
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces if p)
        payload += b"0\r\n\r\n" if draw(st.integers(0, 4)) else b""
    elif framing == "length":
        headers.append(f"content-length: {len(body)}")
        payload = body
    elif framing == "bad-length":
        headers.append(f"content-length: {draw(st.text(max_size=6) | st.integers().map(str))}")
        payload = body
    elif framing == "bad-chunk":
        headers.append("transfer-encoding: chunked")
        payload = draw(st.binary(max_size=12)) + b"\r\n" + body
    else:
        payload = body
    head = status_line + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
    return head.encode("utf-8", "replace") + payload


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


async def _scripted(reply: bytes, cuts: list[int], call):
    """call(endpoint) against a loopback server that answers each connection's request with
    `reply`, written in the pieces `cuts` makes, then hangs up."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":")[1]))
            for piece in _split(reply, cuts):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        return await call(Endpoint("127.0.0.1", server.sockets[0].getsockname()[1], False, ""))


async def _send(reply: bytes, cuts: list[int], target: Target, live: LiveCounters):
    async def call(endpoint: Endpoint):
        at = Target(endpoint, target.model, target.chat, {}, target.timeout)
        client = at.client()
        try:
            return await send(client, at, "hello", 8, live, "r-1")
        finally:
            await client.close()

    return await _scripted(reply, cuts, call)


@settings(max_examples=examples(300))
@given(data=st.data(), chat=st.booleans(), cuts=st.lists(st.integers(0, 400), max_size=6))
@fuzz("bench: SSE stream of a completion (aiohttp on loopback)")
def test_fuzz_sse_stream(data: st.DataObject, chat: bool, cuts: list[int]) -> None:
    body = data.draw(sse_events(chat), label="events")
    reply = data.draw(http_response(body), label="reply")
    live = LiveCounters()
    result = asyncio.run(_send(reply, cuts, CHAT_TARGET if chat else TARGET, live))
    if result.ok:
        assert result.ttft is not None and result.latency is not None
        assert 0 <= result.ttft <= result.latency
        assert isinstance(result.output_tokens, int) and result.output_tokens >= 0
        assert isinstance(result.prompt_tokens, int) and result.prompt_tokens >= 0
        assert result.error is None and live.done == 1
    else:
        assert isinstance(result.error, str) and result.error and live.failed == 1
        assert result.ttft is None and result.itl == []
        # The server hung up after its reply: no reply may leave the request waiting.
        assert result.error != "timeout", reply


async def _side_request(reply: bytes, path: str) -> tuple[int, object]:
    async def call(endpoint: Endpoint) -> tuple[int, object]:
        client = Client(endpoint)
        try:
            return await asyncio.wait_for(client.get_json(path), 5)
        finally:
            await client.close()

    return await _scripted(reply, [], call)


MODELS = {"object": "list", "data": [{"id": "qwen", "object": "model", "owned_by": "vllm"}]}


@settings(max_examples=examples(200))
@given(data=st.data(), path=st.sampled_from(("/v1/models", "/tokenize")))
@fuzz("bench: side-request HTTP replies")
def test_fuzz_side_request_replies(data: st.DataObject, path: str) -> None:
    doc = data.draw(mutated(MODELS) | mutated({"count": 5, "max_model_len": 8192}) | JSON)
    body = data.draw(st.just(dumps(doc).encode()) | st.binary(max_size=40), label="body")
    reply = data.draw(http_response(body), label="reply")
    try:
        status, _ = asyncio.run(_side_request(reply, path))
    except HttpError as error:  # a TimeoutError (a hang) fails the fuzzer
        assert error.reason
        return
    assert isinstance(status, int)


def _serve_once(reply: bytes) -> tuple[int, threading.Thread]:
    """A loopback server that answers one request with `reply` and hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def answer() -> None:
        with listener:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


@settings(max_examples=examples(100))
@given(data=st.data())
@fuzz("bench: /metrics HTTP replies (the scraper thread's blocking GET)")
def test_fuzz_metrics_replies(data: st.DataObject) -> None:
    body = data.draw(st.just(b"vllm:kv_cache_usage_perc 0.5\n") | st.binary(max_size=40),
                     label="body")
    reply = data.draw(http_response(body), label="reply")
    port, thread = _serve_once(reply)
    fetch = http_metrics_fetch("127.0.0.1", port, False, timeout=3)
    try:
        text = fetch()
    except (OSError, BadAnswer):
        return  # a missed sample
    finally:
        fetch.close()  # type: ignore[attr-defined]
        thread.join(10)
    assert text is None or isinstance(text, str)


class ScriptedModels:
    def __init__(self, status: int, body: object) -> None:
        self.status, self.body = status, body

    async def get_json(self, path: str) -> tuple[int, object]:
        return self.status, self.body


@settings(max_examples=examples(200))
@given(status=st.sampled_from((200, 200, 200, 401, 404, 500)) | st.integers(),
       body=mutated(MODELS, max_edits=3) | JSON, model=st.none() | st.sampled_from(("qwen",)))
@example(status=200, body={"data": 5}, model=None)
@example(status=200, body={"data": [{"id": None}, {"id": 7}]}, model=None)
@fuzz("bench: /v1/models shapes")
def test_fuzz_models_probe(status: int, body: object, model: str | None) -> None:
    opts = BenchOptions(url="http://127.0.0.1:8000", out=Path("unused"), model=model)
    try:
        served = asyncio.run(_probe(ScriptedModels(status, body), opts))
    except BenchError as error:
        assert "\n" not in str(error)
        return
    assert isinstance(served, str) and served


@settings(max_examples=examples(200))
@given(text=st.text(max_size=300) | st.lists(st.sampled_from((
    "vllm:kv_cache_usage_perc 0.5", 'vllm:num_requests_running{model="m"} 3',
    "vllm:num_requests_waiting NaN", "vllm:x{a=\"b c\"} +Inf", "# HELP vllm:x y", "vllm:",
    "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc 1e999")), max_size=8).map("\n".join))
@fuzz("bench: /metrics text")
def test_fuzz_metrics_text(text: str) -> None:
    gauges = parse_gauges(text)
    assert all(isinstance(v, float) for v in gauges.values())


@settings(max_examples=examples(150))
@given(input_len=st.integers(1, 600), answers=st.lists(st.integers(-5, 2000), min_size=1))
@fuzz("bench: prompt length search against any /tokenize")
def test_fuzz_prompt_search(input_len: int, answers: list[int]) -> None:
    calls = iter(answers * 50)

    async def count(text: str) -> int:
        return next(calls, input_len)

    text, tokens = asyncio.run(prompts.exact_text(0, 0, input_len, count))
    assert isinstance(text, str) and isinstance(tokens, int)


ARG_TEXT = (st.sampled_from(("1", "8", "0", "-1", "nan", "inf", "-inf", "1e17", "1e400",
                             "100000000000000000", "0x10", "1_000", " 4", "", "1,8,16",
                             "1,,2", "1,-3", "3.5"))
            | st.text(max_size=10) | st.integers().map(str) | st.floats().map(str))


PARSER = argparse.ArgumentParser(exit_on_error=False)
command.add_arguments(PARSER)


@settings(max_examples=examples(300))
@given(option=st.sampled_from(("--concurrency", "--input-len", "--output-len",
                               "--requests-per-level", "--warmup", "--timeout", "--seed")),
       value=ARG_TEXT)
@example(option="--timeout", value="nan")
@example(option="--requests-per-level", value="100000000000000000")
@fuzz("bench: command-line numbers")
def test_fuzz_bench_arguments(option: str, value: str) -> None:
    try:
        args = PARSER.parse_args(["--url", "http://127.0.0.1:8000", option, value])
    except (argparse.ArgumentError, SystemExit):
        return
    parsed = getattr(args, option[2:].replace("-", "_"))
    values = parsed if isinstance(parsed, list) else [parsed]
    for number in values:
        assert math.isfinite(number), (option, value, number)
        if option != "--seed":
            assert 0 <= number <= max(LIMITS.values())
