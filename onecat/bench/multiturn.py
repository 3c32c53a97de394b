"""`onecat bench --workload multiturn`: conversations that come back, as chat users do.

N conversations of T turns each share one system prompt of S tokens (or, with K tenants, each
conversation has its tenant's own: conversation n belongs to tenant n mod K, so K prompts of S
tokens compete for every node's cache); every turn adds a user
message of U tokens (seeded words, distinct per conversation and turn; the word counts follow
the server's tokenizer through one POST /tokenize when it has one) and sends the whole
conversation so far to /v1/chat/completions, the previous answers included as the server
gave them. `concurrency` clients take the next conversation that is ready from one queue, so
the turns of different conversations interleave: between two turns of one conversation the
server sees turns of many others, which is what a prefix cache must survive.

The report: TTFT (median, p90, p99) and output tokens per second over every turn, the
prefix-cache hit rate from the nodes' own counters (vLLM's `vllm:prefix_cache_queries` and
`vllm:prefix_cache_hits`, in tokens, read before and after the run from each --metrics-url),
each node's share of the prompt tokens, and with --gateway-stats each node's share of the
requests (HAProxy's counts). Through a gateway /metrics is one node's at a time: give each
node's own URL.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onecat import httpsync
from onecat.bench.httpclient import Client, Endpoint, HttpError, public_url
from onecat.bench.prompts import words_for
from onecat.bench.runner import LiveCounters, RequestResult, _Collector
from onecat.bench.stats import summarize

MAX_METRICS_BYTES = 8 << 20
QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")


@dataclass
class MultiturnOptions:
    url: str
    out: Path
    model: str | None = None
    api_key: str | None = None
    # /metrics' own key where the node's guard wants one (ONECAT_METRICS_KEY); else api_key.
    metrics_key: str | None = None
    conversations: int = 64
    turns: int = 8
    system_len: int = 2048
    tenants: int = 1
    turn_len: int = 300
    output_len: int = 64
    concurrency: int = 16
    seed: int = 0
    timeout: float = 600.0
    metrics_urls: list[str] = field(default_factory=list)
    quiet: bool = False


class MultiturnError(RuntimeError):
    """The run cannot start (unreachable server, wrong model)."""


def prefix_counters(text: str) -> tuple[float, float] | None:
    """(queries, hits) in tokens from a Prometheus page, summed over label sets; None when
    the server exports no prefix-cache counters."""
    sums = {"queries": 0.0, "hits": 0.0}
    seen = False
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        kind = "queries" if name in QUERIES[:1] else "hits" if name in HITS[:1] else None
        if kind is None:
            continue
        try:
            sums[kind] += float(line.rpartition(" ")[2])
        except ValueError:
            continue
        seen = True
    return (sums["queries"], sums["hits"]) if seen else None


def read_counters(url: str, timeout: float = 10.0,
                  key: str | None = None) -> tuple[float, float] | None:
    """A node's prefix-cache counters from URL/metrics (None: it has none, or no answer)."""
    try:
        answer = httpsync.request(url.rstrip("/") + "/metrics", timeout=timeout,
                                  limit=MAX_METRICS_BYTES,
                                  headers={"Authorization": f"Bearer {key}"} if key else None)
    except (OSError, ValueError):  # no answer, a malformed one (BadAnswer), not an http(s) URL
        return None
    if answer.status != 200:
        return None
    return prefix_counters(answer.text())


