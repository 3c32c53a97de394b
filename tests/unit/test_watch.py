"""The watch's rules (onecat.watch.deltas, throttle), probe judge and metrics: every look
judges the state with the health stage's own rules and what arrived since the previous look;
a card's counters' history is never news."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from onecat.watch import throttle
from onecat.watch.deltas import (
    DEGRADED,
    HEALTHY,
    UNHEALTHY,
    Limits,
    compare,
    verdict,
    watch_thresholds,
)
from onecat.watch.metrics import render

E, W = "error", "warning"


def _gpu(index: int, **changes: Any) -> dict[str, Any]:
    gpu = {
        "index": index,
        "name": "Tesla V100-PCIE-16GB",
        "uuid": f"GPU-{index:08d}",
        "serial": f"03231170112{index:02d}",
        "pci_bus_id": f"00000000:{0x3B + index:02X}:00.0",
        "compute_capability": "7.0",
        "ecc_mode": True,
        "ecc": {"volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 5, "uncorrected": 0}},
        "retired_pages": {"single_bit": 0, "double_bit": 2, "pending": False},
        "remapped_rows": {"correctable": None, "uncorrectable": None, "failure": None,
                          "pending": None},
        "pcie": {"gen": 3, "max_gen": 3, "width": 16, "max_width": 16},
        "throttle_reasons": ["gpu_idle"],
        "temperature_c": 40,
    }
    gpu.update(changes)
    return gpu


def _readings(*gpus: dict[str, Any], xid: list[dict[str, Any]] | None = None,
              boot: str | None = None) -> dict[str, Any]:
    chosen = list(gpus) or [_gpu(0), _gpu(1)]
    return {"gpu_count": len(chosen), "gpus": chosen, "boot_id": boot,
            "xid_events": [] if xid is None else xid}


def _codes(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.severity, f.code) for f in findings]


def test_nothing_wrong_and_nothing_new_is_healthy() -> None:
    before = _readings()
    assert compare(before, copy.deepcopy(before)) == []
    assert verdict(compare(None, before)) == HEALTHY


def test_a_cards_history_warns_on_every_look_and_never_drains() -> None:
    """Lifetime uncorrectable errors, none since the driver loaded (the seed's "historical"
    case): the health stage's warning, on every look, the same as at deploy."""
    old = _gpu(1, ecc={"volatile": {"corrected": 0, "uncorrected": 0},
                       "aggregate": {"corrected": 5, "uncorrected": 3}})
    before = _readings(_gpu(0), old)
    assert _codes(compare(None, before)) == [(W, "ecc_aggregate_uncorrected")]
    assert _codes(compare(before, copy.deepcopy(before))) == [(W, "ecc_aggregate_uncorrected")]
    assert verdict(compare(before, before)) == DEGRADED


def test_an_uncorrectable_error_since_the_driver_loaded_lasts_until_it_reloads() -> None:
    """A condition, not an event: on the look it arrives, on every look after, and on the very
    first look (it is never taken as the baseline)."""
    before = _readings()
    now = copy.deepcopy(before)
    now["gpus"][1]["ecc"]["volatile"]["uncorrected"] = 1
    for previous in (before, now, None):
        findings = compare(previous, now)
        assert _codes(findings) == [(E, "ecc_volatile_uncorrected")], previous
        assert "GPU 1 (00000000:3C:00.0, serial 0323117011201) has 1 uncorrectable ECC " \
            "error since the driver loaded" in findings[0].message
        assert verdict(findings) == UNHEALTHY
    # The driver reloaded (a reset, a reboot): the counter is 0 again, so is the condition.
    assert compare(now, before) == []


def test_a_threshold_above_zero_leaves_the_change_rule_to_speak() -> None:
    before = _readings()
    now = copy.deepcopy(before)
    now["gpus"][1]["ecc"]["volatile"]["uncorrected"] = 1
    lenient = watch_thresholds()
    lenient = type(lenient)(**{**lenient.__dict__, "max_volatile_uncorrected_ecc": 5})
    findings = compare(before, now, thresholds=lenient)
    assert _codes(findings) == [(E, "ecc_uncorrected")]
    assert "1 new uncorrectable ECC error(s) since the last look" in findings[0].message


