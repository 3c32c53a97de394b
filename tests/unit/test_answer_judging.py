"""Answers judged as a non-batch-invariant engine needs (onecat.answers.degenerate, prompts,
likelihood, probe): known answers, degeneracy on characters and tokens, likelihood within a
tolerance; never one answer compared with another."""
# ruff: noqa: RUF001  (multilingual answers: Cyrillic, Arabic, full-width characters on purpose)

from __future__ import annotations

import math
import re
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.answers import likelihood
from onecat.answers.degenerate import LOOP_MIN, RUN_MIN, degenerate, soup, tail_loop
from onecat.answers.probe import IDENTITY_KEYS, judge
from onecat.answers.prompts import (
    DEFAULT_FILE,
    SCORE_TEXTS,
    ProbePrompt,
    contains,
    missing,
    parse,
    read,
)

# --- degeneracy: the seed's symptoms -------------------------------------------------------


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty answer"),
    ("   \n", "empty answer"),
    ("\x00\x01\x02\ufffd\ufffd ok", "not text"),
    (" Paris!!!!!!!!", "collapsed into repetition: '!' 8 times at the end"),
    ("…沸点是100摄氏度度度度度度度度度", "collapsed into repetition: '度'"),
    ("巴黎巴黎巴黎巴黎巴黎巴", "collapsed into repetition: '巴黎' 5.5 times"),
    (" Paris 巴黎巴黎巴黎巴黎巴黎巴黎巴黎巴", "'巴黎' 7.5 times"),
    (" the the the the the the", "' the' 6 times"),
    ("!!!!!!!!!!!!", "'!' 12 times"),
    ("水的沸点是100摄氏度摄氏度摄氏度摄氏度摄氏度摄氏", "'摄氏度'"),
    ("舗ablyของـه}\\нашÃ©нашمت니다متที่ablyITableViewώของнаш", "random-token soup"),
])
def test_the_seeds_symptoms_are_caught(text: str, reason: str) -> None:
    assert reason in (degenerate(text) or ""), degenerate(text)


@pytest.mark.parametrize("text", [
    "0 0 0\n0 0 0",
    "0 0 0\n0 0 0\n0 0 0",
    "[[0, 0, 0], [0, 0, 0], [0, 0, 0]]",
    "}}}}",
    "function f() { if (a) { if (b) { return {x: {y: 1}}}}}",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16",
    "1, 2, 3, ...",
    " Paris. It is the capital and the largest city of France.",
    "水的沸点是100摄氏度（212°F）。",
    "Paris (巴黎, Париж) is the capital of France.",
    "東京は日本の首都です。カタカナとひらがな、漢字を使います。",
    " four, five, six, seven, eight, nine, ten.",
    "Paris is the the the the the the capital",  # a stutter the answer moves on from
    "公式 E=mc² 中 λ 表示波长 (wavelength)，α 和 β 是角度, θ 是 x 轴的夹角 y",
    "Москва (Moscow) — столица России; 莫斯科是俄罗斯的首都。",
    "....",
    "ha ha ha ha",
])
def test_legitimate_answers_pass(text: str) -> None:
    assert degenerate(text) is None


def test_a_loop_on_the_served_models_tokens() -> None:
    # A unit of 6 tokens (as /tokenize returns them) 5 times and a cut one: a loop, even when
    # its characters are longer than MAX_UNIT_CHARS.
    tokens = [11, 12, 13, 14, 15, 16] * 5 + [11, 12]
    assert "a unit of 6 token(s)" in (degenerate("a varied text with no loop", tokens) or "")
    assert degenerate("a varied text", [1, 2, 3, 4, 5, 6, 7, 8]) is None


words = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=40), st.text(min_size=1, max_size=4).filter(str.strip),
       st.integers(min_value=0, max_value=30), st.integers(min_value=0, max_value=3))
