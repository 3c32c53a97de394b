"""The health judge: pure readings in, exact verdicts and problem lists out."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from onecat.health.judge import (
    SLOWDOWN_TEMPERATURE_C,
    Thresholds,
    fails,
    judge,
    label,
    recommend,
    summary,
)
from onecat.health.local import format_report, with_judgement

E, W = "error", "warning"


def v100(index: int, **changes: Any) -> dict[str, Any]:
    """A healthy idle Tesla V100-PCIE-16GB; `changes` replace top-level or dotted keys."""
    gpu: dict[str, Any] = {
        "index": index,
        "name": "Tesla V100-PCIE-16GB",
        "uuid": f"GPU-{index}",
        "serial": f"03231170112{index:02d}",
        "pci_bus_id": ("00000000:3B:00.0", "00000000:5E:00.0")[index],
        "compute_capability": "7.0",
        "memory_total_mib": 16160,
        "memory_used_mib": 0,
        "ecc_mode": True,
        "ecc": {"volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 0, "uncorrected": 0}},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False},
        "remapped_rows": {"correctable": None, "uncorrectable": None, "pending": None,
                          "failure": None},
        "pcie": {"gen": 3, "max_gen": 3, "width": 16, "max_width": 16},
        "temperature_c": 35,
        "power_draw_w": 26.0,
        "power_limit_w": 250.0,
        "throttle_reasons": ["gpu_idle"],
        "persistence_mode": True,
        "display_active": False,
        "display_mode": False,
        "processes": [],
        "read_errors": [],
    }
    for key, value in changes.items():
        *path, last = key.split("__")
        target = gpu
        for part in path:
            target = target[part]
        target[last] = value
    return gpu


PCIE_PAIR = {"gpus": [0, 1], "topology": "PHB", "pcie_path": "PHB", "nvlinks": None,
             "p2p_read": "CHIPSET_NOT_SUPPORTED", "p2p_write": "CHIPSET_NOT_SUPPORTED",
             "p2p_nvlink": "NOT_SUPPORTED"}
NVLINK_PAIR = {"gpus": [0, 1], "topology": "NV2", "pcie_path": "NODE", "nvlinks": 2,
               "p2p_read": "OK", "p2p_write": "OK", "p2p_nvlink": "OK"}


def node(*gpus: dict[str, Any], pairs: list[dict[str, Any]] | None = None,
         xid: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    gpus = gpus or (v100(0), v100(1))
    return {
        "host": "gpu-node-07",
        "driver_version": "535.261.03",
        "cuda_driver_version": "12.2",
        "gpu_count": len(gpus),
        "gpus": list(gpus),
        "pairs": [copy.deepcopy(PCIE_PAIR)] if pairs is None else pairs,
        "read_errors": [],
        "xid_source": "/var/log/kernel-this-boot.log",
        "xid_error": None,
        "xid_events": xid or [],
    }


def xid(code: int, gpu: int | None, bus: str, count: int = 1) -> dict[str, Any]:
    return {"code": code, "pci_bus_id": bus, "gpu": gpu, "count": count, "message": "..."}


def checks(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(p["severity"], p["check"], p["gpu"]) for p in result["problems"]]


# ---- the scenarios, as readings -----------------------------------

SCENARIOS = {
    "healthy PCIe pair": (node(), "healthy", []),
    "healthy NVLink pair": (node(pairs=[NVLINK_PAIR]), "healthy", []),
    "aggregate uncorrectable ECC on GPU 1, none since the driver loaded": (
        node(v100(0), v100(1, ecc__aggregate__uncorrected=2, retired_pages__double_bit=2)),
        "degraded", [(W, "ecc_aggregate_uncorrected", 1)]),
    "uncorrectable ECC since the driver loaded on GPU 1": (
        node(v100(0), v100(1, ecc__volatile__uncorrected=1, ecc__aggregate__uncorrected=3,
                      retired_pages__double_bit=2)),
        "unhealthy", [(E, "ecc_volatile_uncorrected", 1)]),
    "page pending retirement": (
        node(v100(0, retired_pages__pending=True, retired_pages__single_bit=3), v100(1)),
        "unhealthy", [(E, "retired_pages_pending", 0)]),
    "one link at Gen3 x8": (
        node(v100(0), v100(1, pcie__width=8)), "degraded", [(W, "pcie_link", 1)]),
    "display active": (
        node(v100(0, display_active=True, display_mode=True), v100(1)),
        "unhealthy", [(E, "display_active", 0)]),
    "foreign process holding 3 GiB": (
        node(v100(0, processes=[{"pid": 31337, "name": "python3", "used_mib": 3072,
                                 "type": "C"}]), v100(1)),
        "unhealthy", [(E, "foreign_process", 0)]),
    "only one GPU visible": (
        node(v100(0), pairs=[], xid=[xid(79, None, "00000000:5E:00.0")]),
        "unhealthy", [(E, "gpu_count", None), (E, "xid", None)]),
    "H100: no retired pages, remapped rows": (
        node(*(v100(i, name="NVIDIA H100 PCIe", compute_capability="9.0",
                    memory_total_mib=81559, pcie__gen=5, pcie__max_gen=5,
                    retired_pages={"single_bit": None, "double_bit": None, "pending": None},
                    remapped_rows={"correctable": 0, "uncorrectable": 0, "pending": False,
                                   "failure": False}) for i in (0, 1)),
             pairs=[NVLINK_PAIR]),
        "healthy", []),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_exact_problems(name: str) -> None:
    readings, verdict, expected = SCENARIOS[name]
    result = judge(readings)
    assert (result["verdict"], checks(result)) == (verdict, expected)


def test_every_gpu_message_names_index_bus_and_serial() -> None:
    for readings, _, _ in SCENARIOS.values():
        for problem in judge(readings)["problems"]:
            if problem["gpu"] is not None:
                gpu = readings["gpus"][problem["gpu"]]
                assert label(gpu) in problem["message"]


def test_messages_say_what_to_do() -> None:
    readings, _, _ = SCENARIOS["aggregate uncorrectable ECC on GPU 1, none since the driver "
                               "loaded"]
    [problem] = judge(readings)["problems"]
    assert problem["message"] == (
        "GPU 1 (00000000:5E:00.0, serial 0323117011201) has had 2 uncorrectable ECC errors in "
        "its lifetime but none since the driver loaded and no page pending retirement: history, "
        "not a current fault. Reset the counters where supported (`nvidia-smi -i 1 -p 1`), burn "
        "it in under load (`onecat health --local` after a long benchmark) and watch: keep the "
        "card if no error returns")
    readings, _, _ = SCENARIOS["page pending retirement"]
    assert "reboot the node" in judge(readings)["problems"][0]["message"]
    readings, _, _ = SCENARIOS["foreign process holding 3 GiB"]
    assert "stop it (`kill 31337`)" in judge(readings)["problems"][0]["message"]


def test_label_without_serial() -> None:
    assert label(v100(1, serial=None)) == "GPU 1 (00000000:5E:00.0, serial unknown)"


# ---- thresholds at their edges ---------------------------------------------

@pytest.mark.parametrize(("single", "double", "last_week", "expected"), [
    (0, 15, None, []),
    (10, 5, None, []),  # DCGM's soft limit counts double-bit pages only
    (62, 0, None, []),
    (0, 16, None, [(W, "retired_pages", 0)]),  # above the soft limit, rate unknown
    (0, 16, 1, [(W, "retired_pages", 0)]),  # one new DBE page a week is tolerated
    (0, 16, 2, [(E, "retired_pages", 0)]),  # more than one a week fails
    (60, 3, None, [(E, "retired_pages", 0)]),  # 63 in total fails
])
def test_retired_page_limits_follow_dcgm(single: int, double: int, last_week: int | None,
                                         expected: list[Any]) -> None:
    """DcgmHealthWatch.cpp:1834-1886: total >= 63 fails; DBE > 15 fails at > 1 a week."""
    readings = node(v100(0, retired_pages__single_bit=single, retired_pages__double_bit=double,
                         retired_pages__double_bit_last_week=last_week), v100(1))
    assert checks(judge(readings)) == expected


def test_retired_page_limits_are_parameters() -> None:
    readings = node(v100(0, retired_pages__single_bit=5, retired_pages__double_bit=5), v100(1))
    assert checks(judge(readings, Thresholds(warn_retired_pages=4))) == [(W, "retired_pages", 0)]
    assert checks(judge(readings, Thresholds(max_retired_pages=10))) == [(E, "retired_pages", 0)]
    fast = node(v100(0, retired_pages__double_bit=20, retired_pages__double_bit_last_week=3),
                v100(1))
    assert checks(judge(fast, Thresholds(max_double_bit_retirements_per_week=3))) == [
        (W, "retired_pages", 0)]


def test_lifetime_ecc_is_an_error_when_a_page_is_pending_or_the_present_is_unknown() -> None:
    # One reason per fault: the pending page is the error; the lifetime count adds no second one.
    pending = node(v100(0, ecc__aggregate__uncorrected=1, retired_pages__pending=True), v100(1))
    assert checks(judge(pending)) == [(E, "retired_pages_pending", 0)]
    unknown = node(v100(0, ecc__aggregate__uncorrected=1, ecc__volatile__uncorrected=None),
                   v100(1))
    assert checks(judge(unknown)) == [(E, "ecc_aggregate_uncorrected", 0)]


@pytest.mark.parametrize("code", [46, 48, 61, 62, 64, 74, 79, 95, 119])
def test_xid_codes_that_mean_a_failed_card_are_errors(code: int) -> None:
    readings = node(xid=[xid(code, 0, "00000000:3B:00.0")])
    [problem] = judge(readings)["problems"]
    assert (problem["severity"], problem["check"]) == (E, "xid")
    assert "see NVIDIA's Xid catalog" not in problem["message"]


@pytest.mark.parametrize("code", [13, 31, 43, 45, 54, 56, 57, 58, 63, 92, 94, 154])
def test_xid_codes_nvidia_and_dcgm_do_not_fail_are_warnings(code: int) -> None:
    """NVIDIA's catalog says IGNORE (63, 92), RESTART_APP (13, 31, 94), a physical check (54)
    or follow another Xid (45, 154); DCGM only warns: the node keeps serving."""
    readings = node(xid=[xid(code, 0, "00000000:3B:00.0")])
    [problem] = judge(readings)["problems"]
    assert (problem["severity"], problem["check"]) == (W, "xid")
    assert "see NVIDIA's Xid catalog" not in problem["message"]


@pytest.mark.parametrize(("corrected", "expected"), [
    (50_000_000, []),
    (50_000_001, [(W, "ecc_volatile_corrected", 0)]),
])
def test_corrected_ecc_warns_above_fifty_million(corrected: int, expected: list[Any]) -> None:
    readings = node(v100(0, ecc__volatile__corrected=corrected), v100(1))
    assert checks(judge(readings)) == expected


def test_uncorrected_ecc_limits() -> None:
    readings = node(v100(0, ecc__volatile__uncorrected=1, ecc__aggregate__uncorrected=1),
                    v100(1))
    assert checks(judge(readings)) == [(E, "ecc_volatile_uncorrected", 0)]
    within = Thresholds(max_volatile_uncorrected_ecc=1)
    assert checks(judge(readings, within)) == [(E, "ecc_aggregate_uncorrected", 0)]
    lenient = Thresholds(max_aggregate_uncorrected_ecc=1, max_volatile_uncorrected_ecc=1)
    assert checks(judge(readings, lenient)) == []


def test_ecc_disabled_or_unreported() -> None:
    readings = node(v100(0, ecc_mode=False), v100(1, ecc_mode=None))
    result = judge(readings)
    assert checks(result) == [(E, "ecc_mode", 0), (E, "ecc_mode", 1)]
    assert "`nvidia-smi -i 0 -e 1` and reboot" in result["problems"][0]["message"]
    assert checks(judge(readings, Thresholds(require_ecc=False))) == []


def test_remapped_rows_pending_and_failure_are_errors() -> None:
    rows = {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": True}
    gpu = v100(0, remapped_rows=rows,
               retired_pages={"single_bit": None, "double_bit": None, "pending": None})
    assert checks(judge(node(gpu, v100(1)))) == [(E, "remapped_rows", 0), (E, "remapped_rows", 0)]


def test_unknown_memory_repair_state_warns() -> None:
    gpu = v100(0, retired_pages={"single_bit": None, "double_bit": None, "pending": None})
    assert checks(judge(node(gpu, v100(1)))) == [(W, "memory_repair", 0)]


def test_pcie_below_hard_limit_is_an_error_and_below_max_a_warning() -> None:
    slot_x8 = v100(0, pcie__width=8, pcie__max_width=8)
    assert checks(judge(node(slot_x8, v100(1)))) == [(E, "pcie_limit", 0)]
    gen1_idle = v100(1, pcie__gen=1)
    result = judge(node(v100(0), gen1_idle))
    assert checks(result) == [(W, "pcie_link", 1)]
    assert "An idle GPU may downtrain its link to save power (this one reports idle)" in (
        result["problems"][0]["message"])
    assert checks(judge(node(slot_x8, v100(1)), Thresholds(min_pcie_width=8))) == []


def test_gpu_count_fewer_is_error_more_is_warning() -> None:
    assert checks(judge(node(v100(0), pairs=[]))) == [(E, "gpu_count", None)]
    assert checks(judge(node(), Thresholds(expected_gpus=1))) == [(W, "gpu_count", None)]
    assert checks(judge(node(v100(0), pairs=[]), Thresholds(expected_gpus=1))) == []


def test_compute_capability_and_memory_minimums() -> None:
    pascal = v100(0, name="Tesla P100-PCIE-16GB", compute_capability="6.0")
    result = judge(node(pascal, v100(1)))
    assert checks(result) == [(E, "compute_capability", 0)]
    assert "compute capability 6.0, below the required 7.0" in result["problems"][0]["message"]
    assert checks(judge(node(), Thresholds(min_compute_capability="7.5"))) == [
        (E, "compute_capability", 0), (E, "compute_capability", 1)]
    assert checks(judge(node(), Thresholds(min_compute_capability="10.0"))) != []
    assert checks(judge(node(), Thresholds(min_memory_mib=32000))) == [
        (E, "memory_size", 0), (E, "memory_size", 1)]


def test_display_and_processes_can_be_allowed() -> None:
    readings, _, _ = SCENARIOS["display active"]
    assert checks(judge(readings, Thresholds(allow_display_active=True))) == []
    readings, _, _ = SCENARIOS["foreign process holding 3 GiB"]
    assert checks(judge(readings, Thresholds(allow_foreign_processes=True))) == []
    assert checks(judge(readings, Thresholds(allowed_processes=("python",)))) == []
    assert checks(judge(readings, Thresholds(allowed_processes=("vllm",)))) == [
        (E, "foreign_process", 0)]


def test_temperature_and_slowdown_warn() -> None:
    """One limit for the deploy, the watch and the burn-in: V100's slowdown temperature."""
    assert Thresholds().max_temperature_c == SLOWDOWN_TEMPERATURE_C == 87
    hot = v100(1, temperature_c=87, throttle_reasons=["hw_slowdown", "sw_power_cap"])
    result = judge(node(v100(0), hot))
    assert checks(result) == [(W, "temperature", 1), (W, "throttle", 1)]
    message = result["problems"][1]["message"]
    assert "held down (hw_slowdown) by hardware slowdown without" in message
    assert checks(judge(node(v100(0), v100(1, temperature_c=86)))) == []