def test_corrected_errors_warn_only_in_a_burst() -> None:
    before = _readings()
    few = copy.deepcopy(before)
    few["gpus"][0]["ecc"]["volatile"]["corrected"] = 99
    assert compare(before, few) == []
    burst = copy.deepcopy(before)
    burst["gpus"][0]["ecc"]["volatile"]["corrected"] = 100
    assert _codes(compare(before, burst)) == [(W, "ecc_corrected")]
    assert compare(before, burst, Limits(corrected_ecc=1000)) == []


def test_a_counter_that_fell_is_a_driver_reload_not_an_error() -> None:
    before = _readings(_gpu(0, ecc={"volatile": {"corrected": 500, "uncorrected": 0}}), _gpu(1))
    now = _readings(_gpu(0, ecc={"volatile": {"corrected": 0, "uncorrected": 0}}), _gpu(1))
    assert compare(before, now) == []


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("retired_pages", {"single_bit": 0, "double_bit": 2, "pending": True},
     [(E, "retired_pages_pending")]),
    ("retired_pages", {"single_bit": 0, "double_bit": 3, "pending": False},
     [(E, "pages_retired_double_bit")]),
    ("retired_pages", {"single_bit": 1, "double_bit": 2, "pending": False},
     [(W, "pages_retired_single_bit")]),
    ("retired_pages", {"single_bit": 40, "double_bit": 23, "pending": False},
     [(E, "retired_pages"), (E, "pages_retired_double_bit"), (W, "pages_retired_single_bit")]),
    ("remapped_rows", {"failure": True, "pending": False}, [(E, "remapped_rows")]),
    ("remapped_rows", {"failure": False, "pending": True}, [(E, "remapped_rows")]),
    # One sample of a slowdown warns, whatever its cause (sustained: throttle.py).
    ("throttle_reasons", ["hw_slowdown", "hw_power_brake_slowdown"], [(W, "throttle")]),
    ("throttle_reasons", ["hw_slowdown", "hw_thermal_slowdown"], [(W, "throttle")]),
    ("throttle_reasons", ["sw_power_cap"], []),
    ("temperature_c", 87, [(W, "temperature")]),
    ("temperature_c", 86, []),
    ("display_active", True, [(E, "display_active")]),
])
def test_each_rule(field: str, value: Any, expected: list[tuple[str, str]]) -> None:
    before = _readings()
    now = _readings(_gpu(0, **{field: value}), _gpu(1))
    assert _codes(compare(before, now)) == expected


def test_the_watch_leaves_out_what_the_deploy_checks_once() -> None:
    """The engine holds the GPUs (no foreign process), and Xid events are judged as events."""
    now = _readings(_gpu(0, processes=[{"pid": 7, "name": "python3", "used_mib": 14000}]), _gpu(1))
    assert compare(now, now) == []


def test_old_counters_are_no_news_on_the_first_look() -> None:
    now = _readings(_gpu(0, retired_pages={"single_bit": 9, "double_bit": 9, "pending": False}),
                    _gpu(1))
    assert compare(None, now) == []


def test_a_gpu_gone_from_the_bus_is_unhealthy_on_every_look() -> None:
    before = _readings()
    now = _readings(_gpu(0))
    now["gpu_count"] = 1
    for previous in (before, now):
        findings = compare(previous, now)
        assert _codes(findings) == [(E, "gpu_count")]
        assert "expected 2 GPUs, NVML sees 1" in findings[0].message
    # More GPUs than expected: the vanished one is named by the change rule.
    many = _readings(_gpu(0), _gpu(1), _gpu(2))
    fewer = _readings(_gpu(0), _gpu(1))
    findings = compare(many, fewer)
    assert _codes(findings) == [(E, "gpu_lost")]
    assert "GPU 2 (00000000:3D:00.0) is gone" in findings[0].message
    assert _codes(compare(None, many, thresholds=watch_thresholds(3))) == []


