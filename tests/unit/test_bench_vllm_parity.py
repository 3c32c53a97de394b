"""`onecat bench` counts, asks and scores exactly like `vllm bench serve` (issue 15).

Each test replays what vLLM's own client does (vllm/benchmarks/lib/endpoint_request_func.py,
vllm/benchmarks/serve.py) on scripted stream events.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from onecat.bench.httpclient import Endpoint
from onecat.bench.metrics import MIN_REQUESTS_FOR_P99, level_metrics, parse_goodput
from onecat.bench.observe import MetricsScraper
from onecat.bench.runner import LiveCounters, RequestResult, Target, _Collector

TARGET = Target(Endpoint("127.0.0.1", 8000, False, ""), "m", False, {}, 10.0)
CHAT = Target(Endpoint("127.0.0.1", 8000, False, ""), "m", True, {}, 10.0)


def _completion(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": None}],
                       "usage": None}).encode()


def _chat(delta: dict) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta}], "usage": None}).encode()


USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 7,
                                             "completion_tokens": 4}}).encode()


def _replay(chat: bool, events: list[tuple[bytes, float]]) -> tuple[RequestResult, _Collector]:
    result = RequestResult(start=100.0)
    collect = _Collector(result, LiveCounters(), chat)
    for data, now in events:
        collect(data, now)
    result.latency = collect.last - result.start
    return result, collect


def test_empty_text_chunks_count_for_ttft_itl_and_e2e():
    """vLLM: 'Note that text could be empty here e.g. for special tokens'."""
    result, collect = _replay(False, [
        (_completion(""), 100.2),  # a special token first: it is the first token
        (_completion("a"), 100.3),
        (_completion(""), 100.4),  # held-back UTF-8 byte
        (_completion("b"), 100.5),
        (USAGE, 100.9),  # the usage event carries no token: the end does not move
        (b"[DONE]", 101.0),
    ])
    assert result.ttft == pytest.approx(0.2)
    assert result.itl == pytest.approx([0.1, 0.1, 0.1])
    assert result.latency == pytest.approx(0.5)
    assert collect.chunks == 4 and collect.usage["completion_tokens"] == 4


def test_chat_role_only_first_chunk_sets_ttft_as_in_vllm():
    """vLLM's server sends {role: assistant, content: ""} first; its client counts it."""
    result, collect = _replay(True, [
        (_chat({"role": "assistant", "content": ""}), 100.25),
        (_chat({"content": "Hel"}), 100.26),
        (_chat({"content": ""}), 100.36),
        (_chat({"content": "lo"}), 100.46),
        (USAGE, 100.9),
        (b"[DONE]", 101.0),
    ])
    assert result.ttft == pytest.approx(0.25)
    assert result.itl == pytest.approx([0.01, 0.1, 0.1])
    assert result.latency == pytest.approx(0.46)
    # Without usage a token is a chunk, and the role-only chunk is not a token.
    assert collect.chunks - collect.role_only == 3


def test_request_body_matches_vllm_bench_serve():
    body = TARGET.body("hi", 256)
    assert body == {"model": "m", "prompt": "hi", "repetition_penalty": 1.0, "max_tokens": 256,
                    "logprobs": None, "stream": True, "stream_options": {"include_usage": True},
                    "ignore_eos": True}
    assert "temperature" not in body  # "no longer sets temperature==0 (greedy)"
    chat = CHAT.body("hi", 256)
    assert chat["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert chat["max_completion_tokens"] == 256 and "max_tokens" not in chat
    assert "repetition_penalty" not in chat and "temperature" not in chat
    greedy = Target(TARGET.endpoint, "m", False, {}, 10.0, temperature=0.0)
    assert greedy.body("hi", 8)["temperature"] == 0.0


def _ok(ttft: float, latency: float, out: int) -> RequestResult:
    return RequestResult(ok=True, ttft=ttft, latency=latency, output_tokens=out,
                         prompt_tokens=10, itl=[])


def test_goodput_as_vllm_computes_it():
    results = [
        _ok(0.5, 1.5, 11),  # TTFT 500 ms (= the SLO: good), TPOT 100 ms
        _ok(0.6, 1.6, 11),  # TTFT 600 ms: bad
        _ok(0.1, 0.1, 1),  # one token: TPOT counts as 0
        _ok(0.2, 3.2, 11),  # TPOT 300 ms: bad
        RequestResult(error="timeout"),
    ]
    slos = parse_goodput(["ttft:500", "tpot:100"])
    m = level_metrics(results, concurrency=2, duration=2.0, goodput=slos)
    assert m["request_goodput"] == 2 / 2.0
    assert m["goodput_slos_ms"] == {"ttft": 500.0, "tpot": 100.0}
    assert level_metrics(results, concurrency=2, duration=2.0)["request_goodput"] is None
    assert level_metrics(results, 2, 2.0, parse_goodput(["e2el:1500"]))[
        "request_goodput"] == 2 / 2.0


@pytest.mark.parametrize("bad", ["ttft", "itl:5", "ttft:-1", "tpot:fast"])
def test_goodput_arguments_are_checked(bad):
    with pytest.raises(ValueError, match="--goodput"):
        parse_goodput([bad])


def test_a_level_too_small_for_its_p99_says_so():
    few = level_metrics([_ok(0.1, 1.0, 10)] * 32, concurrency=8, duration=4.0)
    assert few["warnings"] and "p99 of TTFT, TPOT and E2E over 32 requests" in few["warnings"][0]
    enough = level_metrics([_ok(0.1, 1.0, 10)] * MIN_REQUESTS_FOR_P99, 8, 4.0)
    assert enough["warnings"] == []


def test_metrics_scraping_never_blocks_the_event_loop_that_stamps_chunks():
    """A slow /metrics (here 300 ms per scrape) must not delay the timing loop."""
    threads = []

    def slow_fetch() -> str:
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return "vllm:kv_cache_usage_perc 0.25\nvllm:num_requests_running 3\n"

    async def timing_loop() -> float:
        worst = 0.0
        for _ in range(40):
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - before - 0.01)
        return worst

    scraper = MetricsScraper(slow_fetch, interval=0.0)
    scraper.start()
    worst = asyncio.run(timing_loop())
    scraper.stop()
    assert worst < 0.1, f"the loop stalled {worst * 1000:.0f} ms behind a scrape"
    assert threads and "MainThread" not in threads
    assert scraper.peaks["kv_cache_usage_perc_max"] == 0.25
    assert scraper.peaks["num_requests_running_max"] == 3