# Found by CI: the loop's own trailing space must count ("0 " five times is not 4.5 repeats).
@example(prefix="", unit="0 ", extra=0, cut=0)
def test_any_answer_that_ends_in_a_runaway_loop_is_caught(
        prefix: str, unit: str, extra: int, cut: int) -> None:
    """Whatever comes before, and wherever max_tokens cut the last repeat."""
    repeats = (RUN_MIN if len(unit) == 1 else LOOP_MIN) + extra
    text = prefix + unit * repeats + unit[: min(cut, len(unit) - 1)]
    assert degenerate(text) is not None, text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=3, max_size=40,
                unique=True))
def test_a_list_of_distinct_numbers_is_never_a_loop(numbers: list[int]) -> None:
    for sep in (", ", " ", "\n"):
        assert degenerate(sep.join(map(str, numbers))) is None


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=5), st.integers(min_value=1, max_value=8),
       st.sampled_from(["0", "1", "0.0"]))
def test_a_small_constant_matrix_is_never_a_loop(rows: int, cols: int, value: str) -> None:
    """Rows of fewer than LOOP_MIN repeats (a 5x8 zero matrix, a row of 4 zeros)."""
    row = " ".join([value] * min(cols, LOOP_MIN - 1))
    assert degenerate("\n".join([row] * rows)) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(words, min_size=1, max_size=30, unique=True))
def test_english_words_are_not_soup(chosen: list[str]) -> None:
    assert soup(" ".join(chosen)) is None


PIECES = {"latin": ["ably", "ancell", "vari", "port"], "cyrillic": ["наш", "ств", "ицы"],
          "cjk": ["乱", "码", "舗", "鎌"], "arabic": ["ال", "مت"], "thai": ["ของ", "ที่"],
          "hangul": ["니다", "습"]}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(PIECES)), min_size=3, max_size=5, unique=True),
       st.integers(min_value=7, max_value=30), st.randoms(use_true_random=False))
def test_random_tokens_from_many_scripts_are_soup(scripts: list[str], length: int,
                                                  rnd) -> None:
    """Tokens drawn from three or more scripts, the script changing at every token."""
    tokens = [rnd.choice(PIECES[scripts[i % len(scripts)]]) for i in range(length)]
    glue = rnd.choice(["", " "])
    assert "random-token soup" in (degenerate(glue.join(tokens)) or "")


def test_tail_loop_measures_the_cut_repeat() -> None:
    assert tail_loop("abab" + "xyz" * 5 + "x", 8) == (3, 5 + 1 / 3, 4)
    assert tail_loop("abcdef", 8) is None


# --- known answers -------------------------------------------------------------------------

def test_the_prompts_file_format() -> None:
    parsed = parse("# a comment\n\nThe capital of France is => Paris\n"
                   "Water boils at => 100 | 212\nplain prompt\nx => y =>\n"
                   "score: A reference text.\n")
    assert parsed.prompts == (ProbePrompt("The capital of France is", ("Paris",)),
                              ProbePrompt("Water boils at", ("100", "212")),
                              ProbePrompt("plain prompt"), ProbePrompt("x => y"))
    assert parsed.score_texts == ("A reference text.",)
    # A plain file (the old format) stays valid; the built-in texts are scored.
    plain = parse("The capital of France is\nTwo plus two is\n")
    assert [p.expect for p in plain.prompts] == [(), ()] and plain.score_texts == SCORE_TEXTS


def test_the_shipped_file_parses_with_an_answer_for_every_prompt() -> None:
    shipped = read(DEFAULT_FILE)
    assert len(shipped.prompts) >= 3 and all(p.expect for p in shipped.prompts)