def test_one_slowdown_sample_warns_and_names_heat_or_the_power_brake() -> None:
    """nvml.h: HW_SLOWDOWN (0x8) comes with HW_THERMAL_SLOWDOWN (0x40) for heat and with
    HW_POWER_BRAKE_SLOWDOWN (0x80) for the power supply's brake: one warning, its cause named."""
    thermal = judge(node(v100(0), v100(1, throttle_reasons=["hw_slowdown",
                                                            "hw_thermal_slowdown"])))
    brake = judge(node(v100(0, throttle_reasons=["hw_slowdown", "hw_power_brake_slowdown"]),
                       v100(1)))
    assert checks(thermal) == [(W, "throttle", 1)] and checks(brake) == [(W, "throttle", 0)]
    assert "by heat (hardware thermal slowdown)" in thermal["problems"][0]["message"]
    assert "by the power brake" in brake["problems"][0]["message"]
    assert "PSU" in brake["problems"][0]["message"]


def test_xid_known_bad_codes_are_errors_others_warnings() -> None:
    events = [xid(13, 0, "00000000:3B:00.0", 2), xid(48, 1, "00000000:5E:00.0"),
              xid(31, 1, "00000000:5E:00.0")]
    result = judge(node(xid=events))
    # Ordered by GPU, then code.
    assert checks(result) == [(W, "xid", 0), (W, "xid", 1), (E, "xid", 1)]
    assert "Xid 13 (graphics engine exception) 2 times since boot on GPU 0" in (
        result["problems"][0]["message"])
    assert "Xid 48 (double-bit ECC error) once since boot on GPU 1" in (
        result["problems"][2]["message"])
    assert checks(judge(node(xid=events), Thresholds(xid_error_codes=(13,)))) == [
        (E, "xid", 0), (W, "xid", 1), (W, "xid", 1)]
    assert checks(judge(node(xid=events), Thresholds(check_xid=False))) == []


