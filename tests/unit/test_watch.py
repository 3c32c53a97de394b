"""The watch's delta rules, probe judge and metrics (onecat.watch): each rule fires on what
arrived since the previous look, never on a card's history alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from onecat.watch.deltas import DEGRADED, HEALTHY, UNHEALTHY, Limits, compare, verdict
from onecat.watch.metrics import render
from onecat.watch.probe import garbage, judge


def _gpu(index: int, **changes: Any) -> dict[str, Any]:
    gpu = {
        "index": index,
        "uuid": f"GPU-{index:08d}",
        "pci_bus_id": f"00000000:{0x3B + index:02X}:00.0",
        "ecc": {"volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 5, "uncorrected": 3}},
        "retired_pages": {"single_bit": 0, "double_bit": 2, "pending": False},
        "remapped_rows": {"correctable": None, "uncorrectable": None, "failure": None,
                          "pending": None},
        "throttle_reasons": ["gpu_idle"],
        "temperature_c": 40,
    }
    gpu.update(changes)
    return gpu


def _readings(*gpus: dict[str, Any], xid: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"gpus": list(gpus) or [_gpu(0), _gpu(1)], "xid_events": [] if xid is None else xid}


def _codes(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.severity, f.code) for f in findings]


def test_nothing_new_is_healthy_even_with_a_history() -> None:
    # Lifetime uncorrectable errors and retired pages: judged at deploy, not news to the watch.
    before = _readings()
    assert compare(before, copy.deepcopy(before)) == []
    assert verdict(compare(None, before)) == HEALTHY


def test_a_new_uncorrectable_error_is_unhealthy() -> None:
    before = _readings()
    now = copy.deepcopy(before)
    now["gpus"][1]["ecc"]["volatile"]["uncorrected"] = 1
    findings = compare(before, now)
    assert _codes(findings) == [(UNHEALTHY, "ecc_uncorrected")]
    assert "GPU 1 (00000000:3C:00.0): 1 new uncorrectable ECC" in findings[0].message
    assert verdict(findings) == UNHEALTHY


def test_corrected_errors_warn_only_in_a_burst() -> None:
    before = _readings()
    few = copy.deepcopy(before)
    few["gpus"][0]["ecc"]["volatile"]["corrected"] = 99
    assert compare(before, few) == []
    burst = copy.deepcopy(before)
    burst["gpus"][0]["ecc"]["volatile"]["corrected"] = 100
    assert _codes(compare(before, burst)) == [(DEGRADED, "ecc_corrected")]
    assert compare(before, burst, Limits(corrected_ecc=1000)) == []


def test_a_counter_that_fell_is_a_driver_reload_not_an_error() -> None:
    before = _readings(_gpu(0, ecc={"volatile": {"corrected": 500, "uncorrected": 2}}))
    now = _readings(_gpu(0, ecc={"volatile": {"corrected": 0, "uncorrected": 0}}))
    assert compare(before, now) == []


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("retired_pages", {"single_bit": 0, "double_bit": 2, "pending": True},
     [(UNHEALTHY, "retirement_pending")]),
    ("retired_pages", {"single_bit": 0, "double_bit": 3, "pending": False},
     [(UNHEALTHY, "pages_retired_double_bit")]),
    ("retired_pages", {"single_bit": 1, "double_bit": 2, "pending": False},
     [(DEGRADED, "pages_retired_single_bit")]),
    ("remapped_rows", {"failure": True, "pending": False}, [(UNHEALTHY, "row_remap_failure")]),
    ("remapped_rows", {"failure": False, "pending": True}, [(DEGRADED, "row_remap_pending")]),
    ("throttle_reasons", ["hw_power_brake_slowdown"], [(UNHEALTHY, "throttle")]),
    ("throttle_reasons", ["hw_slowdown", "sw_thermal_slowdown"],
     [(UNHEALTHY, "throttle"), (DEGRADED, "throttle")]),
    ("throttle_reasons", ["sw_power_cap"], []),
    ("temperature_c", 87, [(DEGRADED, "temperature")]),
    ("temperature_c", 86, []),
])
def test_each_rule(field: str, value: Any, expected: list[tuple[str, str]]) -> None:
    before = _readings()
    now = _readings(_gpu(0, **{field: value}), _gpu(1))
    assert _codes(compare(before, now)) == expected


def test_a_pending_retirement_counts_on_the_first_look_but_old_counters_do_not() -> None:
    now = _readings(_gpu(0, retired_pages={"single_bit": 9, "double_bit": 9, "pending": True}))
    assert _codes(compare(None, now)) == [(UNHEALTHY, "retirement_pending")]


def test_a_gpu_gone_from_the_bus_is_unhealthy() -> None:
    before = _readings()
    now = _readings(_gpu(0))
    findings = compare(before, now)
    assert _codes(findings) == [(UNHEALTHY, "gpu_lost")]
    assert "GPU 1 (00000000:3C:00.0) is gone" in findings[0].message


def test_new_xid_events_by_code() -> None:
    old = [{"code": 13, "pci_bus_id": "00000000:3B:00.0", "count": 1}]
    before = _readings(_gpu(0), _gpu(1), xid=old)
    assert compare(before, copy.deepcopy(before)) == []
    now = _readings(_gpu(0), _gpu(1), xid=[
        {"code": 13, "pci_bus_id": "00000000:3B:00.0", "count": 2},
        {"code": 79, "pci_bus_id": "00000000:3C:00.0", "count": 1},
    ])
    findings = compare(before, now)
    assert _codes(findings) == [(DEGRADED, "xid"), (UNHEALTHY, "xid")]
    assert "Xid 79 1 more time(s) on the GPU at 00000000:3C:00.0" in findings[1].message
    unread = {**now, "xid_events": None}
    assert compare(before, unread) == []


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty answer"),
    ("   \n", "empty answer"),
    ("\x00\x01\x02\ufffd\ufffd ok", "not text"),
    ("Paris is the the the the the the capital", "'the' 6 times in a row"),
    ("a b c " * 10, "one token repeated ('abc')"),
    ("the cat sat on the mat and the dog ran " * 5, "8 distinct words in 50"),
    ("!!!!!!!!!!!!", "one token repeated ('!')"),
])
def test_garbage_is_named(text: str, reason: str) -> None:
    assert reason in (garbage(text) or "")


def test_text_is_not_garbage() -> None:
    assert garbage("The capital of France is Paris, a city on the Seine.") is None
    # The stand-in engine's smoke answer: varied words, no collapse.
    assert garbage("as may made make made from go all to may with make at the wh") is None


def test_judge_against_the_reference() -> None:
    assert judge("Paris is the capital.", "Paris is the  capital.\n").ok
    differs = judge("Lyon is the capital.", "Paris is the capital.")
    assert not differs.ok and "differs from the reference" in differs.reason
    assert judge("Lyon is the capital.", None).ok
    assert judge("", None).reason == "empty answer"


def test_metrics_text() -> None:
    before = _readings()
    now = copy.deepcopy(before)
    now["gpus"][0]["ecc"]["volatile"]["uncorrected"] = 2
    now["gpus"][0]["throttle_reasons"] = ["hw_slowdown"]
    findings = compare(before, now)
    text = render(now, verdict(findings), findings, probe_ok=False, probe_seconds=0.25)
    lines = text.splitlines()
    assert "onecat_node_verdict 2" in lines
    assert 'onecat_watch_findings{severity="unhealthy",rule="ecc_uncorrected"} 1' in lines
    assert ('onecat_gpu_ecc_errors_total{gpu="GPU-00000000",type="uncorrected",'
            'counter="volatile"} 2') in lines
    assert 'onecat_gpu_throttle_active{gpu="GPU-00000000",reason="hw_slowdown"} 1' in lines
    assert 'onecat_gpu_throttle_active{gpu="GPU-00000001",reason="hw_slowdown"} 0' in lines
    assert "onecat_quality_probe_ok 0" in lines and "onecat_quality_probe_seconds 0.250" in lines
    # Every sample line belongs to a declared metric family.
    declared = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    assert {line.split("{")[0].split()[0] for line in lines if not line.startswith("#")} <= declared


def test_the_probe_waits_while_a_deploy_changes_the_unit(tmp_path) -> None:
    """No probe (and so no restart by the watch) while the unit on disk is not the one that
    passed the gate: the deploy's own gate judges the new server."""
    import hashlib
    import json

    from onecat.watch.look import serving_probe

    unit = tmp_path / "vllm.service"
    unit.write_text("[Service]\nExecStart=/usr/bin/docker run engine:1\n")
    record = tmp_path / "serving.json"
    passed = {"url": "http://127.0.0.1:8000/", "served_model_name": "m", "unit": "vllm.service",
              "unit_sha256": hashlib.sha256(unit.read_bytes()).hexdigest(), "image_id": "sha256:1"}
    record.write_text(json.dumps(passed))
    probe = serving_probe(record, ["p"], tmp_path / "refs.json", "k", unit_dir=tmp_path)
    assert probe is not None and probe.url == "http://127.0.0.1:8000" and probe.model == "m"
    assert probe.identity.startswith("sha256:1|")
    unit.write_text("[Service]\nExecStart=/usr/bin/docker run engine:2\n")
    assert serving_probe(record, ["p"], tmp_path / "refs.json", "k", unit_dir=tmp_path) is None
    unit.unlink()
    assert serving_probe(record, ["p"], tmp_path / "refs.json", "k", unit_dir=tmp_path) is None
    record.write_text("{not json")
    assert serving_probe(record, ["p"], tmp_path / "refs.json", "k", unit_dir=tmp_path) is None


# ---- conditions that last (issue: a pending retirement is not an event) ----------------

def test_conditions_are_findings_on_every_look_while_they_last() -> None:
    from onecat.watch.deltas import compare

    gpu = {"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:3B:00.0",
           "ecc": {"volatile": {"corrected": 0, "uncorrected": 0}},
           "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": True},
           "remapped_rows": {"pending": None, "failure": None}}
    readings = {"gpus": [gpu]}
    assert [f.code for f in compare(None, readings)] == ["retirement_pending"]
    assert [f.code for f in compare(readings, readings)] == ["retirement_pending"]
    lost = {"gpus": [{"index": 0, "uuid": None, "pci_bus_id": None, "reachable": False,
                      "lost": True}]}
    # The GPU that was readable last time is the lost one now: one finding, not "gone" too.
    assert [f.code for f in compare(readings, lost)] == ["gpu_lost"]
    assert [f.code for f in compare(lost, lost)] == ["gpu_lost"]
