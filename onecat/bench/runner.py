"""Closed-loop load generation: c clients, each sending its next request when the last ends.

This is `vllm bench serve --request-rate inf --max-concurrency c`, request for request and
chunk for chunk (vllm/benchmarks/lib/endpoint_request_func.py; lines from the copy in
1CatAI/1Cat-vLLM at ae13773a, which upstream 02cfb534 matches except where noted):

- the request: completions send ``repetition_penalty: 1.0`` (176), ``logprobs: null``,
  ``max_tokens``; chat sends ``max_completion_tokens`` and the prompt as a text content part;
  both stream with ``include_usage`` and send ``ignore_eos`` (random datasets force it,
  vllm/benchmarks/serve.py:1785-1793). No temperature: the server samples with its default
  (serve.py:1842-1848, "no longer sets temperature==0"); --temperature 0 is greedy, which
  1Cat serves through a top-1 lm_head shortcut (config/vllm.py:1457-1462), so greedy TPOT is
  not comparable.
- the chunks: every SSE event whose ``choices`` is non-empty is a chunk, even with empty
  text (special tokens, UTF-8 held back: "text could be empty here", 223-238). The first one
  sets TTFT, each later one adds an ITL gap, the last one sets E2E (253). On chat the server's
  first event is role-only (``delta {role, content: ""}``): it is that first chunk, as in
  vLLM. Only choices events move the end time (upstream 02cfb534: "the trailing usage chunk
  carries no token"). Output tokens come from ``usage.completion_tokens`` (240-244).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from onecat.bench.httpclient import Client, Endpoint, HttpError


@dataclass(frozen=True)
class Target:
    endpoint: Endpoint
    model: str
    chat: bool
    headers: dict[str, str]
    timeout: float

    def client(self, connections: int = 1) -> Client:
        return Client(self.endpoint, self.headers, connections)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    temperature: float | None = None  # None: the server's default, as vllm bench serve

    def body(self, prompt: str, max_tokens: int) -> dict:
        body: dict = {"model": self.model}
        if self.chat:
            body["messages"] = [{"role": "user",
                                 "content": [{"type": "text", "text": prompt}]}]
            body["max_completion_tokens"] = max_tokens
        else:
            body.update(prompt=prompt, repetition_penalty=1.0, max_tokens=max_tokens,
                        logprobs=None)
        body.update(stream=True, stream_options={"include_usage": True}, ignore_eos=True)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


@dataclass
class RequestResult:
    request_id: str = ""
    ok: bool = False
    error: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float | None = None
    latency: float | None = None
    itl: list[float] = field(default_factory=list)
    start: float = 0.0  # time.perf_counter(): CLOCK_MONOTONIC on Linux
    end: float = 0.0

    def detail(self, level_start: float) -> dict:
        """This request for --save-detailed (times in ms, start relative to the level)."""
        tpot = None
        if self.ok and self.latency is not None and self.ttft is not None \
                and self.output_tokens > 1:
            tpot = (self.latency - self.ttft) / (self.output_tokens - 1) * 1000
        return {"id": self.request_id, "start_ms": (self.start - level_start) * 1000,
                "ttft_ms": _ms(self.ttft), "tpot_ms": tpot, "e2el_ms": _ms(self.latency),
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "error": self.error}


@dataclass
class LiveCounters:
    """What the progress line shows while a level runs."""

    done: int = 0
    failed: int = 0
    chunks: int = 0


def _usage(usage: object) -> dict[str, int]:
    """The usage object's token counts; HttpError when they are not counts."""
    if not isinstance(usage, dict):
        raise HttpError("bad_response", "usage is not a JSON object")
    counts = {}
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 0:
            raise HttpError("bad_response", f"usage.{key} is {str(value)[:20]!r}, not a count")
        counts[key] = value
    return counts