def test_unreadable_kernel_log_is_a_warning() -> None:
    readings = node()
    readings.update(xid_events=None, xid_error="/dev/kmsg: Permission denied")
    result = judge(readings)
    assert checks(result) == [(W, "xid", None)]
    assert "/dev/kmsg: Permission denied" in result["problems"][0]["message"]


def test_nvml_read_errors_fatal_codes_are_errors() -> None:
    lost = v100(1, read_errors=[{"field": "temperature_c", "code": 15, "error": "GPU is lost"}])
    denied = v100(0, read_errors=[{"field": "power_draw_w", "code": 4,
                                   "error": "Insufficient Permissions"}])
    assert checks(judge(node(denied, lost))) == [(W, "nvml_read", 0), (E, "nvml_read", 1)]


# ---- recommendations, fail_on, formatting ----------------------------------

def test_recommendations_for_pcie_nvlink_and_single_gpu() -> None:
    pcie = recommend(node())
    assert (pcie["nccl_p2p_disable"], pcie["disable_custom_all_reduce"],
            pcie["preferred_parallelism"]) == (True, True, "data")
    assert len(pcie["reasons"]) == 2
    assert recommend(node(pairs=[NVLINK_PAIR])) == {
        "nccl_p2p_disable": False, "disable_custom_all_reduce": False,
        "preferred_parallelism": "tensor", "reasons": []}
    p2p_ok_pcie = dict(PCIE_PAIR, p2p_read="OK", p2p_write="OK")
    mixed = recommend(node(pairs=[p2p_ok_pcie]))
    assert (mixed["nccl_p2p_disable"], mixed["disable_custom_all_reduce"]) == (False, True)
    assert recommend(node(v100(0), pairs=[]))["preferred_parallelism"] == "single"
    assert recommend({"gpu_count": 0, "pairs": []})["preferred_parallelism"] is None