@pytest.mark.parametrize(("answer", "expected", "found"), [
    (" Paris. It is", "Paris", True),
    (" PARIS!", "paris", True),
    (" Parisian food", "Paris", False),
    (" 100 degrees Celsius", "100", True),
    (" 1000 degrees", "100", False),
    ("100摄氏度", "100", True),
    ("１００摄氏度", "100", True),  # full-width digits, NFKC
    ("水的沸点是一百度", "一百", True),
    (" four, five", "four", True),
    (" fourteen", "four", False),
])
def test_a_known_answer_is_a_whole_word_or_number(answer: str, expected: str,
                                                  found: bool) -> None:
    assert contains(answer, expected) is found


def test_judge_checks_degeneracy_then_the_known_answer() -> None:
    assert judge(" Paris. It is the capital.", ("Paris",)).ok
    wrong = judge(" Lyon. It is a city.", ("Paris",))
    assert not wrong.ok and "does not contain 'Paris'" in wrong.reason
    assert "collapsed" in judge(" Paris!!!!!!!!", ("Paris",)).reason
    assert judge(" any text at all", ()).ok
    assert missing("x", ()) is None


# --- likelihood ----------------------------------------------------------------------------

def _score(nll: float | None, error: str = "") -> likelihood.Score:
    return likelihood.Score("The capital of France is Paris.", nll, 20, error)


def test_the_likelihood_holds_within_the_tolerance() -> None:
    assert likelihood.judge(_score(2.80), 2.75) is None  # +1.8 %: batch noise
    moved = likelihood.judge(_score(3.2), 2.75)  # +16 %
    assert moved and "likelihood moved" in moved and "tolerance 10%" in moved
    assert likelihood.judge(_score(3.2), 2.75, relative=0.2) is None
    assert likelihood.judge(_score(2.8), None) is None  # no reference yet: a healthy first
    # A first reference must be under FIRST_MAX_NLL (issue 47: soup at 9 nats passed MAX_NLL).
    first = likelihood.judge(_score(9.0), None)
    assert first is not None and "the most a first reference may be" in first
    assert likelihood.judge(_score(9.0), 8.9) is None  # a reference exists: its tolerance rules
    assert likelihood.judge(_score(9.0), None, first_max=9.5) is None


def test_a_broken_kernel_fails_with_or_without_a_reference() -> None:
    for reference in (None, 2.75):
        why = likelihood.judge(_score(14.0), reference)
        assert why and "unlikely" in why
    assert "unlikely" in (likelihood.judge(_score(math.nan), None) or "")
    assert "unlikely" in (likelihood.judge(_score(9999.0), 2.75) or "")
    assert "cannot score" in (likelihood.judge(_score(None, "HTTP 400"), 2.75) or "")


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.5, max_value=8.0), st.floats(min_value=-0.09, max_value=0.09))
def test_noise_under_the_tolerance_never_fails(reference: float, change: float) -> None:
    assert likelihood.judge(_score(reference * (1 + change)), reference) is None


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.5, max_value=8.0), st.floats(min_value=math.log(10), max_value=20))
def test_a_tenfold_perplexity_always_fails(reference: float, added: float) -> None:
    """A perplexity x10 or more (NLL + 2.3 nats) is far outside 10 % of any plain text's NLL."""
    assert likelihood.judge(_score(reference + added), reference) is not None


# --- references: one key for the watch and the burn-in -------------------------------------

def test_the_burnin_role_keys_references_like_the_watch() -> None:
    """roles/burnin builds the key of the canary's likelihoods in Jinja: the same fields of
    serving.json, in the same order, as onecat.answers.probe.IDENTITY_KEYS."""
    repo = Path(__file__).resolve().parents[2]
    jinja = yaml.safe_load((repo / "roles/burnin/vars/main.yml").read_text())["__burnin_identity"]
    assert tuple(re.findall(r"__burnin_record\.(\w+)", jinja)) == IDENTITY_KEYS
    unit = (repo / "roles/vllm_serve/tasks/unit.yml").read_text()
    # The serve stage writes every one of them into serving.json.
    assert all(f"          {key}:" in unit for key in IDENTITY_KEYS)
