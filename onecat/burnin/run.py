"""One burn-in on this node: idle answers, then load while NVML is sampled every second and the
fixed prompts are asked again and again, then the verdict and burnin.json."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from onecat.answers.likelihood import FIRST_MAX_NLL, REL_TOLERANCE
from onecat.answers.probe import (
    ProbeResult,
    answers,
    likelihoods,
    probe,
    score,
    stored_likelihoods,
)
from onecat.answers.prompts import PromptSet
from onecat.health.nvml import NvmlUnavailable, gather

from .judge import Asked, answer_findings, burnin_verdict, gpu_findings, load_findings, series_row
from .load import Load


@dataclass(frozen=True)
class Plan:
    url: str
    model: str
    api_key: str
    seconds: float
    concurrency: int
    max_tokens: int
    prompts: PromptSet
    # The canary's references for the same image, model revision and engine arguments
    # ({"likelihood": {text: NLL}}), None for the first node to burn in with them.
    references: dict[str, Any] | None
    ask_every_s: float = 10.0
    sample_every_s: float = 1.0
    kernel_log_path: str | None = None
    tolerance: float = REL_TOLERANCE
    # With no canary reference, the most an idle likelihood may be: it becomes the fleet's.
    first_max_nll: float = FIRST_MAX_NLL


def _ask_all(plan: Plan, likelihood: dict[str, float]) -> list[ProbeResult]:
    """Every prompt (judged on its own) and every reference text (against `likelihood`)."""
    results = [probe(plan.url, plan.model, p, api_key=plan.api_key, timeout_s=120)
               for p in plan.prompts.prompts]
    return results + [score(plan.url, plan.model, text, likelihood.get(text), plan.api_key,
                            plan.tolerance, timeout_s=120, first_max=plan.first_max_nll)
                      for text in (plan.prompts.score_texts if plan.tolerance > 0 else ())]


def burn_in(nvml: Any, plan: Plan) -> dict[str, Any]:
    """Run the burn-in; return burnin.json's document. Raises what gather raises.

    NVML stays initialised for the whole run (each gather's init and shutdown then only
    count references): starting NVML costs up to seconds without persistence mode."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise NvmlUnavailable(getattr(error, "value", None), str(error)) from error
    try:
        return _burn_in(nvml, plan)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _burn_in(nvml: Any, plan: Plan) -> dict[str, Any]:
    first = gather(nvml, check_xid=True, kernel_log_path=plan.kernel_log_path)
    idle = _ask_all(plan, stored_likelihoods(plan.references))
    # Under load the likelihoods are judged against this node's own idle ones.
    own = likelihoods(idle)
    readings, series = [first], [series_row(first, 0.0)]
    asked: list[Asked] = []
    started = time.monotonic()
    load = Load(
        plan.url,
        plan.model,
        plan.api_key,
        plan.concurrency,
        plan.max_tokens,
        "Write a long story about a lighthouse keeper",
    ).start()
    next_ask = started + min(plan.ask_every_s, plan.seconds / 2)
    try:
        while (now := time.monotonic()) < started + plan.seconds:
            reading = gather(nvml, check_xid=False)
            readings.append(reading)
            series.append(series_row(reading, now - started))
            if now >= next_ask:
                asked += [Asked(now - started, r) for r in _ask_all(plan, own)]
                next_ask = now + plan.ask_every_s
            time.sleep(max(0.0, plan.sample_every_s - (time.monotonic() - now)))
    finally:
        tally = load.stop()
    last = gather(nvml, check_xid=True, kernel_log_path=plan.kernel_log_path)
    # The last reading has the Xid events: compare it with the first (the samples skip the
    # kernel log), and every sample with the one before it; the samples' times give the
    # sustained-slowdown rule its minutes.
    times = [row["t"] for row in series] + [time.monotonic() - started]
    findings = gpu_findings([*readings, last], times=times) + [
        f for f in gpu_findings([first, last]) if f.code == "xid"
    ]
    findings += answer_findings(idle, asked)
    findings += load_findings(tally)
    result, admitted = burnin_verdict(findings)
    return {
        "verdict": result,
        "admitted": admitted,
        "seconds": round(time.monotonic() - started, 1),
        "concurrency": plan.concurrency,
        "load": {
            "completed": tally.completed,
            "failed": tally.failed,
            "errors": tally.errors,
            "output_tokens": tally.output_tokens,
            "output_tokens_per_s": round(tally.output_tokens / tally.seconds, 1)
            if tally.seconds
            else None,
        },
        "findings": [f.as_dict() for f in findings],
        "answers": {
            "idle": answers(idle),
            "under_load": [
                {
                    "prompt": a.result.prompt,
                    "at_s": round(a.at_s, 1),
                    "answer": a.result.answer,
                    "ok": a.result.ok,
                    "reason": a.result.reason,
                }
                for a in asked
            ],
        },
        "likelihood": {"idle": own, "tolerance": plan.tolerance},
        # What becomes the fleet's references for these bits when this node is the first to
        # pass with them (roles/burnin records it only for an admitted node).
        "references": {"likelihood": own},
        "series": [*series, series_row(last, time.monotonic() - started)],
    }