def cache_report(before: dict[str, tuple[float, float] | None],
                 after: dict[str, tuple[float, float] | None]) -> dict[str, Any]:
    """The hit rate over all nodes and each node's, from counters read around the run; each
    node under its URL as results may show it (public_url: no password, no query value)."""
    nodes: dict[str, dict[str, Any]] = {}
    for url, end in after.items():
        start = before.get(url)
        if end is None or start is None:
            nodes[public_url(url)] = {"queries": None, "hits": None, "hit_rate": None}
            continue
        queries, hits = end[0] - start[0], end[1] - start[1]
        nodes[public_url(url)] = {"queries": int(queries), "hits": int(hits),
                      "hit_rate": round(hits / queries, 4) if queries else None}
    counted = [n for n in nodes.values() if n["queries"] is not None]
    queries = sum(n["queries"] for n in counted)
    hits = sum(n["hits"] for n in counted)
    for node in counted:
        node["share_of_prompt_tokens"] = round(node["queries"] / queries, 4) if queries else None
    shares = [n["queries"] for n in counted]
    mean = queries / len(shares) if shares else 0
    return {
        "queries": queries if counted else None, "hits": hits if counted else None,
        "hit_rate": round(hits / queries, 4) if queries else None,
        "busiest_over_mean": round(max(shares) / mean, 3) if shares and mean else None,
        "nodes": nodes,
    }


# Tokens per word of these prompts that the lengths are scaled by: a tokenizer makes about 1.3
# of English words and up to a few of rarer scripts; a /tokenize answer outside these bounds
# (a count of 1 made a 200-token turn 14 MB) is taken as the nearest bound.
TOKENS_PER_WORD = (0.25, 8.0)


def words_ratio(count: object, words: int) -> float:
    """Tokens per word from a /tokenize count of `words` words, within TOKENS_PER_WORD; 1.0
    when the count is no positive whole number."""
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0 or words <= 0:
        return 1.0
    low, high = TOKENS_PER_WORD
    return min(max(count / words, low), high)


async def tokens_per_word(endpoint: Endpoint, headers: dict[str, str], model: str,
                          seed: int) -> float:
    """The server's tokens per word of these prompts (POST /tokenize on 1,000 words), so that
    S and U are tokens on the server's own tokenizer; 1.0 when it has no /tokenize."""
    words = 1000
    client = Client(endpoint, headers, 1)
    try:
        status, body = await asyncio.wait_for(client.post_json("/tokenize", {
            "model": model, "prompt": system_prompt(seed, words),
            "add_special_tokens": False}), 30)
    except (TimeoutError, HttpError, OSError):
        return 1.0
    finally:
        await client.close()
    return words_ratio(body.get("count") if status == 200 and isinstance(body, dict) else None,
                       words)


def system_prompt(seed: int, words: int, tenant: int = 0) -> str:
    # Indexes below zero: no random-workload prompt or user turn uses them.
    return " ".join(words_for(seed, -1 - tenant, max(words, 1)))


def user_turn(seed: int, conversation: int, turn: int, words: int) -> str:
    # Distinct per (conversation, turn); an index no random-workload prompt uses.
    return " ".join(words_for(seed, 1_000_000 + conversation * 1000 + turn, max(words, 1)))


def kept_answer_chars(output_len: int) -> int:
    """How much of an answer the next turn sends back: 64 characters a requested token (a
    token is rarely 10), at least 4 KiB. An engine that ignores the token limit (or answers
    one endless chunk) cannot grow the conversation, and the client's memory, without end."""
    return max(4096, 64 * max(output_len, 0))


class _TextCollector(_Collector):
    """The runner's chunk timing, plus the answer's text (the next turn sends it back), at
    most `limit` characters of it."""

    def __init__(self, result: RequestResult, live: LiveCounters, limit: int) -> None:
        super().__init__(result, live, chat=True)
        self.text: list[str] = []
        self.limit = limit
        self._kept = 0

    def __call__(self, data: bytes, now: float) -> None:
        super().__call__(data, now)
        if data == b"[DONE]":
            return
        # super() raised for a chunk that is no object or whose choices are no list.
        event = json.loads(data)
        for choice in event.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                room = self.limit - self._kept
                if room > 0:
                    self.text.append(delta["content"][:room])
                    self._kept += len(self.text[-1])


@dataclass
class Conversation:
    number: int
    messages: list[dict[str, str]]
    turn: int = 0


