"""One benchmark run against one server: probe, build prompts, warm up, run each level."""

from __future__ import annotations

import asyncio
import datetime
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from onecat import __version__
from onecat.bench import output, prompts
from onecat.bench.httpclient import Client, Endpoint, HttpError, public_url
from onecat.bench.metrics import level_metrics, queue_warnings
from onecat.bench.observe import (
    MemoryReader,
    MemorySampler,
    MetricsScraper,
    http_metrics_fetch,
)
from onecat.bench.runner import LiveCounters, Target, run_level, send

PROBE_TIMEOUT_S = 30.0
# Upper bounds of the load options. Every prompt of a run is built (and counted through
# /tokenize) before timing starts, so their product is bounded too (MAX_PROMPT_TOKENS).
LIMITS: dict[str, float] = {
    "concurrency": 4096,
    "requests_per_level": 1_000_000,
    "warmup": 10_000,
    "tokens": 1 << 20,  # --input-len, --output-len
    "timeout_s": 86_400.0,
}
MAX_PROMPT_TOKENS = 50_000_000  # ~300 MB of prompt text in memory
TOKENIZE_CONNECTIONS = 16
WARMUP_MAX_TOKENS = 16


class BenchError(Exception):
    """The run cannot start (unreachable server, wrong key, unknown model): exit 1."""


@dataclass
class BenchOptions:
    url: str
    out: Path
    model: str | None = None
    api_key: str | None = None
    # /metrics' own key where the node's guard wants one (ONECAT_METRICS_KEY); else api_key.
    metrics_key: str | None = None
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 16, 32])
    input_len: int = 500
    output_len: int = 256
    requests_per_level: int | None = None
    warmup: int = 2
    seed: int = 0
    timeout: float = 600.0
    chat: bool = False
    quiet: bool = False
    detailed: bool = False  # per-request records in bench-c<N>.json ("requests")
    progress_interval: float = 2.0
    temperature: float | None = None  # None: the server's default, as vllm bench serve
    goodput: dict[str, float] | None = None  # SLOs in ms: {"ttft": 500, "tpot": 50, ...}
    scrape_metrics: bool = True  # poll /metrics (in a thread) for KV-cache and queue peaks
    # Called once in a thread after the prompts are built and the warm-up is done, just before
    # the first timed request (`--gateway-stats` takes its "before" snapshot there).
    before_timed: Callable[[], None] | None = None


def requests_for(level: int, fixed: int | None) -> int:
    """Default: 4 requests per client, at least 16, so each client closes the loop a few times."""
    return fixed if fixed else max(4 * level, 16)


def load_problem(concurrency: list[int], requests_per_level: int | None, warmup: int,
                 input_len: int) -> str | None:
    """Why this load cannot run (the prompts would not fit in memory), or None."""
    prompts = warmup + sum(requests_for(c, requests_per_level) for c in concurrency)
    if prompts * input_len > MAX_PROMPT_TOKENS:
        return (f"{prompts:,} prompts of {input_len:,} tokens ({prompts * input_len:,} tokens) "
                f"would be built before the first request; the limit is {MAX_PROMPT_TOKENS:,}: "
                "lower --requests-per-level, --concurrency or --input-len")
    return None


def _say(opts: BenchOptions, message: str) -> None:
    if not opts.quiet:
        print(f"onecat bench: {message}", file=sys.stderr, flush=True)


async def _probe(client: Client, opts: BenchOptions) -> str:
    """Reachability, API key and model name, from GET /v1/models."""
    url = public_url(opts.url)
    try:
        status, body = await asyncio.wait_for(client.get_json("/v1/models"),
                                              min(opts.timeout, PROBE_TIMEOUT_S))
    except (TimeoutError, HttpError, OSError) as exc:
        reason = exc.reason if isinstance(exc, HttpError) else "timeout"
        raise BenchError(f"cannot reach {url} ({reason}); check the URL and that the "
                         "server is running (systemctl status vllm on the node)") from None
    if status == 401:
        raise BenchError(f"{url} wants an API key: pass --api-key-file with the key")
    if status != 200 or not isinstance(body, dict):
        raise BenchError(f"{url}/v1/models answered HTTP {status}; is this a vLLM server?")
    data = body.get("data")
    if not isinstance(data, list):
        raise BenchError(f"{url}/v1/models answered without a list of models (data: "
                         f"{str(data)[:40]!r}); is this an OpenAI-compatible server?")
    served = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)
              and m["id"]]
    if opts.model:
        if opts.model not in served:
            raise BenchError(f"model {opts.model!r} is not served by {url}; it serves "
                             f"{served}: fix --model")
        return opts.model
    if not served:
        raise BenchError(f"{url}/v1/models lists no model")
    return served[0]