@pytest.mark.parametrize(("verdict", "fail_on", "expected"), [
    ("unhealthy", "error", True), ("degraded", "error", False), ("healthy", "error", False),
    ("unhealthy", "warning", True), ("degraded", "warning", True), ("healthy", "warning", False),
    ("unhealthy", "never", False),
])
def test_fails(verdict: str, fail_on: str, expected: bool) -> None:
    assert fails(verdict, fail_on) is expected


def test_thresholds_from_module_params() -> None:
    params = {"expected_gpus": 1, "min_compute_capability": 7.5, "allowed_processes": ["vllm"],
              "xid_error_codes": [79], "kernel_log_path": "/x", "fail_on": "never",
              "max_temperature_c": None}
    t = Thresholds.from_mapping(params)
    assert (t.expected_gpus, t.min_compute_capability, t.allowed_processes, t.xid_error_codes,
            t.max_temperature_c) == (1, "7.5", ("vllm",), (79,), 87)


def test_summary_and_report_lines() -> None:
    readings, _, _ = SCENARIOS["one link at Gen3 x8"]
    facts = with_judgement(readings, Thresholds())
    assert summary(facts) == (
        "degraded (2 GPUs, 0 errors, 1 warning, topology PHB, driver 535.261.03)")
    assert facts["summary"] == summary(facts)
    lines = format_report(facts).splitlines()
    assert lines[0] == ("gpu-node-07: degraded (2 GPUs, 0 errors, 1 warning, topology PHB, "
                        "driver 535.261.03)")
    assert lines[1].startswith("  WARNING pcie_link: the PCIe link of GPU 1 (00000000:5E:00.0")
    assert lines[2] == "  serve: parallelism data; nccl_p2p_disable, disable_custom_all_reduce"


