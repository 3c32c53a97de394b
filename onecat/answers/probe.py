"""Judge a node's answers: the seed's pitfall 5.5 is a node that answers, but with garbage.

On a V100 the engine is not batch-invariant (vLLM's batch-invariant mode needs compute
capability >= 8.0: vllm-project/vllm docs/features/batch_invariance.md, "Hardware
Requirements"), so a greedy answer's tokens after the first few change with what else is in
flight: an answer is never compared with another answer. Three checks instead:

- **known answers** (prompts.py): each prompt may carry what a right answer contains
  ("The capital of France is => Paris");
- **degeneracy** (degenerate.py): runaway loops (partial collapse, a CJK loop, a loop cut
  mid-repeat) on the answer's characters and on the served model's tokens (`/tokenize`),
  random-token soup, not text;
- **likelihood** (likelihood.py): the node scores fixed reference texts through its own
  logprobs; their NLL must stay within the tolerance of the value recorded when the same image,
  model revision and engine arguments first passed, and under a ceiling always.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import likelihood
from .ask import MALFORMED_ANSWER, NO_ANSWER_IN_TIME, Malformed, request, smoke
from .degenerate import degenerate
from .prompts import ProbePrompt, PromptSet, missing

SCORE_PREFIX = "score: "

# What a probe's references are recorded for (serving.json's keys; roles/burnin keys the
# canary's the same way): the image, the model revision and path, the served name and the
# engine's arguments.
IDENTITY_KEYS = ("image_id", "model_revision", "model_path", "served_model_name",
                 "engine_args_sha256")


def references_identity(record: dict[str, Any]) -> str:
    """What a serving record's references are recorded for (IDENTITY_KEYS, joined)."""
    return "|".join(str(record.get(k) or "") for k in IDENTITY_KEYS)


@dataclass(frozen=True)
class ProbeVerdict:
    ok: bool
    reason: str


def garbage(text: str, tokens: Sequence[int] | None = None) -> str | None:
    """Why an answer is garbage, or None when it reads like text."""
    return degenerate(text, tokens)


def judge(answer: str, expect: Sequence[str] = (),
          tokens: Sequence[int] | None = None) -> ProbeVerdict:
    """One answer: degenerate, or without what a right answer contains, fails."""
    why = degenerate(answer, tokens) or missing(answer, tuple(expect))
    if why:
        return ProbeVerdict(False, why)
    return ProbeVerdict(True, "contains the right answer" if expect else "reads as text")


@dataclass(frozen=True)
class ProbeResult:
    prompt: str
    answer: str
    ok: bool
    reason: str
    seconds: float
    # False when the server gave no answer at all (down, or still loading after a restart).
    reached: bool = True
    # A likelihood check's NLL per token (nats); None for a prompt.
    nll: float | None = None
    # The server took the request and said nothing for the whole timeout (hung.py judges why).
    timed_out: bool = False


def tokenize(base_url: str, served_name: str, text: str, api_key: str = "",
             timeout_s: float = 30) -> list[int] | None:
    """The served model's tokens of `text` (vLLM's POST /tokenize), None when it cannot tell."""
    body = {"model": served_name, "prompt": text, "add_special_tokens": False}
    status, answer = request(f"{base_url}/tokenize", api_key, body, timeout_s)
    if status != 200 or isinstance(answer, Malformed) or not isinstance(answer, dict):
        return None
    tokens = answer.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return None
    return tokens


def probe(base_url: str, served_name: str, prompt: ProbePrompt | str, max_tokens: int = 32,
          api_key: str = "", timeout_s: float = 60) -> ProbeResult:
    """Ask the node's own server one fixed prompt, greedy, and judge the answer."""
    item = prompt if isinstance(prompt, ProbePrompt) else ProbePrompt(prompt)
    started = time.monotonic()
    _, reason, text = smoke(base_url, served_name, item.prompt, max_tokens, api_key, timeout_s)
    if not text and reason.startswith("the smoke completion failed"):
        # A server that answers malformed HTTP was reached and answers wrong: a fault the node
        # drains for (issue 26), not one still loading that the gateway's check takes out
        # (HAProxy checks /health, which may stay fine while completions are malformed).
        return ProbeResult(item.prompt, "", False, reason.replace("smoke completion", "probe"),
                           time.monotonic() - started, reached=MALFORMED_ANSWER in reason,
                           timed_out=NO_ANSWER_IN_TIME in reason)
    tokens = tokenize(base_url, served_name, text, api_key) if text.strip() else None
    verdict = judge(text, item.expect, tokens)
    return ProbeResult(item.prompt, text, verdict.ok, verdict.reason,
                       time.monotonic() - started)