class _Tokenizer:
    """Counts tokens through the server's POST /tokenize over a few pooled connections."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.client = target.client(TOKENIZE_CONNECTIONS)

    def _body(self, text: str) -> dict:
        if self.target.chat:
            return {"model": self.target.model, "messages": [{"role": "user", "content": text}]}
        return {"model": self.target.model, "prompt": text}

    async def count(self, text: str) -> int:
        try:
            status, body = await asyncio.wait_for(
                self.client.post_json("/tokenize", self._body(text)), PROBE_TIMEOUT_S)
        except (TimeoutError, HttpError, OSError):
            raise LookupError("tokenize failed") from None
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("count"), int):
            raise LookupError(f"tokenize answered HTTP {status}")
        return body["count"]

    async def close(self) -> None:
        await self.client.close()


async def _build_prompts(target: Target, opts: BenchOptions, total: int) -> tuple[list[str], str]:
    """All prompts of the run, built before any timing starts."""
    tokenizer = _Tokenizer(target)
    try:
        try:
            await tokenizer.count("hello")
        except LookupError:
            _say(opts, "the server has no /tokenize: estimating prompt lengths "
                       "(real lengths are reported from usage.prompt_tokens)")
            return [prompts.estimate_text(opts.seed, i, opts.input_len)
                    for i in range(total)], "estimate"

        async def one(i: int) -> str:
            try:
                text, _ = await prompts.exact_text(opts.seed, i, opts.input_len, tokenizer.count)
                return text
            except LookupError:
                return prompts.estimate_text(opts.seed, i, opts.input_len)

        _say(opts, f"building {total} prompts of {opts.input_len} tokens with /tokenize")
        return list(await asyncio.gather(*(one(i) for i in range(total)))), "tokenize"
    finally:
        await tokenizer.close()


async def _progress(opts: BenchOptions, level: int, total: int, live: LiveCounters,
                    stop: asyncio.Event) -> None:
    last_chunks, last_t = 0, time.perf_counter()
    while True:
        try:
            await asyncio.wait_for(stop.wait(), opts.progress_interval)
            return
        except TimeoutError:
            pass
        now = time.perf_counter()
        rate = (live.chunks - last_chunks) / max(now - last_t, 1e-9)
        last_chunks, last_t = live.chunks, now
        _say(opts, f"c={level}: {live.done + live.failed}/{total} done, {live.failed} failed, "
                   f"{rate:.0f} tok/s")


async def run_bench(opts: BenchOptions, memory_reader: MemoryReader | None = None,
                    clock: Callable[[], float] = time.process_time) -> list[dict]:
    """Run every level, write DIR/bench-c<N>.json as each ends and the summaries at the end."""
    problem = load_problem(opts.concurrency, opts.requests_per_level, opts.warmup,
                           opts.input_len)
    if problem:
        raise BenchError(problem)
    endpoint = Endpoint.parse(opts.url)
    headers = {"authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    metrics_headers = ({"authorization": f"Bearer {opts.metrics_key}"} if opts.metrics_key
                       else headers)
    probe = Client(endpoint, headers, 1)
    try:
        model = await _probe(probe, opts)
    finally:
        await probe.close()
    target = Target(endpoint, model, opts.chat, headers, opts.timeout, opts.temperature)
    sizes = [requests_for(c, opts.requests_per_level) for c in opts.concurrency]
    all_prompts, source = await _build_prompts(target, opts, opts.warmup + sum(sizes))

    live = LiveCounters()
    warm = target.client()
    try:
        for i in range(opts.warmup):
            result = await send(warm, target, all_prompts[i],
                                min(opts.output_len, WARMUP_MAX_TOKENS), live,
                                f"onecat-bench-{opts.seed}-warmup-{i}")
            if not result.ok:
                _say(opts, f"warmup request {i + 1} failed ({result.error})")
    finally:
        await warm.close()
    if opts.before_timed is not None:
        await asyncio.to_thread(opts.before_timed)

    opts.out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    run_info = {"url": public_url(opts.url), "model": model, "endpoint": target.path,
                "input_len": opts.input_len, "output_len": opts.output_len,
                "input_len_source": source, "seed": opts.seed, "warmup": opts.warmup,
                "timeout_s": opts.timeout, "started_at": started, "onecat_version": __version__,
                "temperature": opts.temperature,
                "sampling": ("server default (no temperature sent, as vllm bench serve)"
                             if opts.temperature is None else
                             f"temperature {opts.temperature:g}" + (
                                 " (greedy: 1Cat serves it through a top-1 lm_head shortcut, "
                                 "so TPOT is not comparable with sampled runs)"
                                 if opts.temperature == 0 else "")),
                "goodput_slos_ms": opts.goodput}
    levels: list[dict] = []
    offset = opts.warmup
    sampler = MemorySampler(memory_reader)
    for level, size in zip(opts.concurrency, sizes, strict=True):
        level_prompts = all_prompts[offset:offset + size]
        offset += size
        _say(opts, f"level c={level}: {size} requests, {opts.input_len} in / "
                   f"{opts.output_len} out")
        live = LiveCounters()
        # /metrics is read in a thread with blocking I/O: off the loop that stamps chunks.
        fetch = http_metrics_fetch(endpoint.host, endpoint.port, endpoint.tls,
                                   endpoint.base_path, metrics_headers)
        scraper = MetricsScraper(fetch)
        stop = asyncio.Event()
        side_tasks = []
        if not opts.quiet:
            side_tasks.append(asyncio.ensure_future(_progress(opts, level, size, live, stop)))
        cpu_before = clock()
        sampler.start()
        if opts.scrape_metrics:
            scraper.start()
        ids = [f"onecat-bench-{opts.seed}-{i}" for i in range(offset - size, offset)]
        run = await run_level(target, level_prompts, level, opts.output_len, live, ids)
        memory = sampler.stop()
        scraper.stop()
        cpu = clock() - cpu_before
        stop.set()
        await asyncio.gather(*side_tasks)
        fetch.close()  # type: ignore[attr-defined]
        result = level_metrics(run.results, level, run.duration, opts.goodput)
        result.update(scraper.peaks)
        result["warnings"] = [*result["warnings"], *queue_warnings(level, scraper.peaks)]
        result["metrics_scrapes"] = scraper.scrapes
        result["gpu_memory_used_mib"] = memory
        result["client_cpu_s"] = cpu
        result.update(run_info)
        if opts.detailed:
            result["level_started_monotonic_s"] = run.started
            result["requests"] = [r.detail(run.started) for r in run.results]
        levels.append(result)
        output.write_level(opts.out, result)
        _say(opts, output.level_line(result))
        for warning in result["warnings"]:
            _say(opts, f"c={level}: warning: {warning}")
    output.write_summary(opts.out, run_info, levels)
    return levels