def test_a_mistyped_compute_capability_is_refused_not_ignored():
    import pytest

    from onecat.health.judge import Thresholds

    with pytest.raises(ValueError, match=r"'abc' is not a compute capability such as 7\.0"):
        Thresholds.from_mapping({"min_compute_capability": "abc"})
    assert Thresholds.from_mapping({"min_compute_capability": 7.5}).min_compute_capability == "7.5"


def test_one_error_is_counted_in_the_singular() -> None:
    facts = judge(node(v100(0), v100(1, ecc__volatile__uncorrected=1,
                                     ecc__aggregate__uncorrected=1)),
                  Thresholds(max_volatile_uncorrected_ecc=1))
    history = " ".join(p["message"] for p in facts["problems"])
    assert "has had 1 uncorrectable ECC error in its lifetime" in history
    facts = judge(node(v100(0), v100(1, ecc__volatile__uncorrected=1,
                                     ecc__aggregate__uncorrected=1)))
    messages = " ".join(p["message"] for p in facts["problems"])
    assert "has 1 uncorrectable ECC error since the driver loaded" in messages
    assert "1 uncorrectable ECC errors" not in messages


def test_one_fault_is_one_reason_with_its_counts_in_words() -> None:
    readings = node(v100(0), v100(1, ecc__volatile__uncorrected=1, ecc__aggregate__uncorrected=3))
    [problem] = judge(readings)["problems"]
    assert "has 1 uncorrectable ECC error since the driver loaded (3 in its lifetime)" \
        in problem["message"]
    again = node(v100(0), v100(1, ecc__volatile__uncorrected=2, ecc__aggregate__uncorrected=2))
    [problem] = judge(again)["problems"]
    assert "has 2 uncorrectable ECC errors since the driver loaded:" in problem["message"]