def test_new_xid_events_by_code() -> None:
    old = [{"code": 13, "pci_bus_id": "00000000:3B:00.0", "count": 1}]
    before = _readings(_gpu(0), _gpu(1), xid=old)
    assert compare(before, copy.deepcopy(before)) == []
    now = _readings(_gpu(0), _gpu(1), xid=[
        {"code": 13, "pci_bus_id": "00000000:3B:00.0", "count": 2},
        {"code": 79, "pci_bus_id": "00000000:3C:00.0", "count": 1},
    ])
    findings = compare(before, now)
    assert _codes(findings) == [(W, "xid"), (E, "xid")]
    assert "Xid 79 (GPU has fallen off the bus) 1 more time(s) on the GPU at " \
        "00000000:3C:00.0" in findings[1].message
    unread = {**now, "xid_events": None}
    assert compare(before, unread) == []


def test_xid_63_alone_warns_and_79_is_an_error() -> None:
    """NVIDIA's catalog: 63 is a page-retirement record (ignore alone); 79 fell off the bus."""
    before = _readings()
    now = _readings(xid=[{"code": 63, "pci_bus_id": "00000000:3C:00.0", "count": 1}])
    assert _codes(compare(before, now)) == [(W, "xid")]
    assert verdict(compare(before, now)) == DEGRADED
    now = _readings(xid=[{"code": 79, "pci_bus_id": "00000000:3C:00.0", "count": 1}])
    assert verdict(compare(before, now)) == UNHEALTHY


def test_the_first_look_counts_every_xid_since_boot() -> None:
    now = _readings(xid=[{"code": 48, "pci_bus_id": "00000000:3C:00.0", "count": 1}])
    assert _codes(compare(None, now)) == [(E, "xid")]


def test_a_fault_that_recurs_after_a_reboot_is_new_even_at_the_same_count() -> None:
    """Baselines carry the boot id: the kernel log and the volatile counters start again at
    every boot, so the previous boot's counts are no baseline."""
    xid48 = [{"code": 48, "pci_bus_id": "00000000:3C:00.0", "count": 1}]
    first = _readings(xid=xid48, boot="boot-a")
    first["gpus"][1]["ecc"]["volatile"]["corrected"] = 150
    again = copy.deepcopy(first)
    assert compare(first, again) == []  # same boot, same counts: nothing new
    rebooted = copy.deepcopy(first)
    rebooted["boot_id"] = "boot-b"
    assert _codes(compare(first, rebooted)) == [(W, "ecc_corrected"), (E, "xid")]
    # Without a boot id (an older state file) a counter at the same value is no news.
    assert compare({**first, "boot_id": None}, rebooted) == []


def test_a_sustained_slowdown_fails_by_gpuds_rule_and_names_its_cause() -> None:
    """gpud: 0.6 slowdown minutes per minute over 10 minutes (6 of the last 10) is unhealthy;
    fewer warn only. The power brake and heat are told apart."""
    brake = _readings(_gpu(0, throttle_reasons=["hw_slowdown", "hw_power_brake_slowdown"]),
                      _gpu(1, throttle_reasons=["hw_slowdown", "hw_thermal_slowdown"]))
    history: dict[str, Any] = {}
    start = 1_800_000_000.0
    for minute in range(5):
        history = throttle.record(history, brake, start + 60 * minute)
        assert throttle.findings(history, brake, start + 60 * minute) == []
    history = throttle.record(history, brake, start + 300)
    found = throttle.findings(history, brake, start + 300)
    assert _codes(found) == [(E, "throttle_sustained")] * 2
    assert "power brake in 6 of the last 10 minutes" in found[0].message
    assert "PSU" in found[0].message and "thermal in 6 of the last 10" in found[1].message
    # Ten minutes later the old minutes left the window: one sample again, no error.
    later = start + 300 + 600
    history = throttle.record(history, brake, later)
    assert throttle.findings(history, brake, later) == []
    assert history["looks"]["GPU-00000000"]["power_brake"] == 7


