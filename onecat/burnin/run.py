"""One burn-in on this node: idle answers, then load while NVML is sampled every second and the
fixed prompts are asked again and again, then the verdict and burnin.json."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from onecat.health.nvml import NvmlUnavailable, gather
from onecat.serve.gate import smoke

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
    prompts: list[str]
    references: dict[str, str] | None
    ask_every_s: float = 10.0
    sample_every_s: float = 1.0
    kernel_log_path: str | None = None


def _ask(plan: Plan, prompt: str, at_s: float) -> Asked:
    _, reason, text = smoke(plan.url, plan.model, prompt, 32, plan.api_key, timeout_s=120)
    failed = not text and reason.startswith("the smoke completion failed")
    return Asked(prompt, text, at_s, reason if failed else "")


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
    idle = {p: a.answer for p in plan.prompts if not (a := _ask(plan, p, 0.0)).error}
    readings, series, asked = [first], [series_row(first, 0.0)], []
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
                asked += [_ask(plan, p, now - started) for p in plan.prompts]
                next_ask = now + plan.ask_every_s
            time.sleep(max(0.0, plan.sample_every_s - (time.monotonic() - now)))
    finally:
        tally = load.stop()
    last = gather(nvml, check_xid=True, kernel_log_path=plan.kernel_log_path)
    # The last reading has the Xid events: compare it with the first (the samples skip the
    # kernel log), and every sample with the one before it.
    findings = gpu_findings([*readings, last]) + [
        f for f in gpu_findings([first, last]) if f.code == "xid"
    ]
    findings += answer_findings(idle, asked, plan.references)
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
            "idle": idle,
            "under_load": [
                {
                    "prompt": a.prompt,
                    "at_s": round(a.at_s, 1),
                    "same": not a.error and a.answer == idle.get(a.prompt),
                    "error": a.error or None,
                }
                for a in asked
            ],
        },
        "series": [*series, series_row(last, time.monotonic() - started)],
    }
