"""Per-level result: request records in, `vllm bench serve`-compatible dict out (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from onecat.bench.runner import RequestResult
from onecat.bench.stats import summarize

METRICS = ("ttft", "tpot", "itl", "e2el")


def level_metrics(results: Sequence[RequestResult], concurrency: int,
                  duration: float) -> dict:
    """Throughput over the level's wall time; latency statistics over successful requests.

    TPOT = (E2E - TTFT) / (output_tokens - 1), only for requests with more than
    one output token, as vLLM does; ITL pools every gap of every request.
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
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "mean_input_tokens": total_in / len(good) if good else None,
        "mean_output_tokens": total_out / len(good) if good else None,
    }
    for name, values in zip(METRICS, (ttfts, tpots, itls, e2els), strict=True):
        out.update(summarize(name, values))
    return out
