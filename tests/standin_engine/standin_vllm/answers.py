"""What the stand-in "model" answers and how likely it finds a text: healthy, or gone bad.

A real engine on a V100 is not batch-invariant: vLLM's batch-invariant mode needs compute
capability >= 8.0 (vllm-project/vllm docs/features/batch_invariance.md, "Hardware
Requirements"), so on sm_70 the reduction order of the GEMMs and of attention changes with
the batch, near-ties between the two best logits flip, and greedy tokens after the first
few depend on what else is in flight. The stand-in does the same: the first
`STABLE_TOKENS` tokens of an answer depend on the prompt only; the words after them are
seeded with the number of requests in flight when the request arrived (unless
STANDIN_BATCH_INVARIANT=1, as on a Hopper with VLLM_BATCH_INVARIANT=1).

It "knows" a few facts (the capital of France, the boiling point of water, counting), so
that an answer can be right or wrong, not only filler words.

Logprobs: every token has a deterministic base log-probability (healthy text: -0.5 to -5
nats, a mean near -2.75, a perplexity near 15), moved by batch noise of
STANDIN_LOGPROB_NOISE (1 %) relative, seeded by the batch. A card gone bad scores every
token at -10 to -18 nats (a perplexity of ~10^6): a broken kernel moves perplexity by
orders of magnitude, the batch by about a percent.

The ways a card goes bad (STANDIN_BAD_MODE), after the seed's symptoms:
  repeat    the first word forever (" the the the ...")
  wrong     other words than a healthy card gives (no fact, filler only)
  broken    "!" forever
  collapse  partial collapse: the right first word, then "!" (" Paris!!!!!!!!")
  cjk_loop  a CJK answer that loops on its last character ("水的沸点是100摄氏度度度度度")
  cut_loop  a two-character loop cut mid-repeat by max_tokens ("巴黎巴黎巴黎巴")
  soup      random tokens of many scripts (乱码: "ancell наш 码ücret ...")
  unlikely  broken from its first token, subtly (issue 47): filler words that read as text,
            and plain text scored at -7.5 to -10.5 nats a token (a mean of 9: a perplexity
            near 8,000, under the 10-nat ceiling that catches the other modes)
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator

from standin_vllm.tokenizer import WORDS

BAD_MODES = ("repeat", "wrong", "broken", "collapse", "cjk_loop", "cut_loop", "soup", "unlikely")
# Tokens at the start of an answer that do not depend on the batch.
STABLE_TOKENS = 4

# What the "model" knows: a phrase in the prompt -> the tokens its answer starts with (at
# most 4 letters each, so that re-tokenizing the answer gives the same count).
FACTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("capital of france", (" Pari", "s", ".", " It", " is")),
    ("water boils", (" 100", " degr", "ees", " Cels", "ius", " at", " sea", " leve", "l", ".")),
    ("沸点", ("100", "摄", "氏", "度", "。")),
    ("one, two, three,", (" four", ",", " five", ",", " six", ",", " seve", "n", ",", " eigh",
                          "t", ",", " nine", ",", " ten", ".")),
)

CJK_LOOP = ("水", "的", "沸", "点", "是", "100", "摄", "氏", "度")
SOUP = ("ancell", "ĠvARi", "_SUPPORT", "ücret", "наш", "ств", "乱", "码", "舗", "鎌",
        "ال", "مت", "니다", "ที่", "Ã©", "âĢ", "ably", "ицы", "のは", "ędz", "ών", "ـه",
        "ITableView", "7", "}\\", "\u0131l\u0131", "ของ", "ώ")


def _lcg(state: int) -> Iterator[int]:
    while True:
        # Numerical Recipes LCG: cheap, deterministic, good enough to vary words.
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        yield state >> 16


def _filler(seed_text: str, seed: int | None, batch: int) -> Iterator[str]:
    state = (zlib.crc32(seed_text.encode()) ^ ((seed or 0) * 2654435761)
             ^ (batch * 40503)) & 0xFFFFFFFF
    for value in _lcg(state):
        yield " " + WORDS[value % len(WORDS)]


def fact(prompt: str) -> tuple[str, ...]:
    lowered = prompt.lower()
    for phrase, tokens in FACTS:
        if phrase in lowered:
            return tokens
    return ()


def healthy(seed_text: str, seed: int | None, batch: int = 0) -> Iterator[str]:
    """A healthy card's tokens: the fact it knows, then filler; after STABLE_TOKENS the
    filler depends on `batch` (the requests in flight), as greedy decoding on sm_70 does."""
    known = fact(seed_text)
    yield from known
    stable = _filler(seed_text, seed, 0)
    for _ in range(max(STABLE_TOKENS - len(known), 0)):
        yield next(stable)
    yield from _filler(seed_text, seed, batch) if batch else stable


def generate(seed_text: str, seed: int | None, broken: bool = False, bad: str = "",
             batch: int = 0, count: int = 0) -> Iterator[str]:
    """Endless stream of tokens for one answer (`count`: how many will be taken, for the
    loop cut mid-repeat)."""
    if broken or bad == "broken":
        yield from itertools.repeat("!")
    if bad == "repeat":
        yield from itertools.repeat(next(healthy(seed_text, seed)))
    if bad in ("wrong", "unlikely"):
        yield from _filler(seed_text, (seed or 0) + 104729, batch)
    if bad == "collapse":
        words = healthy(seed_text, seed)
        yield next(words)
        # The rest of the first word (" Pari", "s"), then "!" forever: " Paris!!!!!!!!".
        yield from itertools.takewhile(lambda token: token[:1].isalnum(), words)
        yield from itertools.repeat("!")
    if bad == "cjk_loop":
        yield from CJK_LOOP
        yield from itertools.repeat(CJK_LOOP[-1])
    if bad == "cut_loop":
        if count % 2 == 0:
            yield " Pari"  # an even count would end on a whole repeat: start one token late
        yield from itertools.cycle(("巴", "黎"))
    if bad == "soup":
        for value in _lcg(zlib.crc32(seed_text.encode()) ^ batch ^ ((seed or 0) * 31)):
            yield SOUP[value % len(SOUP)]
    yield from healthy(seed_text, seed, batch)


def token_logprob(token_id: int, previous: int, position: int, batch: int, noise: float,
                  bad: str) -> float:
    """log P(token | what came before) as the stand-in scores it (`bad`: the mode, or "")."""
    base = zlib.crc32(f"{previous}:{token_id}".encode()) / 0xFFFFFFFF
    if bad == "unlikely":
        return -(7.5 + 3.0 * base)
    if bad:
        return -(10.0 + 8.0 * base)
    jitter = zlib.crc32(f"{position}:{batch}".encode()) / 0xFFFFFFFF * 2.0 - 1.0
    return -(0.5 + 4.5 * base) * (1.0 + noise * jitter if batch else 1.0)


def generated_logprob(position: int, batch: int, noise: float, bad: str) -> float:
    """log P of a greedy token: the top-1, near 0 on a healthy card."""
    base = zlib.crc32(f"g{position}".encode()) / 0xFFFFFFFF
    if bad == "unlikely":
        return -(7.5 + 3.0 * base)
    if bad:
        return -(10.0 + 8.0 * base)
    jitter = zlib.crc32(f"g{position}:{batch}".encode()) / 0xFFFFFFFF * 2.0 - 1.0
    return -(0.05 + 0.6 * base) * (1.0 + noise * jitter if batch else 1.0)