def score(base_url: str, served_name: str, text: str, reference: float | None,
          api_key: str = "", relative: float = likelihood.REL_TOLERANCE,
          timeout_s: float = 60, first_max: float = likelihood.FIRST_MAX_NLL) -> ProbeResult:
    """Score one reference text on the node's server and judge its likelihood (with no
    reference yet, under `first_max` too: it would become one)."""
    started = time.monotonic()
    measured = likelihood.score(base_url, served_name, text, api_key, timeout_s)
    why = likelihood.judge(measured, reference, relative, first_max)
    shown = "" if measured.nll is None else f"{measured.nll:.4f}"
    return ProbeResult(SCORE_PREFIX + text, shown, why is None,
                       why or ("within the tolerance of the reference" if reference is not None
                               else "a language model's likelihood"),
                       time.monotonic() - started, reached=measured.reached, nll=measured.nll,
                       timed_out=measured.timed_out)


def as_set(prompts: PromptSet | Sequence[str | ProbePrompt]) -> PromptSet:
    if isinstance(prompts, PromptSet):
        return prompts
    return PromptSet(tuple(p if isinstance(p, ProbePrompt) else ProbePrompt(p) for p in prompts))


def ask_all(base_url: str, served_name: str, prompts: PromptSet | Sequence[str],
            references: dict[str, float], api_key: str = "",
            relative: float = likelihood.REL_TOLERANCE, timeout_s: float = 60,
            deadline_s: float | None = None,
            before_each: Callable[[], object] | None = None,
            first_max: float = likelihood.FIRST_MAX_NLL) -> list[ProbeResult]:
    """Every prompt, then every reference text: the probe's results, in that order. A
    tolerance of 0 scores no text (the likelihood check off: an engine that cannot echo
    logprobs).

    Each request waits at most `timeout_s`, the whole probe at most `deadline_s` (the look
    must end before its unit's timeout kills it). A request the server took and never answered
    ends the probe: an engine stuck on one request is stuck on the next, and asking again would
    only wait again. Questions not asked are left out of the results. `before_each` runs
    before each question (the watch reads the engine's /metrics there: hung.py)."""
    chosen = as_set(prompts)
    asks = [lambda t, p=p: probe(base_url, served_name, p, api_key=api_key, timeout_s=t)
            for p in chosen.prompts]
    asks += [lambda t, text=text: score(base_url, served_name, text, references.get(text),
                                        api_key, relative, timeout_s=t, first_max=first_max)
             for text in (chosen.score_texts if relative > 0 else ())]
    ends = None if deadline_s is None else time.monotonic() + deadline_s
    results: list[ProbeResult] = []
    for ask in asks:
        left = timeout_s if ends is None else min(timeout_s, ends - time.monotonic())
        if left < 1:
            break
        if before_each is not None:
            before_each()
        results.append(ask(left))
        if results[-1].timed_out:
            break
    return results


def likelihoods(results: Sequence[ProbeResult]) -> dict[str, float]:
    """{reference text: NLL} of the scored results."""
    return {r.prompt.removeprefix(SCORE_PREFIX): r.nll for r in results
            if r.prompt.startswith(SCORE_PREFIX) and r.nll is not None}


def answers(results: Sequence[ProbeResult]) -> dict[str, str]:
    """{prompt: answer} of the asked prompts (kept for operators; never compared)."""
    return {r.prompt: r.answer for r in results if not r.prompt.startswith(SCORE_PREFIX)}


def stored_likelihoods(stored: dict[str, Any] | None) -> dict[str, float]:
    values = (stored or {}).get("likelihood")
    if not isinstance(values, dict):
        return {}
    return {str(k): float(v) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}