async def _turn(client: Client, opts: MultiturnOptions, model: str,
                conv: Conversation, live: LiveCounters) -> tuple[RequestResult, str]:
    """One turn, never raising: the result and the answer's text."""
    result = RequestResult(request_id=f"mt-{conv.number}-{conv.turn}")
    body = {"model": model, "messages": conv.messages, "max_completion_tokens": opts.output_len,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    collect = _TextCollector(result, live, kept_answer_chars(opts.output_len))

    async def stream() -> None:
        result.start = time.perf_counter()
        await client.stream("/v1/chat/completions", json.dumps(body).encode(), collect,
                            result.request_id)
        if not collect.done:
            raise HttpError("truncated_stream", "the stream ended without [DONE]")
        if result.ttft is None:
            raise HttpError("empty_output", "no chunk carried choices")
        result.latency = collect.last - result.start
        usage = collect.usage or {}
        result.output_tokens = usage.get("completion_tokens") or collect.chunks - \
            collect.role_only
        result.prompt_tokens = usage.get("prompt_tokens") or 0
        result.ok = True

    try:
        await asyncio.wait_for(stream(), timeout=opts.timeout)
    except (TimeoutError, asyncio.TimeoutError):  # noqa: UP041 (Python 3.10 on nodes)
        result.error = "timeout"
    except HttpError as exc:
        result.error = exc.reason
    except (OSError, ValueError) as exc:
        result.error = f"os_error_{exc.errno}" if isinstance(exc, OSError) and exc.errno \
            else "os_error" if isinstance(exc, OSError) else "bad_response"
    result.end = time.perf_counter()
    if result.ok:
        live.done += 1
    else:
        live.failed += 1
    return result, "".join(collect.text)


async def _model(opts: MultiturnOptions, endpoint: Endpoint, headers: dict[str, str]) -> str:
    client = Client(endpoint, headers, 1)
    try:
        status, body = await asyncio.wait_for(client.get_json("/v1/models"), 30)
    except (TimeoutError, HttpError, OSError) as exc:
        raise MultiturnError(f"cannot reach {public_url(opts.url)} ({exc})") from None
    finally:
        await client.close()
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise MultiturnError(f"{public_url(opts.url)}/v1/models answered HTTP {status}")
    served = [m.get("id") for m in body["data"] if isinstance(m, dict)]
    if opts.model:
        if opts.model not in served:
            raise MultiturnError(f"model {opts.model!r} is not served; it serves {served}")
        return opts.model
    if not served or not isinstance(served[0], str):
        raise MultiturnError("/v1/models lists no model")
    return served[0]


async def run_multiturn(opts: MultiturnOptions) -> dict[str, Any]:
    """Run every conversation to its last turn; the report (also written to the out dir)."""
    endpoint = Endpoint.parse(opts.url)
    headers = {"authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    model = await _model(opts, endpoint, headers)
    ratio = await tokens_per_word(endpoint, headers, model, opts.seed)
    tenants = max(1, min(opts.tenants, opts.conversations))  # a prompt per tenant in use
    systems = [system_prompt(opts.seed, round(opts.system_len / ratio), tenant)
               for tenant in range(tenants)]
    turn_words = max(1, round(opts.turn_len / ratio))
    ready: deque[Conversation] = deque(
        Conversation(n, [{"role": "system", "content": systems[n % tenants]}])
        for n in range(opts.conversations))
    results: list[tuple[int, int, RequestResult]] = []
    live = LiveCounters()
    loop = asyncio.get_running_loop()
    scrape_key = opts.metrics_key or opts.api_key
    before = {url: await loop.run_in_executor(None, read_counters, url, 10.0, scrape_key)
              for url in opts.metrics_urls}

    pool = Client(endpoint, headers, max(1, opts.concurrency))

    async def client() -> None:
        while ready:
            conv = ready.popleft()
            conv.messages.append({"role": "user", "content": user_turn(
                opts.seed, conv.number, conv.turn, turn_words)})
            result, answer = await _turn(pool, opts, model, conv, live)
            results.append((conv.number, conv.turn, result))
            conv.messages.append({"role": "assistant", "content": answer})
            conv.turn += 1
            if conv.turn < opts.turns:
                ready.append(conv)  # behind every other ready conversation

    began = time.perf_counter()
    try:
        await pool.warm(opts.concurrency)
        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(max(1, opts.concurrency))))
    finally:
        duration = time.perf_counter() - began
        await pool.close()
    after = {url: await loop.run_in_executor(None, read_counters, url, 10.0, scrape_key)
             for url in opts.metrics_urls}
    good = [r for _, _, r in results if r.ok]
    errors: dict[str, int] = {}
    for _, _, r in results:
        if not r.ok:
            errors[r.error or "unknown"] = errors.get(r.error or "unknown", 0) + 1
    total_out = sum(r.output_tokens for r in good)
    later = [r.ttft for _, turn, r in results if r.ok and turn > 0 and r.ttft is not None]
    report: dict[str, Any] = {
        "workload": "multiturn",
        "url": public_url(opts.url),
        "model": model,
        "conversations": opts.conversations, "turns": opts.turns,
        "system_len": opts.system_len, "tenants": tenants, "turn_len": opts.turn_len,
        "output_len": opts.output_len, "max_concurrency": opts.concurrency,
        "tokens_per_word": round(ratio, 3),
        "num_requests": len(results), "completed": len(good),
        "failed": len(results) - len(good), "errors": dict(sorted(errors.items())),
        "duration": duration,
        "total_input_tokens": sum(r.prompt_tokens for r in good),
        "total_output_tokens": total_out,
        "output_throughput": total_out / duration if duration > 0 else None,
        "mean_input_tokens": (sum(r.prompt_tokens for r in good) / len(good)) if good else None,
        **summarize("ttft", [r.ttft for r in good if r.ttft is not None]),
        "median_ttft_later_turns_ms": summarize("t", later)["median_t_ms"],
        **summarize("e2el", [r.latency for r in good if r.latency is not None]),
        "prefix_cache": cache_report(before, after) if opts.metrics_urls else None,
    }
    return report


