"""Is the engine stuck? A probe that got no answer in time, judged by the engine's own /metrics.

vLLM's `/health` reports an engine core that died, not one that is stuck: the API server
process answers it (and `/metrics`) while the engine core's busy loop waits forever in a
collective or a CUDA call (vllm-project/vllm PR #36451, "alive-but-hung EngineCore not being
detected by /health", still open; issue #39863: "Running: 0 reqs, Waiting: 3 reqs", 0 tokens/s,
/health 200). HAProxy keeps sending such a node requests that hang for `timeout server`.

The evidence is the probe's own request, accepted and unanswered for its whole timeout, while
the engine's generation counter (`vllm:generation_tokens_total`, advanced every engine step)
did not move: nothing on the node produced a token meanwhile, so it serves nobody. The
running and waiting gauges are reported, not required: in a wedge they may read 0 when the
hang landed before their update (vllm PR #46811's incident data). A slow but live engine
(a loaded node, a long prefill beside decoding requests) moves the counter and stays a
warning; an engine whose /metrics cannot be read gives no evidence either way.

    activity("vllm:generation_tokens_total{model_name=\\"m\\"} 40.0")  -> Activity(40.0, 0, 0)
    stuck(Activity(40, 0, 0), Activity(40, 1, 0), 60)                 -> "the engine accepted ..."
    stuck(Activity(40, 0, 0), Activity(52, 1, 0), 60)                 -> None
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATED = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True)
class Activity:
    """What the engine's /metrics says it is doing: tokens generated since it started (summed
    over label sets: one per model and engine), requests running and waiting."""

    generated: float
    running: float
    waiting: float


def samples(text: str, name: str) -> list[float]:
    """Every sample of the metric `name` in Prometheus text (one per label set); a name that
    only starts with it is another metric."""
    values = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.strip().rpartition(" ")
        if head.split("{", 1)[0].strip() != name:
            continue
        try:
            values.append(float(value))
        except ValueError:
            continue
    return values


def activity(text: str | None) -> Activity | None:
    """The engine's activity from its Prometheus text; None when the page has no generation
    counter (not vLLM's, or not read)."""
    if not text:
        return None
    generated = samples(text, GENERATED)
    if not generated:
        return None
    return Activity(sum(generated), sum(samples(text, RUNNING)), sum(samples(text, WAITING)))


def stuck(before: Activity | None, after: Activity | None, waited_s: float) -> str | None:
    """Why the engine is stuck, or None: a probe went unanswered for `waited_s` seconds and the
    generation counter read before and after it did not move."""
    if before is None or after is None or after.generated > before.generated:
        return None
    if after.generated < before.generated:
        return None  # the engine restarted meanwhile: a new counter, no evidence
    return (f"the engine accepted the probe and answered nothing in {waited_s:.0f} s while it "
            f"generated no token ({after.running:.0f} request(s) running, {after.waiting:.0f} "
            "waiting): a stuck engine, which /health still calls healthy")