class _Collector:
    """Turns SSE payloads into timings as they arrive (called from the protocol)."""

    def __init__(self, result: RequestResult, live: LiveCounters, chat: bool) -> None:
        self.result = result
        self.live = live
        self.chat = chat
        self.last = result.start
        self.chunks = 0
        self.role_only = 0  # chat's role-only first event: a chunk, but no token
        self.usage: dict[str, int] | None = None
        self.done = False

    def __call__(self, data: bytes, now: float) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            raise HttpError("bad_response", "a stream chunk is not JSON") from None
        if not isinstance(event, dict):
            raise HttpError("bad_response", "a stream chunk is not a JSON object")
        if event.get("error"):
            raise HttpError("server_error_in_stream", str(event["error"])[:200])
        choices = event.get("choices")
        if not choices:  # vLLM: `if choices := data.get("choices")` ... `elif usage := ...`
            if event.get("usage"):
                self.usage = _usage(event["usage"])
            return
        choice = choices[0] if isinstance(choices, list) else None
        if not isinstance(choice, dict):
            raise HttpError("bad_response", "a stream chunk's choices is not a list of objects")
        # Every event with choices is a chunk, whatever its text (empty for special tokens).
        result = self.result
        if result.ttft is None:
            result.ttft = now - result.start
            delta = choice.get("delta") if self.chat else None
            if isinstance(delta, dict) and delta.get("role") and not delta.get("content"):
                self.role_only = 1
        else:
            result.itl.append(now - self.last)
        self.last = now
        self.chunks += 1
        self.live.chunks += 1


async def _stream(client: Client, target: Target, body: bytes,
                  result: RequestResult, live: LiveCounters) -> None:
    result.start = time.perf_counter()
    collect = _Collector(result, live, target.chat)
    await client.stream(target.path, body, collect, result.request_id or None)
    if not collect.done:
        raise HttpError("truncated_stream", "the stream ended without [DONE]")
    if result.ttft is None:
        raise HttpError("empty_output", "no chunk carried choices")
    result.latency = collect.last - result.start
    tokens = collect.chunks - collect.role_only
    if collect.usage:
        result.output_tokens = collect.usage.get("completion_tokens") or tokens
        result.prompt_tokens = collect.usage.get("prompt_tokens") or 0
    else:
        result.output_tokens = tokens  # server ignored include_usage: a token per chunk
    result.ok = True


async def send(client: Client, target: Target, prompt: str, max_tokens: int,
               live: LiveCounters, request_id: str = "") -> RequestResult:
    """One request, never raising and never running past target.timeout.

    request_id goes out as the X-Request-Id header (vLLM logs it as the request's id).
    """
    result = RequestResult(request_id=request_id)
    body = json.dumps(target.body(prompt, max_tokens)).encode()
    try:
        await asyncio.wait_for(_stream(client, target, body, result, live),
                               timeout=target.timeout)
    # asyncio.TimeoutError: on Python 3.10 (Ubuntu 22.04 nodes run this client in the burn-in
    # and the benchmark) it is not yet the builtin TimeoutError. A cancelled aiohttp request
    # closes its connection.
    except (TimeoutError, asyncio.TimeoutError):  # noqa: UP041
        result.error = "timeout"
    except HttpError as exc:
        result.error = exc.reason
    except OSError as exc:
        result.error = f"os_error_{exc.errno}" if exc.errno else "os_error"
    result.end = time.perf_counter()
    if result.ok:
        live.done += 1
    else:
        result.ttft = result.latency = None
        result.itl = []
        live.failed += 1
    return result


@dataclass
class LevelRun:
    concurrency: int
    results: list[RequestResult]
    duration: float
    started: float  # time.perf_counter() when the level began


async def run_level(target: Target, prompts: list[str], concurrency: int, max_tokens: int,
                    live: LiveCounters, ids: list[str] | None = None) -> LevelRun:
    """Exactly `concurrency` clients drain the prompt list in order."""
    results: list[RequestResult] = [RequestResult() for _ in prompts]
    next_index = 0

    clients = min(concurrency, len(prompts))
    client = target.client(clients)
    # Open every client's connection first: a refused connect shows up as a request's error.
    await client.warm(clients)

    async def one_client() -> None:
        nonlocal next_index
        while next_index < len(prompts):
            i = next_index
            next_index += 1
            results[i] = await send(client, target, prompts[i], max_tokens, live,
                                    ids[i] if ids else "")

    began = time.perf_counter()
    try:
        await asyncio.gather(*(one_client() for _ in range(clients)))
    finally:
        duration = time.perf_counter() - began
        await client.close()
    return LevelRun(concurrency, results, duration, began)
