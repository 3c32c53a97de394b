"""The likelihood check: does the node's model still find plain text as likely as it did?

The node scores fixed reference texts through its own logprobs: one completions request per
text with `echo: true`, `logprobs: 0`, `max_tokens: 1` (vLLM returns the prompt's tokens with
their logprobs first, the first one None: vllm/entrypoints/openai/serving_completion.py,
request_output_to_completion_response and _create_completion_logprobs; logprobs are clamped
at -9999). The measure is the mean negative log-likelihood per prompt token (nats; the
perplexity is its exp).

A node fails when
- its NLL is not a number, or above MAX_NLL (10 nats a token: a perplexity of 22,000, near a
  uniform guess over a 32k vocabulary; a language model scores plain sentences in the single
  digits of nats, a broken kernel well above), whether or not a reference exists;
- a reference exists (recorded by the first look or burn-in that passed on the same image,
  model revision and engine arguments) and the NLL moved by more than REL_TOLERANCE (10 %) of
  it, or ABS_TOLERANCE nats, whichever is larger.

Why 10 %: batch noise moves a token's logprob by about a percent (the engine is not
batch-invariant on sm_70), and a mean over tens of tokens by less; on the stand-in engine
(1 % per token) the largest move of a text's NLL over 200 scorings in 20 burn-ins at c=32
and 400 in 200 watch looks under load was 0.62 % (benchmarks/answer_judging.py,
docs/answers.md).
A broken kernel moves perplexity by orders of magnitude (the stand-in gone bad: NLL 2.8 ->
14 nats, +400 %; a perplexity x10 is +2.3 nats, +80 % of 2.8). 10 % is ~16x the measured
spread and ~8x below a tenfold perplexity. UNCONFIRMED on real V100s: measure yours the same
way and set --likelihood-tolerance (0 turns the check off, for an engine that cannot echo
logprobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .ask import NO_ANSWER_IN_TIME, Malformed, TimedOut, request

REL_TOLERANCE = 0.10
ABS_TOLERANCE = 0.05
MAX_NLL = 10.0
# A likelihood with no reference yet becomes one (the watch's first look on new bits, the
# canary's burn-in for the fleet): it must be at most FIRST_MAX_NLL, so an engine broken from
# its first token never records itself as the truth (issue 47: soup at ~9 nats, a perplexity
# near 8,000, passes MAX_NLL). 6 nats is a perplexity of 403: the reference texts are plain,
# predictable sentences (SCORE_TEXTS) that a trained model scores at 1.5-3 nats (the stand-in:
# 2.6-2.8) and that even a unigram model of English, at a perplexity near 1,000 (6.9 nats),
# does worse than. Raise it (--first-max-nll) for a model that is weak on the texts.
FIRST_MAX_NLL = 6.0


@dataclass(frozen=True)
class Score:
    text: str
    nll: float | None  # mean negative log-likelihood per token, nats
    tokens: int = 0
    error: str = ""
    reached: bool = True  # False: nothing answered at all
    timed_out: bool = False  # the server took the request and said nothing in time


def _prompt_logprobs(answer: Any) -> tuple[list[Any], int | None]:
    choice = answer["choices"][0]
    values = list(choice["logprobs"]["token_logprobs"])
    prompt_tokens = (answer.get("usage") or {}).get("prompt_tokens")
    return values, prompt_tokens if isinstance(prompt_tokens, int) else None


def score(base_url: str, model: str, text: str, api_key: str = "",
          timeout_s: float = 60) -> Score:
    """Score one reference text on the node's server."""
    body = {"model": model, "prompt": text, "max_tokens": 1, "echo": True, "logprobs": 0,
            "temperature": 0}
    status, answer = request(f"{base_url}/v1/completions", api_key, body, timeout_s)
    if isinstance(answer, Malformed):
        # Reached, and answering wrong: a fault, as in probe.probe.
        return Score(text, None, error=f"a malformed HTTP answer ({answer})")
    if isinstance(answer, TimedOut):
        return Score(text, None, error=f"{NO_ANSWER_IN_TIME} ({timeout_s:.0f} s)", reached=False,
                     timed_out=True)
    if status == 0:
        return Score(text, None, error="no answer", reached=False)
    if status != 200 or not isinstance(answer, dict):
        return Score(text, None, error=f"HTTP {status}")
    try:
        values, prompt_tokens = _prompt_logprobs(answer)
    except (KeyError, IndexError, TypeError):
        return Score(text, None, error="the answer has no choices[0].logprobs.token_logprobs")
    # The prompt's tokens (the generated one after them is not part of the text).
    values = values[:prompt_tokens] if prompt_tokens is not None else values[:-1]
    numbers = [v for v in values[1:] if v is not None]
    if not numbers or not all(isinstance(v, int | float) for v in numbers):
        return Score(text, None, error="no logprobs for the text's tokens")
    nll = -sum(float(v) for v in numbers) / len(numbers)
    return Score(text, nll, len(numbers))


def tolerance(reference: float, relative: float = REL_TOLERANCE) -> float:
    return max(relative * abs(reference), ABS_TOLERANCE)


def judge(measured: Score, reference: float | None,
          relative: float = REL_TOLERANCE, first_max: float = FIRST_MAX_NLL) -> str | None:
    """Why the likelihood fails, or None. With no reference, the value would become one: it
    must be under `first_max` too."""
    where = f"reference text {measured.text[:30]!r}"
    if measured.nll is None:
        return f"cannot score the {where}: {measured.error}"
    nll = measured.nll
    if not math.isfinite(nll) or nll > MAX_NLL:
        return (f"the model finds plain text unlikely: NLL {nll:.2f} nats/token on the {where} "
                f"(perplexity {_ppl(nll)}), above the ceiling of {MAX_NLL:.0f}: a broken "
                "kernel or corrupted weights")
    if reference is None and nll > first_max:
        return (f"the model finds plain text unlikely: NLL {nll:.2f} nats/token on the {where} "
                f"(perplexity {_ppl(nll)}), above {first_max:g}, the most a first reference "
                "may be: a trained model scores these plain sentences at 1.5-3; an engine "
                "broken from its first token must not record itself as the truth (raise "
                "--first-max-nll for a model weak on these texts)")
    if reference is not None and abs(nll - reference) > tolerance(reference, relative):
        change = (nll - reference) / reference if reference else math.inf
        return (f"likelihood moved: NLL {nll:.3f} nats/token on the {where} instead of "
                f"{reference:.3f} ({change:+.1%}, tolerance {relative:.0%}; perplexity "
                f"{_ppl(nll)} instead of {_ppl(reference)})")
    return None


def _ppl(nll: float) -> str:
    if not math.isfinite(nll) or nll > 700:
        return "inf"
    value = math.exp(nll)
    return f"{value:.3g}" if value < 1e6 else f"{value:.1e}"
