"""The burn-in's verdict from samples, answers and the load's tally."""

from __future__ import annotations

from onecat.answers.probe import ProbeResult
from onecat.burnin.judge import (
    Asked,
    answer_findings,
    burnin_verdict,
    gpu_findings,
    load_findings,
    series_row,
)
from onecat.burnin.load import LoadTally


def _reading(uncorrected: int = 0, throttle: list[str] | None = None, temp: int = 60,
             double_bit: int = 0) -> dict:
    return {"gpu_count": 1, "gpus": [{
        "index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:3B:00.0", "temperature_c": temp,
        "name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "ecc_mode": True,
        "throttle_reasons": throttle or [],
        "ecc": {"volatile": {"corrected": 0, "uncorrected": uncorrected},
                "aggregate": {"corrected": 0, "uncorrected": uncorrected}},
        "retired_pages": {"single_bit": 0, "double_bit": double_bit, "pending": False}}]}


def test_a_state_that_lasts_the_whole_load_is_one_finding() -> None:
    """One sample of the power brake, or five, warns; the burn-in admits the node (degraded)."""
    readings = [_reading(), *[_reading(throttle=["hw_slowdown", "hw_power_brake_slowdown"])] * 5]
    findings = gpu_findings(readings)
    assert [(f.severity, f.code) for f in findings] == [("warning", "throttle")]
    assert burnin_verdict(findings) == ("degraded", True)


def test_a_slowdown_sustained_over_the_burn_in_refuses_the_node() -> None:
    """gpud's rule over the samples' times: 6 of 10 minutes braked is unhealthy."""
    braked = _reading(throttle=["hw_slowdown", "hw_power_brake_slowdown"])
    times = [60.0 * minute + second for minute in range(10) for second in (0, 30)]
    readings = [braked if t < 360 else _reading() for t in times]
    findings = gpu_findings(readings, times=times)
    assert ("error", "throttle_sustained") in [(f.severity, f.code) for f in findings]
    assert burnin_verdict(findings) == ("unhealthy", False)
    short = [braked if t < 300 else _reading() for t in times]
    assert burnin_verdict(gpu_findings(short, times=times)) == ("degraded", True)


def test_counters_rising_twice_are_two_findings_and_heat_only_degrades() -> None:
    readings = [_reading(), _reading(0, double_bit=1), _reading(0, temp=88, double_bit=1),
                _reading(0, temp=88, double_bit=3)]
    findings = gpu_findings(readings)
    assert sorted(f.code for f in findings) == ["pages_retired_double_bit",
                                                "pages_retired_double_bit", "temperature"]
    assert burnin_verdict(gpu_findings([_reading(), _reading(temp=90)])) == ("degraded", True)


def test_an_uncorrectable_error_under_load_is_one_lasting_finding() -> None:
    findings = gpu_findings([_reading(), _reading(1), _reading(1), _reading(3)])
    assert [(f.severity, f.code) for f in findings] == [("error", "ecc_volatile_uncorrected")]
    assert burnin_verdict(findings) == ("unhealthy", False)


def _result(prompt: str, answer: str, ok: bool = True, reason: str = "reads as text"
            ) -> ProbeResult:
    return ProbeResult(prompt, answer, ok, reason, 0.1)


def test_answers_under_load_are_judged_on_their_own_never_against_the_idle_ones() -> None:
    """A non-batch-invariant engine answers differently under load: that is no finding."""
    idle = [_result("p", " Paris. It is the capital and the largest city of France")]
    other = _result("p", " Paris. It is a city of many bridges, museums and old streets")
    assert answer_findings(idle, [Asked(5, other), Asked(15, other)]) == []
    bad = _result("p", " Paris!!!!!!!!", False, "collapsed into repetition: '!' 8 times")
    found = answer_findings(idle, [Asked(5, other), Asked(15, bad)])
    assert len(found) == 1 and "1 of 2 answers and likelihoods under load failed; first at " \
        "15 s, the answer to 'p': collapsed" in found[0].message
    score = _result("score: A text.", "14.0", False, "the model finds plain text unlikely")
    failed = answer_findings([*idle, score], [])
    assert failed[0].message.startswith("idle, the likelihood of 'A text.': the model finds")
    unreachable = ProbeResult("p", "", False, "the probe failed: HTTP 503", 0.1, reached=False)
    assert "HTTP 503" in answer_findings(idle, [Asked(9, unreachable)])[0].message


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
