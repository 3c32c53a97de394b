"""The probe's prompts, what a right answer to each contains, and the texts the node scores.

A prompts file is one prompt a line, `#` starts a comment line, blank lines are skipped (the
plain format `--probe-prompts` always read). Two additions:

    The capital of France is => Paris
    Water boils at a temperature of => 100 | 212
    score: The capital of France is Paris, and water boils at 100 degrees Celsius.

- `PROMPT => ANSWER | ANSWER ...`: a right answer contains one of the ANSWERs (compared
  without case, after NFKC, as a whole word or number: "100" is not found in "1000", "Paris"
  is found in "Paris." and in "巴黎(Paris)"). The last ` => ` of a line splits it; a prompt
  that itself contains ` => ` ends with ` =>` (nothing expected).
- `score: TEXT`: a reference text whose likelihood the node's model must keep (likelihood.py).
  Without any, the built-in SCORE_TEXTS are scored.

Greedy answers are never compared with each other: on a V100 the engine is not
batch-invariant (vLLM's batch-invariant mode needs compute capability >= 8.0), so the tokens
after the first few change with what else is in flight.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ARROW = " => "
SCORE = "score:"
# The shipped prompts (the roles write them to the node; users extend the file or the list).
DEFAULT_FILE = Path(__file__).with_name("probe-prompts.txt")
# Scored when a prompts file names no text of its own: plain, common sentences any language
# model finds likely (a perplexity in the tens), in English and in Chinese.
SCORE_TEXTS = (
    "The capital of France is Paris. Water boils at 100 degrees Celsius at sea level, and "
    "the first five numbers are one, two, three, four and five.",
    "法国的首都是巴黎。在标准大气压下\uff0c水的沸点是100摄氏度。",
)


@dataclass(frozen=True)
class ProbePrompt:
    prompt: str
    expect: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromptSet:
    prompts: tuple[ProbePrompt, ...]
    score_texts: tuple[str, ...] = SCORE_TEXTS


def parse_line(line: str) -> ProbePrompt | str | None:
    """One line: a ProbePrompt, a text to score (str), or None (blank or comment)."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    if text.startswith(SCORE):
        return text[len(SCORE):].strip() or None
    if text.endswith(ARROW.rstrip()) and text[:-2].endswith(" "):
        head = text[:-2].rstrip()
        return ProbePrompt(head) if head else None
    head, sep, tail = text.rpartition(ARROW)
    if not sep or not head.strip():
        return ProbePrompt(text)
    expect = tuple(part.strip() for part in tail.split("|") if part.strip())
    return ProbePrompt(head.strip(), expect)


def parse(text: str) -> PromptSet:
    prompts: list[ProbePrompt] = []
    scores: list[str] = []
    for line in text.splitlines():
        item = parse_line(line)
        if isinstance(item, ProbePrompt):
            prompts.append(item)
        elif isinstance(item, str):
            scores.append(item)
    return PromptSet(tuple(prompts), tuple(scores) or SCORE_TEXTS)


def read(path: Path) -> PromptSet:
    return parse(path.read_text())


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _edge(ch: str) -> str:
    """What may not touch an expected answer's end: a digit next to a digit, a letter of an
    alphabet next to such a letter; CJK characters have no word boundaries."""
    if ch.isdigit():
        return r"\d"
    if ch.isalpha() and not _cjk(ch):
        return r"[^\W\d_]"
    return ""


def _cjk(ch: str) -> bool:
    return "CJK" in unicodedata.name(ch, "") or "\u3040" <= ch <= "\u30ff"


def contains(answer: str, expected: str) -> bool:
    """Whether `answer` contains `expected` as a whole word or number."""
    want = _normal(expected).strip()
    if not want:
        return True
    before, after = _edge(want[0]), _edge(want[-1])
    pattern = ((f"(?<!{before})" if before else "") + re.escape(want)
               + (f"(?!{after})" if after else ""))
    return re.search(pattern, _normal(answer)) is not None


def missing(answer: str, expect: tuple[str, ...]) -> str | None:
    """Why the answer lacks what a right answer contains, or None (nothing expected, or found)."""
    if not expect or any(contains(answer, want) for want in expect):
        return None
    wanted = " or ".join(repr(w) for w in expect)
    return f"wrong answer: {answer.strip()[:60]!r} does not contain {wanted}"
