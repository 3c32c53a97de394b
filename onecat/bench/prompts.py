"""Seeded, distinct prompts of an exact token length.

Each prompt is a random sequence of common short English words, seeded by
(seed, request index), so every request differs from its first token and a
prefix cache cannot flatter the numbers. Most tokenizers encode these words as
one token each, so `input_len - 1` words (one for BOS) is the estimate when the
server has no /tokenize; with /tokenize the word count is searched until the
server counts exactly `input_len` tokens.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

WORDS = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world",
    "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
    "place", "case", "week", "company", "system", "program", "question", "work", "government",
    "number", "night", "point", "home", "water", "room", "mother", "area", "money", "story",
    "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue",
    "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game",
    "line", "end", "member", "law", "car", "city", "name", "team", "minute", "idea", "kid",
    "body", "back", "parent", "face", "others", "level", "office", "door", "health", "person",
    "art", "war", "history", "party", "result", "change", "morning", "reason", "research", "girl",
    "guy", "moment", "air", "teacher", "force", "order"
)

CountFn = Callable[[str], Awaitable[int]]


def words_for(seed: int, index: int, count: int) -> list[str]:
    rng = random.Random(f"onecat-bench:{seed}:{index}")
    return [rng.choice(WORDS) for _ in range(count)]


def estimate_text(seed: int, index: int, input_len: int) -> str:
    """Best guess without a tokenizer: one token per word plus BOS."""
    return " ".join(words_for(seed, index, max(input_len - 1, 1)))


async def exact_text(seed: int, index: int, input_len: int, count: CountFn,
                     max_calls: int = 12) -> tuple[str, int]:
    """Search the word count so the server's tokenizer counts `input_len` tokens.

    Every word is at least one token, so `input_len` words always suffice;
    returns the longest prompt with at most `input_len` tokens and its count.
    """
    words = words_for(seed, index, max(input_len, 1))
    known: dict[int, int] = {}

    async def tokens(k: int) -> int:
        if k not in known:
            known[k] = await count(" ".join(words[:k]))
        return known[k]

    k = max(input_len - 1, 1)
    lo, hi = 0, len(words) + 1  # tokens(lo) <= target < tokens(hi) once measured
    for _ in range(max_calls):
        c = await tokens(k)
        if c == input_len:
            return " ".join(words[:k]), c
        if c < input_len:
            lo = max(lo, k)
            step = k + (input_len - c)  # each missing token needs at most one more word
        else:
            hi = min(hi, k)
            step = k - (c - input_len)
        if hi - lo <= 1:
            break
        k = step if lo < step < hi else (lo + hi) // 2
    best = max(lo, 1)
    text, got = " ".join(words[:best]), await tokens(best)
    if got < input_len:
        # The next word is several tokens: pad with "a", one token in every common tokenizer.
        padded = text + " a" * (input_len - got)
        padded_count = await count(padded)
        if padded_count == input_len:
            return padded, padded_count
    return text, got
