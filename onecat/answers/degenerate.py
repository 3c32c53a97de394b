"""Has an answer degenerated? The seed's symptoms of a card gone bad (pitfall 5.5), judged on
the answer's characters and, when the server can tokenize, on its tokens.

- **A runaway loop**: the answer *ends* in a unit repeated over and over, cut wherever
  max_tokens cut it, mid-repeat included: partial collapse (" Paris!!!!!!!!"), a CJK loop
  ("…沸点是100摄氏度度度度度度度度"), a loop cut mid-repeat ("巴黎巴黎巴黎巴黎巴黎巴"),
  " the the the the the". A unit of one character or token must repeat `RUN_MIN` (8) times,
  a longer unit `LOOP_MIN` (5) times. Judged on characters (CJK has no spaces, so words do
  not work) and on the served model's own tokens (a loop of a long word or phrase).
- **Random-token soup** (乱码): runs of letters of `SOUP_SCRIPTS` (3) or more writing systems
  switching `SOUP_SWITCHES` (6) or more times (Han and kana count as one: Japanese mixes
  them; Latin in Chinese text is two scripts; a lone Greek or Latin letter in a formula is a
  symbol, not a run).
- **Not text**: fewer than `MIN_PRINTABLE_SHARE` printable characters.

Legitimately repetitive answers are not loops: a zero matrix ("0 0 0\\n0 0 0\\n0 0 0" is three
repeats of its row), closing braces ("}}}}", four), a list of numbers ("1, 2, 3, 4, ..." is not
periodic), a repetition the answer moves on from (only the answer's end is judged: a loop
from a broken kernel never stops). Stdlib only: it runs on the nodes.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Sequence

# A unit of one character (token) repeated this many times at the end is a collapse.
RUN_MIN = 8
# A longer unit (up to MAX_UNIT_CHARS characters or MAX_UNIT_TOKENS tokens) this many times.
LOOP_MIN = 5
MAX_UNIT_CHARS = 32
MAX_UNIT_TOKENS = 16
# Random-token soup: letters of this many scripts, switching this often.
SOUP_SCRIPTS = 3
SOUP_SWITCHES = 6
# Printable share of the characters below which the answer is not text (control bytes,
# replacement characters from broken detokenisation).
MIN_PRINTABLE_SHARE = 0.9

# Scripts that one language mixes: judged as one.
_SCRIPT_FAMILY = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HALFWIDTH": "CJK",
                  "IDEOGRAPHIC": "CJK", "FULLWIDTH": "LATIN", "BOPOMOFO": "CJK"}


def printable_share(text: str) -> float:
    good = sum(1 for ch in text
               if ch in "\n\t" or (ch != "\ufffd" and unicodedata.category(ch)[0] != "C"))
    return good / len(text) if text else 0.0


def tail_loop(units: Sequence[object], max_unit: int) -> tuple[int, float, int] | None:
    """(unit length, repeats, where the loop starts) of the shortest unit whose repetition
    ends `units` often enough to be a loop (RUN_MIN for a unit of 1, LOOP_MIN longer), a last
    partial repeat included; None when the end is not a loop."""
    n = len(units)
    for period in range(1, min(max_unit, n // 2) + 1):
        matched = 0
        i = n - 1
        while i - period >= 0 and units[i] == units[i - period]:
            matched += 1
            i -= 1
        repeats = (matched + period) / period
        if repeats >= (RUN_MIN if period == 1 else LOOP_MIN):
            return period, repeats, n - matched - period
    return None


def _script(ch: str) -> str | None:
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0] if name else "UNKNOWN"
    if first == "CJK" or "IDEOGRAPH" in name:
        return "CJK"
    return _SCRIPT_FAMILY.get(first, first)


def _runs(text: str) -> list[str]:
    """The scripts of the answer's runs of letters that count: two letters or more of one
    script in a row, or one CJK or Hangul character (a word of its own). A lone Greek or Latin
    letter (alpha, beta, x in a formula) is a symbol, not a switch of language."""
    runs: list[str] = []
    script, length = None, 0

    def close() -> None:
        if script is not None and (length >= 2 or script in ("CJK", "HANGUL")):
            runs.append(script)

    for ch in text:
        if unicodedata.category(ch).startswith("M"):
            # A combining mark (Thai vowels, accents) is part of the letter before it.
            length += script is not None
            continue
        now = _script(ch)
        if now != script:
            close()
            script, length = now, 0
        length += 1
    close()
    return runs


def soup(text: str) -> tuple[int, int] | None:
    """(scripts, switches) when the letters hop between many writing systems, else None."""
    runs = _runs(text)
    switches = sum(1 for a, b in itertools.pairwise(runs) if a != b)
    if len(set(runs)) >= SOUP_SCRIPTS and switches >= SOUP_SWITCHES:
        return len(set(runs)), switches
    return None


def degenerate(text: str, tokens: Sequence[int] | None = None) -> str | None:
    """Why an answer has degenerated, or None when it reads like text. `tokens`: the answer
    as the served model tokenizes it (/tokenize), when the server can tell."""
    if not text.strip():
        return "empty answer"
    share = printable_share(text)
    if share < MIN_PRINTABLE_SHARE:
        return f"not text: only {share:.0%} of its characters are printable"
    body = text.rstrip()
    # Trailing whitespace is left out ("Paris!!!!!!!!\n"), unless it is the loop's own: "0 "
    # five times ends in a space, and without it only 4.5 repeats are left.
    for candidate in dict.fromkeys((body, text)):
        loop = tail_loop(candidate, MAX_UNIT_CHARS)
        if loop is not None and candidate[-loop[0]:].strip():
            unit = candidate[loop[2]:loop[2] + loop[0]]
            return (f"collapsed into repetition: {unit!r} {loop[1]:g} times at the end "
                    f"({body[-40:]!r})")
    if tokens:
        loop = tail_loop(list(tokens), MAX_UNIT_TOKENS)
        if loop is not None:
            return (f"collapsed into repetition: a unit of {loop[0]} token(s) {loop[1]:g} "
                    f"times at the end ({body[-40:]!r})")
    mixed = soup(text)
    if mixed is not None:
        return (f"random-token soup: letters of {mixed[0]} scripts switching {mixed[1]} "
                f"times ({text.strip()[:40]!r})")
    return None