def test_a_sustained_slowdown_stays_failed_until_five_quiet_minutes() -> None:
    """Issue 46: once sustained, a cause stays failed while it flickers on (one hot minute in
    four does not readmit the node) and clears after QUIET_S without a slowdown minute, so the
    watch readmits a cooled node by itself; the message says how long it has been quiet."""
    hot = _readings(_gpu(0, throttle_reasons=["hw_slowdown", "hw_thermal_slowdown"]), _gpu(1))
    cool = _readings(_gpu(0), _gpu(1))
    history: dict[str, Any] = {}
    start = 1_800_000_000.0
    for minute in range(6):
        history = throttle.record(history, hot, start + 60 * minute)
    assert _codes(throttle.findings(history, hot, start + 300)) == [(E, "throttle_sustained")]
    # Cool for four minutes, hot once more, cool again: below gpud's rate from minute 9 on.
    timeline = [cool] * 4 + [hot] + [cool] * 5
    seen = []
    for offset, readings in enumerate(timeline, start=6):
        at = start + 60 * offset
        history = throttle.record(history, readings, at)
        seen.append(throttle.findings(history, readings, at))
    assert [bool(found) for found in seen] == [True] * 9 + [False], seen
    assert "the last 4 minute(s) ago: out until 5 minutes pass without it" in seen[8][0].message
    assert history["sustained"] == {}
    # The next failure needs gpud's rate again.
    history = throttle.record(history, hot, start + 60 * 16)
    assert throttle.findings(history, hot, start + 60 * 16) == []


def test_slowdown_minutes_not_looks_count() -> None:
    brake = _readings(_gpu(0, throttle_reasons=["hw_slowdown"]), _gpu(1))
    history: dict[str, Any] = {}
    for second in range(0, 120, 5):  # 24 looks in 2 minutes: 2 minutes, not 24 events
        history = throttle.record(history, brake, 1_800_000_000.0 + second)
    assert throttle.findings(history, brake, 1_800_000_119.0) == []
    assert throttle.record("garbage", brake, 0.0)["minutes"]  # type: ignore[arg-type]


# The probe's judges (known answers, degeneracy, likelihood): tests/unit/test_answer_judging.py.


def test_metrics_text_is_shaped_like_dcgm_exporter() -> None:
    before = _readings(xid=[{"code": 63, "pci_bus_id": "00000000:3B:00.0", "count": 2}])
    now = copy.deepcopy(before)
    now["gpus"][0]["ecc"]["volatile"]["uncorrected"] = 2
    now["gpus"][0]["throttle_reasons"] = ["hw_slowdown"]
    findings = compare(before, now)
    history = throttle.record({}, now, 1_800_000_000.0)
    text = render(now, verdict(findings), findings, probe_ok=False, probe_seconds=0.25,
                  mode="draining", throttle_looks=history["looks"])
    lines = text.splitlines()
    gpu0 = ('gpu="0",UUID="GPU-00000000",pci_bus_id="00000000:3B:00.0",'
            'modelName="Tesla V100-PCIE-16GB"')
    gpu1 = gpu0.replace('"0"', '"1"').replace("00000000:3B", "00000000:3C").replace(
        "GPU-00000000", "GPU-00000001")
    assert "onecat_node_verdict 2" in lines
    assert 'onecat_watch_findings{severity="error"} 1' in lines
    assert 'onecat_watch_findings{severity="warning"} 1' in lines
    # Volatile and aggregate ECC are separate metrics: a sum() never mixes them.
    assert f"onecat_gpu_ecc_uncorrected_volatile_total{{{gpu0}}} 2" in lines
    assert f"onecat_gpu_ecc_uncorrected_aggregate_total{{{gpu0}}} 0" in lines
    assert f"onecat_gpu_ecc_corrected_aggregate_total{{{gpu1}}} 5" in lines
    assert f'onecat_gpu_xid_errors_total{{{gpu0},xid="63"}} 2' in lines
    assert f'onecat_gpu_throttle_active{{{gpu0},reason="hw_slowdown"}} 1' in lines
    assert f'onecat_gpu_throttle_active{{{gpu1},reason="hw_slowdown"}} 0' in lines
    assert f'onecat_gpu_slowdown_looks_total{{{gpu0},cause="hw_slowdown"}} 1' in lines
    assert f'onecat_gpu_slowdown_looks_total{{{gpu1},cause="power_brake"}} 0' in lines
    assert f"onecat_gpu_lost{{{gpu1}}} 0" in lines
    assert "onecat_quality_probe_ok 0" in lines and "onecat_quality_probe_seconds 0.250" in lines
    # The mode is a number: no label whose value changes with every transition.
    assert "onecat_node_in_rotation 0" in lines and "onecat_watch_mode 1" in lines
    assert "TYPE onecat_gpu_ecc_uncorrected_volatile_total counter" in text
    assert "onecat_gpu_ecc_errors_total" not in text
    # Every sample line belongs to a declared metric family; counters end in _total.
    declared = {line.split()[2]: line.split()[3] for line in lines if line.startswith("# TYPE ")}
    assert {line.split("{")[0].split()[0] for line in lines if not line.startswith("#")} <= set(
        declared)
    assert all(name.endswith("_total") for name, kind in declared.items() if kind == "counter")


