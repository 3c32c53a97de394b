"""The stand-in's prefix cache: chained block hashes, LRU eviction, vLLM's counters, TTFT."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path

STANDIN = Path(__file__).resolve().parents[1] / "standin_engine"
sys.path.insert(0, str(STANDIN))

from standin_harness import standin  # noqa: E402
from standin_vllm.engine import Engine  # noqa: E402
from standin_vllm.kvcache import PrefixCache, PrefixRequest, block_hashes  # noqa: E402
from standin_vllm.settings import Settings  # noqa: E402


def test_only_full_blocks_are_hashed_and_each_hash_chains_its_prefix():
    a = block_hashes(list(range(40)), 16)
    assert len(a) == 2  # 40 tokens: two full blocks, the last 8 tokens have no hash
    b = block_hashes([99, *range(1, 40)], 16)
    # One different token in the first block changes every later hash (the chain).
    assert a[0] != b[0] and a[1] != b[1]
    assert block_hashes(list(range(32)), 16) == a


def test_lookup_counts_tokens_and_hits_whole_leading_blocks_but_not_the_last_token():
    cache = PrefixCache(num_blocks=100, block_size=16)
    prompt = list(range(64))
    assert cache.admit(prompt) == 0
    # The same 64 tokens again: at most len - 1 can hit, in whole blocks -> 48.
    assert cache.admit(prompt) == 48
    # A longer prompt with the same start hits its 4 cached blocks.
    assert cache.admit(prompt + list(range(1000, 1020))) == 64
    # A prompt that differs in block 2 hits block 1 only.
    assert cache.admit(prompt[:20] + [7] * 44) == 16
    assert cache.queries == 64 + 64 + 84 + 64
    assert cache.hits == 48 + 64 + 16
    assert 0 < cache.hit_rate() < 1


def test_least_recently_used_blocks_go_first():
    cache = PrefixCache(num_blocks=4, block_size=4)
    first, second = list(range(9)), list(range(100, 109))  # 2 blocks each
    cache.admit(first)
    cache.admit(second)
    assert len(cache) == 4
    cache.admit(first)  # touches first's blocks: second's are now the oldest
    cache.admit(list(range(200, 209)))  # two new blocks evict second's
    assert len(cache) == 4
    assert cache.lookup(first) == 8
    assert cache.lookup(second) == 0


def test_disabled_caches_and_counts_nothing():
    cache = PrefixCache(num_blocks=100, block_size=16, enabled=False)
    cache.admit(list(range(64)))
    assert cache.admit(list(range(64))) == 0
    assert (cache.queries, cache.hits, len(cache)) == (0, 0, 0)


def test_prefill_time_follows_the_uncached_tokens():
    engine = Engine(Settings(prefill_ms=10, prefill_ms_per_token=1.0, decode_ms=1), 8, 100000)

    async def ttft(cached: int) -> float:
        start = time.monotonic()
        firsts: list[float] = []
        await engine.run(200, 1, lambda i: firsts.append(time.monotonic() - start),
                         arrived=start, cached=lambda: cached)
        return firsts[0]

    cold = asyncio.run(ttft(0))
    warm = asyncio.run(ttft(192))
    assert 0.205 <= cold < 0.260  # 10 + 200 x 1 ms
    assert 0.013 <= warm < 0.060  # 10 + 8 x 1 ms


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert "# TYPE vllm:prefix_cache_queries_total counter" in text
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("vllm:prefix_cache_")}


def _chat(turns: int) -> dict:
    messages = [{"role": "system", "content": "You answer briefly. " * 60}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"question {t} " + "more words " * 30})
        if t < turns - 1:
            messages.append({"role": "assistant", "content": "an answer"})
    return {"model": "standin-model", "messages": messages, "max_tokens": 2}


def test_the_server_reports_vllms_counters_and_a_second_turn_hits(tmp_path):
    with standin(tmp_path) as server:
        before = _counters(server.url)
        assert before == {"vllm:prefix_cache_queries_total": 0.0,
                          "vllm:prefix_cache_hits_total": 0.0}
        first = _post(server.url + "/v1/chat/completions", _chat(1))["usage"]["prompt_tokens"]
        second = _post(server.url + "/v1/chat/completions", _chat(2))["usage"]["prompt_tokens"]
        after = _counters(server.url)
        assert after["vllm:prefix_cache_queries_total"] == first + second
        # The second turn starts with the whole first prompt but its generation prompt
        # ("<|im_start|>assistant\n", then the answer differs): all full blocks before it hit.
        hits = after["vllm:prefix_cache_hits_total"]
        assert first - 16 - 4 <= hits <= first


def test_no_enable_prefix_caching_turns_it_off(tmp_path):
    with standin(tmp_path, args=["--no-enable-prefix-caching"]) as server:
        _post(server.url + "/v1/chat/completions", _chat(1))
        _post(server.url + "/v1/chat/completions", _chat(1))
        assert _counters(server.url) == {"vllm:prefix_cache_queries_total": 0.0,
                                         "vllm:prefix_cache_hits_total": 0.0}


def test_a_finished_request_caches_its_answer_for_the_next_turn():
    cache = PrefixCache(num_blocks=100, block_size=16)
    prompt, answer = list(range(100)), list(range(500, 540))
    request = PrefixRequest(cache, prompt)
    assert request() == 0
    request.finished(answer)
    # The next turn: the previous prompt, the answer, a new message: hits through the answer.
    assert cache.lookup([*prompt, *answer, *range(900, 950)]) == 128  # (100 + 40) // 16 blocks
