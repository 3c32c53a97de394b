"""The burn-in's verdict: what arrived on the GPUs while the node was under load, and whether
its answers held.

Fails (unhealthy) on any new uncorrectable ECC error or pending retirement, any new Xid, HW
slowdown or power-brake throttling, a GPU gone (the watch's delta rules, applied between
every two samples), answers under load that differ from the node's own idle answers or from
the canary's, answers that degenerate, and a server that fails requests under load.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onecat.watch.deltas import CONDITIONS, UNHEALTHY, Finding, Limits, compare, verdict
from onecat.watch.probe import judge as judge_answer

from .load import LoadTally

# Requests that may fail under load before the node fails (timeouts at saturation happen).
MAX_FAILED_SHARE = 0.01


@dataclass(frozen=True)
class Asked:
    """One fixed prompt asked under load, with the answer it got (or why it got none)."""

    prompt: str
    answer: str
    at_s: float
    error: str = ""


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


def gpu_findings(readings: Sequence[dict[str, Any]], limits: Limits | None = None) -> list[Finding]:
    """The watch's rules between every two consecutive readings, each finding once."""
    seen: dict[tuple[object, ...], Finding] = {}
    for step, (before, now) in enumerate(itertools.pairwise(readings)):
        for finding in compare(before, now, limits):
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


def answer_findings(
    idle: dict[str, str], asked: Sequence[Asked], references: dict[str, str] | None
) -> list[Finding]:
    """Idle answers against the canary's; answers under load against the idle ones."""
    findings: list[Finding] = []
    for prompt, answer in sorted(idle.items()):
        reference = (references or {}).get(prompt)
        result = judge_answer(answer, reference)
        if not result.ok:
            whose = "the canary's answer" if reference is not None else "text"
            findings.append(
                Finding(
                    UNHEALTHY,
                    "answers",
                    None,
                    f"idle answer to {prompt[:40]!r} fails against {whose}: {result.reason}",
                )
            )
    bad = [
        (a, a.error or judge_answer(a.answer, idle.get(a.prompt)).reason)
        for a in asked
        if a.error or not judge_answer(a.answer, idle.get(a.prompt)).ok
    ]
    if bad:
        first, why = bad[0]
        findings.append(
            Finding(
                UNHEALTHY,
                "answers",
                None,
                f"{len(bad)} of {len(asked)} answers under load failed; first "
                f"at {first.at_s:.0f} s to {first.prompt[:40]!r}: {why}",
            )
        )
    return findings


def load_findings(tally: LoadTally) -> list[Finding]:
    total = tally.completed + tally.failed
    if tally.completed == 0:
        return [
            Finding(
                UNHEALTHY,
                "load",
                None,
                f"the server completed no request under load ({tally.failed} failed: "
                f"{tally.errors})",
            )
        ]
    if tally.failed / total > MAX_FAILED_SHARE:
        return [
            Finding(
                UNHEALTHY,
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