def test_metrics_name_the_serviced_card_by_serial_and_a_planned_drain() -> None:
    """The service report's card is 1 with its serial (the ticket's id), the other card 0;
    a card the report names that NVML cannot read now (lost) is still written, from the
    report; the deploy's own drain is its own series (issue 52: alerts stay silent for it)."""
    now = _readings()
    now["gpus"][0]["serial"] = "0324917012345"
    lost = {"index": 7, "serial": "0324917099999", "uuid": "GPU-7",
            "pci_bus_id": "00000000:AF:00.0", "name": "Tesla V100-PCIE-16GB"}
    text = render(now, "unhealthy", [], mode="service",
                  service_cards=[{"index": 0, "serial": "0324917012345",
                                  "pci_bus_id": "00000000:3B:00.0"}, lost],
                  deploy_drain=True)
    lines = text.splitlines()
    served = [line for line in lines if line.startswith("onecat_gpu_service_required{")]
    assert any('gpu="0"' in line and 'serial="0324917012345"' in line and line.endswith(" 1")
               for line in served), served
    assert any('gpu="1"' in line and line.endswith(" 0") for line in served), served
    assert any('gpu="7"' in line and 'serial="0324917099999"' in line and line.endswith(" 1")
               for line in served), served
    assert "onecat_node_deploy_drain 1" in lines
    healthy = render(now, "healthy", [], mode="in", deploy_drain=False).splitlines()
    assert "onecat_node_deploy_drain 0" in healthy
    assert not [line for line in healthy
                if line.startswith("onecat_gpu_service_required{") and line.endswith(" 1")]
    # Without an agent (no gateway), the series is not claimed either way.
    assert "onecat_node_deploy_drain" not in render(now, "healthy", [], mode="in")


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
    pending = _gpu(0, retired_pages={"single_bit": 0, "double_bit": 0, "pending": True})
    readings = _readings(pending, _gpu(1))
    assert [f.code for f in compare(None, readings)] == ["retired_pages_pending"]
    assert [f.code for f in compare(readings, readings)] == ["retired_pages_pending"]
    lost = _readings({"index": 0, "uuid": None, "pci_bus_id": None, "reachable": False,
                      "lost": True}, _gpu(1))
    # The GPU that was readable last time is the lost one now: one finding, not "gone" too.
    assert [f.code for f in compare(readings, lost)] == ["gpu_lost"]
    assert [f.code for f in compare(lost, lost)] == ["gpu_lost"]
    assert [f.code for f in compare(None, lost)] == ["gpu_lost"]
