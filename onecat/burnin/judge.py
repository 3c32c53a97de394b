"""The burn-in's verdict: what arrived on the GPUs while the node was under load, and whether
its answers held.

Fails (unhealthy) on what the watch fails (its rules, applied between every two samples: the
health stage's own rules on each sample's state, so an uncorrectable error since the driver
loaded, a pending retirement or a lost GPU; a fatal Xid; a GPU gone; hardware slowdown
sustained by gpud's rule, onecat/watch/throttle.py; one sample of slowdown only warns), answers
that degenerate or lack what a right answer contains (idle or under load), a likelihood outside
the tolerance of the canary's (idle) or of the node's own idle one (under load), and a server
that fails requests under load. Answers are never compared with answers (onecat/answers/probe.py:
the engine is not batch-invariant on a V100).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onecat.answers.probe import SCORE_PREFIX, ProbeResult
from onecat.health.judge import ERROR
from onecat.watch import throttle
from onecat.watch.deltas import (
    CONDITIONS,
    UNHEALTHY,
    Finding,
    Limits,
    compare,
    verdict,
    watch_thresholds,
)

from .load import LoadTally

# Requests that may fail under load before the node fails (timeouts at saturation happen).
MAX_FAILED_SHARE = 0.01


@dataclass(frozen=True)
class Asked:
    """One fixed prompt asked, or one reference text scored, and how it was judged."""

    at_s: float
    result: ProbeResult


def series_row(readings: dict[str, Any], at_s: float) -> dict[str, Any]:
    """One sample for the time series in burnin.json (and the report's plot)."""
    gpus = []
    for gpu in readings.get("gpus") or []:
        ecc = (gpu.get("ecc") or {}).get("volatile") or {}
        gpus.append(
            {
                "index": gpu.get("index"),
                "temperature_c": gpu.get("temperature_c"),
                "power_draw_w": gpu.get("power_draw_w"),
                "power_limit_w": gpu.get("power_limit_w"),
                "throttle_reasons": gpu.get("throttle_reasons"),
                "ecc_corrected": ecc.get("corrected"),
                "ecc_uncorrected": ecc.get("uncorrected"),
                "retirement_pending": (gpu.get("retired_pages") or {}).get("pending"),
            }
        )
    return {"t": round(at_s, 1), "gpus": gpus}


def gpu_findings(readings: Sequence[dict[str, Any]], limits: Limits | None = None,
                 times: Sequence[float] | None = None) -> list[Finding]:
    """The watch's rules between every two consecutive readings, each finding once; with
    `times` (seconds, one per reading) also the sustained slowdown rule over the samples. The
    GPU count the first reading saw is the one expected (a card lost under load fails)."""
    seen: dict[tuple[object, ...], Finding] = {}
    first = readings[0] if readings else {}
    expected = first.get("gpu_count") or len(first.get("gpus") or []) or None
    thresholds = watch_thresholds(expected)
    history: dict[str, Any] = {}
    for at, reading in zip(times or [], readings, strict=False):
        history = throttle.record(history, reading, at)
        for finding in throttle.findings(history, reading, at):
            seen.setdefault((finding.code, finding.gpu, finding.message.split(" in ")[0]),
                            finding)
    for step, (before, now) in enumerate(itertools.pairwise(readings)):
        for finding in compare(before, now, limits, thresholds):
            # A state (a throttle reason, the heat, a pending retirement) repeats in every
            # sample: keep its first.
            # A counter that rises twice is two events.
            if finding.code == "temperature" or finding.code in CONDITIONS:
                key: tuple[object, ...] = (finding.code, finding.gpu)
            elif finding.code == "throttle":
                key = (finding.code, finding.gpu, finding.message)
            else:
                key = (finding.code, finding.gpu, finding.message, step)
            seen.setdefault(key, finding)
    return list(seen.values())


def answer_findings(idle: Sequence[ProbeResult], asked: Sequence[Asked]) -> list[Finding]:
    """Idle answers and likelihoods (the canary's references judge the likelihoods), and
    those under load (each answer on its own: known answer, degeneracy; each likelihood
    against the node's own idle one). No answer is compared with another: under load a
    non-batch-invariant engine gives other tokens after the first few."""
    findings = [
        Finding(ERROR, "answers", None, f"idle, {_what(r)}: {r.reason}")
        for r in idle if not r.ok
    ]
    bad = [a for a in asked if not a.result.ok]
    if bad:
        first = bad[0]
        findings.append(Finding(
            ERROR, "answers", None,
            f"{len(bad)} of {len(asked)} answers and likelihoods under load failed; first at "
            f"{first.at_s:.0f} s, {_what(first.result)}: {first.result.reason}"))
    return findings


def _what(result: ProbeResult) -> str:
    if result.prompt.startswith(SCORE_PREFIX):
        return f"the likelihood of {result.prompt.removeprefix(SCORE_PREFIX)[:30]!r}"
    return f"the answer to {result.prompt[:40]!r}"


def load_findings(tally: LoadTally) -> list[Finding]:
    total = tally.completed + tally.failed
    if tally.completed == 0:
        return [
            Finding(
                ERROR,
                "load",
                None,
                f"the server completed no request under load ({tally.failed} failed: "
                f"{tally.errors})",
            )
        ]
    if tally.failed / total > MAX_FAILED_SHARE:
        return [
            Finding(
                ERROR,
                "load",
                None,
                f"{tally.failed} of {total} requests failed under load "
                f"(more than {MAX_FAILED_SHARE:.0%}): {tally.errors}",
            )
        ]
    return []


def burnin_verdict(findings: Sequence[Finding]) -> tuple[str, bool]:
    """(verdict, admitted): unhealthy is refused; degraded (heat, corrected errors) is admitted."""
    result = verdict(list(findings))
    return result, result != UNHEALTHY
