"""A deterministic toy tokenizer and text generator.

Tokens: every run of up to 4 word characters (`\\w{1,4}`) and every single
punctuation character is one token; whitespace is never a token. So
"hello, world" -> ["hell", "o", ",", "worl", "d"]. A BOS token (id 1) is
prepended when add_special_tokens is true (the default for completions).
Chat prompts are rendered with a ChatML template where `<|im_start|>` and
`<|im_end|>` are single tokens:
  per message: 2 + tokens(role) + tokens(content); generation prompt: 1 + tokens("assistant") = 4.

Generated text: one word of at most 4 letters per token, with a leading space,
picked by a generator seeded from the prompt (and the request's seed), so the
same request gives the same text and re-tokenizing it gives the same count.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator

BOS_ID = 1
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
_TOKEN_RE = re.compile(r"\w{1,4}|[^\w\s]")
_SPECIAL_RE = re.compile(r"(<\|im_start\|>|<\|im_end\|>)")

WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "that", "for", "on", "are", "with", "as", "his",
    "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "word", "but", "not",
    "what", "all", "were", "we", "when", "your", "can", "said", "use", "an", "each", "she", "do",
    "how", "if", "will", "up", "out", "many", "then", "them", "so", "some", "her", "make", "like",
    "him", "into", "time", "has", "look", "two", "more", "go", "see", "way", "who", "may", "down",
    "side", "been", "call", "now", "find", "long", "day", "did", "get", "come", "made", "part"
)
assert all(len(w) <= 4 for w in WORDS)  # one token per generated word


_ids: dict[tuple[str, int], int] = {}  # token -> id cache: a burst of 128 prompts stays cheap


def _token_id(tok: str, vocab_size: int) -> int:
    key = (tok, vocab_size)
    found = _ids.get(key)
    if found is None:
        if len(_ids) > 500_000:
            _ids.clear()
        found = _ids[key] = 4 + zlib.crc32(tok.encode()) % max(vocab_size - 4, 1)
    return found


def tokenize_text(text: str, vocab_size: int = 32000, add_special_tokens: bool = True) -> list[int]:
    ids = [BOS_ID] if add_special_tokens else []
    for piece in _SPECIAL_RE.split(text):
        if piece in (IM_START, IM_END):
            ids.append(2 if piece == IM_START else 3)
            continue
        ids.extend(_token_id(tok, vocab_size) for tok in _TOKEN_RE.findall(piece))
    return ids


def count_tokens(text: str, add_special_tokens: bool = True) -> int:
    """len(tokenize_text(...)) without computing ids (the generation path)."""
    count = 1 if add_special_tokens else 0
    for piece in _SPECIAL_RE.split(text):
        if piece in (IM_START, IM_END):
            count += 1
            continue
        for word in piece.split():
            # re's \w is exactly str.isalnum() plus "_": a plain word is ceil(len / 4) tokens.
            if word.isalnum():
                count += (len(word) + 3) // 4
            else:
                count += len(_TOKEN_RE.findall(word))
    return count


def message_text(content: object) -> str:
    """OpenAI content: a string or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def render_chat(messages: list[dict], add_generation_prompt: bool = True) -> str:
    parts = [
        f"{IM_START}{m.get('role', 'user')}\n{message_text(m.get('content'))}{IM_END}\n"
        for m in messages
    ]
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def generate_words(seed_text: str, seed: int | None, broken: bool = False,
                   bad: str = "") -> Iterator[str]:
    """Endless deterministic stream of " word" tokens ("!" forever when broken): the filler
    words alone (the server answers through answers.py: facts, the batch, every bad mode).

    `bad` is how a failing card answers: "repeat" gives the first word forever, "wrong"
    other words than a healthy card gives for the same prompt, "broken" "!" forever.
    """
    if broken or bad == "broken":
        while True:
            yield "!"
    if bad == "repeat":
        first = next(generate_words(seed_text, seed))
        while True:
            yield first
    if bad == "wrong":
        seed = (seed or 0) + 104729
    state = (zlib.crc32(seed_text.encode()) ^ ((seed or 0) * 2654435761)) & 0xFFFFFFFF
    while True:
        # Numerical Recipes LCG: cheap, deterministic, good enough to vary words.
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        yield " " + WORDS[(state >> 16) % len(WORDS)]


def natural_length(seed_text: str) -> int:
    """Tokens the model would emit before EOS when ignore_eos is false (20..219)."""
    return 20 + zlib.crc32(seed_text.encode()) % 200
