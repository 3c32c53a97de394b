"""Judge a quality probe's answer: the seed's pitfall 5.5 is a node that answers, but with garbage.

The probe sends a handful of fixed prompts, greedy (temperature 0), to the node's own server.
An answer fails when it is empty, is not text, has collapsed into repetition (a degrading
card's classic symptom: "the the the the"), or differs from the reference answer recorded
for the same model, engine and image when the node passed its gate (greedy decoding on the
same bits gives the same tokens).
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass

from onecat.serve.gate import repeated_token, smoke

# Long enough to judge; shorter answers are only checked for emptiness and text.
MIN_WORDS = 12
# One word repeated this many times in a row is a collapse, whatever the rest says.
MAX_RUN = 6
# Fewer distinct words than this share of all words is a loop ("a b c a b c a b c ...").
MIN_DISTINCT_SHARE = 0.2
# Printable share of the characters below which the answer is not text (control bytes,
# replacement characters from broken detokenisation).
MIN_PRINTABLE_SHARE = 0.9


@dataclass(frozen=True)
class ProbeVerdict:
    ok: bool
    reason: str


def _printable_share(text: str) -> float:
    good = sum(1 for ch in text
               if ch in "\n\t" or (ch != "\ufffd" and unicodedata.category(ch)[0] != "C"))
    return good / len(text) if text else 0.0


def _longest_run(words: list[str]) -> tuple[str, int]:
    best, best_len, run = "", 0, 0
    for i, word in enumerate(words):
        run = run + 1 if i and word == words[i - 1] else 1
        if run > best_len:
            best, best_len = word, run
    return best, best_len


def garbage(text: str) -> str | None:
    """Why an answer is garbage, or None when it reads like text."""
    if not text.strip():
        return "empty answer"
    share = _printable_share(text)
    if share < MIN_PRINTABLE_SHARE:
        return f"not text: only {share:.0%} of its characters are printable"
    piece = repeated_token(text)
    if piece is not None:
        return f"collapsed into repetition: one token repeated ({piece!r})"
    words = text.lower().split()
    word, run = _longest_run(words)
    if run >= MAX_RUN:
        return f"collapsed into repetition: {word!r} {run} times in a row"
    if len(words) >= MIN_WORDS and len(set(words)) / len(words) < MIN_DISTINCT_SHARE:
        return (f"collapsed into repetition: {len(set(words))} distinct words in "
                f"{len(words)}")
    return None


def judge(answer: str, reference: str | None) -> ProbeVerdict:
    """A probe answer against its reference (None: no reference yet, only garbage counts)."""
    why = garbage(answer)
    if why:
        return ProbeVerdict(False, why)
    if reference is not None and " ".join(answer.split()) != " ".join(reference.split()):
        return ProbeVerdict(False, f"differs from the reference answer: {answer[:60]!r} "
                                   f"instead of {reference[:60]!r}")
    return ProbeVerdict(True, "matches the reference" if reference is not None else "reads as text")


@dataclass(frozen=True)
class ProbeResult:
    prompt: str
    answer: str
    ok: bool
    reason: str
    seconds: float
    # False when the server gave no answer at all (down, or still loading after a restart).
    reached: bool = True


def probe(base_url: str, served_name: str, prompt: str, reference: str | None,
          max_tokens: int = 32, api_key: str = "", timeout_s: float = 60) -> ProbeResult:
    """Ask the node's own server one fixed prompt, greedy, and judge the answer."""
    started = time.monotonic()
    _, reason, text = smoke(base_url, served_name, prompt, max_tokens, api_key, timeout_s)
    seconds = time.monotonic() - started
    if not text and reason.startswith("the smoke completion failed"):
        return ProbeResult(prompt, "", False, reason.replace("smoke completion", "probe"),
                           seconds, reached=False)
    verdict = judge(text, reference)
    return ProbeResult(prompt, text, verdict.ok, verdict.reason, seconds)
