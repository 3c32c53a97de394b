"""The serve gate's smoke check judges by the watch's degeneracy detector (issue 26).

The gate's old rule (the whole answer one short piece repeated, split on whitespace) let the
seed's symptoms through and refused legitimately repetitive answers; a canary that passes its
gate with garbage becomes every other node's reference, so the gate and the watch must agree.
"""
# ruff: noqa: RUF001  (multilingual answers on purpose)

from __future__ import annotations

import pytest

from onecat.answers.degenerate import degenerate
from onecat.serve import gate
from onecat.serve.gate import judge_smoke

GARBAGE = {
    "partial collapse": " Paris!!!!!!!!",
    "CJK loop": "水的沸点是100摄氏度度度度度度度度度",
    "loop cut mid-repeat": "巴黎巴黎巴黎巴黎巴黎巴",
    "CJK phrase loop cut mid-repeat": "水的沸点是100摄氏度摄氏度摄氏度摄氏度摄氏度摄氏",
    "random-token soup": "舗ablyของـه}\\нашÃ©нашمت니다متที่ablyITableViewώของнаш",
    "not text": "\x00\x01\x02\ufffd\ufffd ok",
}

LEGITIMATE = [
    "0 0 0\n0 0 0",
    "0 0 0\n0 0 0\n0 0 0",
    "}}}}",
    "1, 2, 3, 4, 5",
    " Paris. It is the capital and the largest city of France.",
    "水的沸点是100摄氏度（212°F）。",
]


@pytest.mark.parametrize("text", list(GARBAGE.values()), ids=list(GARBAGE))
def test_the_seeds_symptoms_fail_the_smoke(text: str) -> None:
    ok, reason = judge_smoke(text)
    assert not ok, reason
    # One line that says what was seen (the detector's own finding) and why it matters.
    assert reason == (f"the smoke completion has degenerated ({degenerate(text)}), the "
                      "garbage/NaN symptom of a broken engine or kernel")
    assert "\n" not in reason


@pytest.mark.parametrize("text", LEGITIMATE)
def test_legitimately_repetitive_answers_pass_the_smoke(text: str) -> None:
    ok, reason = judge_smoke(text)
    assert ok, reason
    assert reason == f"the smoke completion answered {text.strip()[:60]!r}"


@pytest.mark.parametrize("text", [*GARBAGE.values(), *LEGITIMATE, "!!!!!!!!!!!!!!!!", "   "])
def test_the_gate_and_the_watch_agree(text: str) -> None:
    # One detector: what the watch calls degenerate, the gate refuses, and nothing else.
    assert judge_smoke(text)[0] is (degenerate(text) is None)


def test_the_gate_imports_the_detector_relatively_and_nothing_from_the_watch() -> None:
    # On a node gate.py is ansible.module_utils.onecat.serve.gate: no `onecat` package there,
    # so what judges answers must come in by relative imports (AnsiballZ ships them along),
    # from onecat/answers, the home the gate, the watch and the burn-in share (issue 47).
    from onecat.answers import ask

    assert ask.degenerate is degenerate and gate.judge_smoke is ask.judge_smoke
    source = gate.__loader__.get_source(gate.__name__) or ""
    assert "from ..answers.ask import" in source
    asking = ask.__loader__.get_source(ask.__name__) or ""
    assert "from .degenerate import degenerate" in asking
