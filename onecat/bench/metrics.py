"""Per-level result: request records in, `vllm bench serve`-compatible dict out (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from onecat.bench.runner import RequestResult
from onecat.bench.stats import summarize

METRICS = ("ttft", "tpot", "itl", "e2el")


GOODPUT_METRICS = ("ttft", "tpot", "e2el")
# Fewer completed requests than this and a per-request p99 is the largest value, interpolated:
# numpy's linear percentile over n values only separates p99 from the maximum when n >= 100.
MIN_REQUESTS_FOR_P99 = 100


def parse_goodput(pairs: Sequence[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> {"ttft": 500.0, "tpot": 50.0} (milliseconds), as
    vllm/benchmarks/serve.py parse_goodput/check_goodput_args (1145-1180) accept them."""
    slos: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not sep or number is None:
            raise ValueError(f"--goodput {pair!r}: give KEY:MILLISECONDS, e.g. ttft:500")
        if name not in GOODPUT_METRICS:
            raise ValueError(f"--goodput {pair!r}: the metric must be one of "
                             f"{', '.join(GOODPUT_METRICS)}")
        if number < 0:
            raise ValueError(f"--goodput {pair!r}: the value must be non-negative")
        slos[name] = number
    return slos


def _good(result: RequestResult, slos: dict[str, float]) -> bool:
    """vllm/benchmarks/serve.py:458-496: TPOT counts as 0 for one-token outputs; a request is
    good when every given SLO is >= its value (SLOs in ms, values in s)."""
    tpot = 0.0
    if result.output_tokens > 1 and result.latency is not None and result.ttft is not None:
        tpot = (result.latency - result.ttft) / (result.output_tokens - 1)
    values = {"ttft": result.ttft, "tpot": tpot, "e2el": result.latency}
    return all(values[name] is not None and slo / 1000 >= values[name]
               for name, slo in slos.items())


def level_warnings(completed: int) -> list[str]:
    if 0 < completed < MIN_REQUESTS_FOR_P99:
        return [f"p99 of TTFT, TPOT and E2E over {completed} requests is (nearly) the slowest "
                f"request, not a 99th percentile: use --requests-per-level "
                f"{MIN_REQUESTS_FOR_P99} or more when the tail matters (ITL p99 pools every "
                "gap and is fine)"]
    return []


def queue_warnings(concurrency: int, peaks: dict[str, Any]) -> list[str]:
    """A level whose requests waited at the server measures its queue, not its GPUs: vLLM runs
    at most --max-num-seqs requests (and as many as the KV cache holds) and queues the rest."""
    waiting, running = peaks.get("num_requests_waiting_max"), peaks.get("num_requests_running_max")
    if not isinstance(waiting, int | float) or waiting < 1:
        return []
    ran = f"; at most {running:g} ran at once" if isinstance(running, int | float) else ""
    return [f"up to {waiting:g} of {concurrency} requests waited at the server (vLLM's "
            f"num_requests_waiting){ran}: this level's TTFT includes queueing behind "
            "--max-num-seqs or a full KV cache, so it measures the queue, not the GPUs (see "
            "'max-seqs' in onecat plan)"]


def level_metrics(results: Sequence[RequestResult], concurrency: int,
                  duration: float, goodput: dict[str, float] | None = None) -> dict:
    """Throughput over the level's wall time; latency statistics over successful requests.

    TPOT = (E2E - TTFT) / (output_tokens - 1), only for requests with more than
    one output token, as vLLM does; ITL pools every gap of every request.
    ``request_goodput`` is null without SLOs, as in vLLM's JSON.
    """
    good = [r for r in results if r.ok]
    errors = Counter(r.error or "unknown" for r in results if not r.ok)
    total_in = sum(r.prompt_tokens for r in good)
    total_out = sum(r.output_tokens for r in good)
    ttfts = [r.ttft for r in good if r.ttft is not None]
    e2els = [r.latency for r in good if r.latency is not None]
    tpots = [
        (r.latency - r.ttft) / (r.output_tokens - 1)
        for r in good
        if r.latency is not None and r.ttft is not None and r.output_tokens > 1
    ]
    itls = [gap for r in good for gap in r.itl]
    per_s = (lambda n: n / duration) if duration > 0 else (lambda n: None)
    out: dict = {
        "max_concurrency": concurrency,
        "num_requests": len(results),
        "completed": len(good),
        "failed": len(results) - len(good),
        "errors": dict(sorted(errors.items())),
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(good)),
        "request_goodput": per_s(sum(1 for r in good if _good(r, goodput)))
        if goodput else None,
        "goodput_slos_ms": dict(goodput) if goodput else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "mean_input_tokens": total_in / len(good) if good else None,
        "mean_output_tokens": total_out / len(good) if good else None,
        "warnings": level_warnings(len(good)),
    }
    for name, values in zip(METRICS, (ttfts, tpots, itls, e2els), strict=True):
        out.update(summarize(name, values))
    return out
