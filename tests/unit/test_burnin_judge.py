"""The burn-in's verdict from samples, answers and the load's tally."""

from __future__ import annotations

from onecat.burnin.judge import (
    Asked,
    answer_findings,
    burnin_verdict,
    gpu_findings,
    load_findings,
    series_row,
)
from onecat.burnin.load import LoadTally


def _reading(uncorrected: int = 0, throttle: list[str] | None = None, temp: int = 60) -> dict:
    return {"gpus": [{"index": 0, "uuid": "GPU-0", "temperature_c": temp,
                      "throttle_reasons": throttle or [],
                      "ecc": {"volatile": {"corrected": 0, "uncorrected": uncorrected}},
                      "retired_pages": {"pending": False}}]}


def test_a_state_that_lasts_the_whole_load_is_one_finding() -> None:
    readings = [_reading(), *[_reading(throttle=["hw_power_brake_slowdown"])] * 5]
    findings = gpu_findings(readings)
    assert [(f.severity, f.code) for f in findings] == [("unhealthy", "throttle")]
    assert burnin_verdict(findings) == ("unhealthy", False)


def test_counters_rising_twice_are_two_findings_and_heat_only_degrades() -> None:
    readings = [_reading(), _reading(1), _reading(1, temp=88), _reading(3, temp=88)]
    findings = gpu_findings(readings)
    assert sorted(f.code for f in findings) == ["ecc_uncorrected", "ecc_uncorrected",
                                                "temperature"]
    assert burnin_verdict(gpu_findings([_reading(), _reading(temp=90)])) == ("degraded", True)


def test_answers_under_load_must_match_the_idle_ones() -> None:
    idle = {"p": "Paris is the capital and the largest city of France by far today"}
    same = Asked("p", idle["p"], 5)
    other = Asked("p", "Lyon is a city in France with a long history of silk and food", 15)
    assert answer_findings(idle, [same, same], None) == []
    found = answer_findings(idle, [same, other], None)
    assert len(found) == 1 and "1 of 2 answers under load failed; first at 15 s" in \
        found[0].message
    failed = answer_findings(idle, [Asked("p", "", 9, "HTTP 503")], None)
    assert "HTTP 503" in failed[0].message


def test_a_few_failed_requests_under_load_are_tolerated() -> None:
    assert load_findings(LoadTally(completed=1000, failed=10)) == []
    assert load_findings(LoadTally(completed=1000, failed=11, errors={"timeout": 11}))[0].code \
        == "load"
    assert "completed no request" in load_findings(LoadTally(failed=3))[0].message


def test_the_series_row_keeps_what_the_report_plots() -> None:
    row = series_row(_reading(2, ["hw_slowdown"]), 3.14)
    assert row == {"t": 3.1, "gpus": [{"index": 0, "temperature_c": 60, "power_draw_w": None,
                                       "power_limit_w": None,
                                       "throttle_reasons": ["hw_slowdown"],
                                       "ecc_corrected": 0, "ecc_uncorrected": 2,
                                       "retirement_pending": False}]}