def write_report(report: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "multiturn.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def summary_line(report: dict[str, Any]) -> str:
    cache = report.get("prefix_cache") or {}
    rate = cache.get("hit_rate")

    def ms(key: str) -> str:
        value = report.get(key)
        return "-" if value is None else f"{value:.0f} ms"

    tput = report.get("output_throughput")
    output = "-" if tput is None else f"{tput:.1f} tok/s"
    hit_rate = (f"{rate:.1%}" if rate is not None
                else "unknown (no --metrics-url with vLLM's counters)")
    return (f"{report['completed']}/{report['num_requests']} turns, "
            f"TTFT p50 {ms('median_ttft_ms')} p90 {ms('p90_ttft_ms')}, output {output}, "
            f"prefix-cache hit rate {hit_rate}")


def main(opts: MultiturnOptions, gateway_stats: str | None = None) -> int:
    """Run, write DIR/multiturn.json (and the gateway's share), print one line; exit code."""
    stats_before = None
    if gateway_stats:
        from onecat.gateway.share import fetch_stats

        try:
            stats_before = fetch_stats(gateway_stats)
        except (OSError, ValueError) as exc:
            print(f"onecat bench: --gateway-stats {gateway_stats}: {exc}", file=sys.stderr)
            return 2
    try:
        report = asyncio.run(run_multiturn(opts))
    except MultiturnError as exc:
        print(f"onecat bench: {exc}", file=sys.stderr)
        return 1
    if stats_before is not None and gateway_stats:
        from onecat.gateway.runtime import RuntimeApiError
        from onecat.gateway.share import fetch_stats, share

        try:
            report["gateway_share"] = share(stats_before, fetch_stats(gateway_stats))
        except (OSError, ValueError, RuntimeApiError) as exc:
            print(f"onecat bench: --gateway-stats: no per-node share ({exc})", file=sys.stderr)
    try:
        path = write_report(report, opts.out)
    except OSError as exc:
        print(f"onecat bench: cannot write results to {opts.out}: {exc.strerror}",
              file=sys.stderr)
        return 1
    if not opts.quiet:
        print(f"onecat bench: multiturn: {summary_line(report)} ({path})", file=sys.stderr)
    return 0 if report["completed"] else 1
