"""gather + judge end to end: the real pynvml loaded on the NVML test double, one scenario each.

No real GPU is involved: tests/nvml_double/nvml_double.c is compiled once per
session and found by the dynamic loader through LD_LIBRARY_PATH, as the real
libnvidia-ml.so.1 would be.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onecat.health.judge import label

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
import nvml_double_harness as double


@pytest.fixture(scope="session")
def legacy_libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nvml-double-legacy")
    double.build(out, hide=double.LEGACY_DRIVER_HIDDEN)
    return out


def problems(facts: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(p["severity"], p["check"], p["gpu"]) for p in facts["problems"]]


def without_host(facts: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in facts.items() if k not in ("host",)}


E, W = "error", "warning"

# scenario -> (verdict, exact problem list)
EXPECTED = {
    "healthy_pcie_pair": ("healthy", []),
    "healthy_nvlink_pair": ("healthy", []),
    "ecc_aggregate_uncorrected": ("degraded", [(W, "ecc_aggregate_uncorrected", 1)]),
    "ecc_uncorrected_since_boot": ("unhealthy", [(E, "ecc_volatile_uncorrected", 1)]),
    "retired_page_pending": ("unhealthy", [(E, "retired_pages_pending", 0)]),
    "pcie_gen3_x8": ("degraded", [(W, "pcie_link", 1)]),
    "display_active": ("unhealthy", [(E, "display_active", 0)]),
    "foreign_process": ("unhealthy", [(E, "foreign_process", 0)]),
    "one_gpu_visible": ("unhealthy", [(E, "gpu_count", None), (E, "xid", None)]),
    "h100_nvlink_pair": ("healthy", []),
    "xid_double_bit_ecc": ("unhealthy", [
        (E, "ecc_volatile_uncorrected", 1), (E, "retired_pages_pending", 1),
        # Xid 63 (the page retired after the double-bit error) is a warning: 48 is the fault.
        (W, "xid", 0), (E, "xid", 1), (W, "xid", 1),
    ]),
    "thermal_slowdown": ("degraded", [(W, "temperature", 1), (W, "throttle", 1)]),
    # One sample of the power brake warns: only the watch, with a history, fails it sustained.
    "power_brake": ("degraded", [(W, "throttle", 0)]),
    # Read at once after nvmlInit: the blip comes 20 s into its timeline.
    "thermal_blip": ("healthy", []),
    # Still counted, but its handle answers GPU_IS_LOST: one reason for it, not a crash.
    "gpu_lost": ("unhealthy", [(E, "gpu_lost", 1), (E, "xid", None)]),
    # Read at once after nvmlInit, as the deploy's health check reads: its errors come later.
    "ecc_rises_under_load": ("healthy", []),
    # Before any reset or reboot (the harness's node booted at Unix time 0): the fault holds.
    "ecc_reset_clears": ("unhealthy", [
        (E, "ecc_volatile_uncorrected", 1), (E, "retired_pages_pending", 1)]),
    "ecc_returns_after_reset": ("unhealthy", [
        (E, "ecc_volatile_uncorrected", 1), (E, "retired_pages_pending", 1)]),
    "gpu_lost_needs_reboot": ("unhealthy", [(E, "gpu_lost", 1), (E, "xid", None)]),
}


def test_every_scenario_file_has_an_expectation() -> None:
    files = {p.stem for p in double.SCENARIOS.glob("*.scenario")}
    assert files - {"driver_not_loaded", "driver_library_mismatch"} == set(EXPECTED)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_verdict_and_exact_problems(libdir: Path, scenario: str) -> None:
    facts = double.run_facts(libdir, scenario)
    verdict, expected = EXPECTED[scenario]
    assert (facts["verdict"], problems(facts)) == (verdict, expected)
    by_index = {gpu["index"]: gpu for gpu in facts["gpus"]}
    for problem in facts["problems"]:
        if problem["gpu"] is not None:
            assert label(by_index[problem["gpu"]]) in problem["message"]


def test_healthy_pcie_pair_readings_are_exact(libdir: Path) -> None:
    facts = double.run_facts(libdir, "healthy_pcie_pair")
    assert facts["driver_version"] == "535.261.03"
    assert facts["cuda_driver_version"] == "12.2"
    assert facts["gpu_count"] == 2
    assert facts["gpus"][0] == {
        "index": 0,
        "name": "Tesla V100-PCIE-16GB",
        "uuid": "GPU-6f1d2c3a-0b1e-4c5d-8e9f-a1b2c3d4e5f0",
        "serial": "0323117011201",
        "pci_bus_id": "00000000:3B:00.0",
        "compute_capability": "7.0",
        "memory_total_mib": 16160,
        "memory_used_mib": 0,
        "ecc_mode": True,
        "ecc": {"volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 0, "uncorrected": 0}},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "double_bit_last_week": 0,
                          "pending": False},
        # Volta retires pages; row remapping answers NOT_SUPPORTED.
        "remapped_rows": {"correctable": None, "uncorrectable": None, "pending": None,
                          "failure": None},
        "pcie": {"gen": 3, "max_gen": 3, "width": 16, "max_width": 16},
        "temperature_c": 34,
        "power_draw_w": 26.1,
        "power_limit_w": 250.0,
        "throttle_reasons": ["gpu_idle"],
        "persistence_mode": True,
        "display_active": False,
        "display_mode": False,
        "processes": [],
        "read_errors": [],
        "lost": False,
    }
    assert facts["pairs"] == [{
        "gpus": [0, 1], "topology": "PHB", "pcie_path": "PHB", "nvlinks": None,
        "p2p_read": "CHIPSET_NOT_SUPPORTED", "p2p_write": "CHIPSET_NOT_SUPPORTED",
        "p2p_nvlink": "NOT_SUPPORTED",
    }]
    assert facts["xid_events"] == []
    assert facts["recommendations"]["nccl_p2p_disable"] is True
    assert facts["recommendations"]["disable_custom_all_reduce"] is True
    assert facts["recommendations"]["preferred_parallelism"] == "data"


def test_nvlink_pair_is_nv2_with_p2p_and_prefers_tensor_parallel(libdir: Path) -> None:
    facts = double.run_facts(libdir, "healthy_nvlink_pair")
    assert facts["pairs"] == [{
        "gpus": [0, 1], "topology": "NV2", "pcie_path": "NODE", "nvlinks": 2,
        "p2p_read": "OK", "p2p_write": "OK", "p2p_nvlink": "OK",
    }]
    assert facts["recommendations"] == {
        "nccl_p2p_disable": False, "disable_custom_all_reduce": False,
        "preferred_parallelism": "tensor", "reasons": [],
    }


def test_h100_fields_that_differ_from_volta(libdir: Path) -> None:
    facts = double.run_facts(libdir, "h100_nvlink_pair")
    gpu = facts["gpus"][1]
    assert gpu["compute_capability"] == "9.0"
    assert gpu["memory_total_mib"] == 81559
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None,
                                    "double_bit_last_week": None, "pending": None}
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False,
                                    "failure": False}
    assert gpu["pcie"] == {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}
    assert facts["pairs"][0]["topology"] == "NV12"
    assert facts["driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0"


def test_foreign_process_is_read_with_name_and_size(libdir: Path) -> None:
    facts = double.run_facts(libdir, "foreign_process")
    assert facts["gpus"][0]["processes"] == [
        {"pid": 31337, "name": "/usr/bin/python3", "used_mib": 3072, "type": "C"},
    ]
    assert "process 31337 (/usr/bin/python3) holds 3072 MiB" in facts["problems"][0]["message"]


def test_gpu_that_fell_off_the_bus_is_named_by_its_pci_address(libdir: Path) -> None:
    facts = double.run_facts(libdir, "one_gpu_visible")
    assert facts["xid_events"] == [{
        "code": 79, "pci_bus_id": "00000000:5E:00.0", "gpu": None, "count": 1,
        "message": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    }]
    assert "00000000:5E:00.0 (not visible to NVML)" in facts["problems"][1]["message"]
    assert facts["pairs"] == []
    assert facts["recommendations"]["preferred_parallelism"] == "single"


def test_xid_events_are_mapped_to_gpus_and_counted(libdir: Path) -> None:
    facts = double.run_facts(libdir, "xid_double_bit_ecc")
    assert [(e["code"], e["gpu"], e["count"]) for e in facts["xid_events"]] == [
        (13, 0, 2), (48, 1, 1), (63, 1, 1),
    ]


def test_older_driver_without_newer_functions_gives_the_same_facts(
    libdir: Path, legacy_libdir: Path
) -> None:
    # The legacy build hides the _v3 process calls, ClocksEventReasons and
    # RemappedRows: pynvml raises FUNCTION_NOT_FOUND and the gatherer falls back.
    for scenario in ("foreign_process", "thermal_slowdown"):
        new = double.run_facts(libdir, scenario)
        old = double.run_facts(legacy_libdir, scenario)
        assert without_host(old) == without_host(new)


def test_older_pynvml_without_newer_wrappers_gives_the_same_facts(libdir: Path) -> None:
    prelude = (
        "del pynvml.nvmlDeviceGetCurrentClocksEventReasons\n"
        "del pynvml.nvmlSystemGetCudaDriverVersion_v2\n"
        "del pynvml.nvmlDeviceGetComputeRunningProcesses_v3\n"
    )
    new = double.run_facts(libdir, "foreign_process")
    old = double.run_facts(libdir, "foreign_process", prelude=prelude)
    assert without_host(old) == without_host(new)


def test_unsupported_and_missing_functions_are_null_not_a_crash(
    legacy_libdir: Path, tmp_path: Path
) -> None:
    scenario = tmp_path / "bare.scenario"
    scenario.write_text(
        f"include = {double.SCENARIOS / 'healthy_pcie_pair.scenario'}\n"
        "gpu.0.serial = ERR:3\ngpu.0.temperature_c = ERR:3\ngpu.0.ecc.mode = ERR:3\n"
        "fail.nvmlDeviceGetPowerUsage = 13\n"
    )
    facts = double.run_facts(legacy_libdir, scenario)
    gpu = facts["gpus"][0]
    assert (gpu["serial"], gpu["temperature_c"], gpu["ecc_mode"], gpu["power_draw_w"]) == (
        None, None, None, None)
    assert gpu["ecc"]["aggregate"] == {"corrected": None, "uncorrected": None}
    assert gpu["read_errors"] == []
    assert problems(facts) == [(E, "ecc_mode", 0)]
    assert "GPU 0 (00000000:3B:00.0, serial unknown) does not report ECC" in (
        facts["problems"][0]["message"])


def test_other_nvml_errors_on_a_field_become_problems(libdir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "lost.scenario"
    scenario.write_text(
        f"include = {double.SCENARIOS / 'healthy_pcie_pair.scenario'}\n"
        "gpu.1.fail.nvmlDeviceGetTemperature = 15\n"  # NVML_ERROR_GPU_IS_LOST
        "gpu.0.fail.nvmlDeviceGetPowerUsage = 4\n"  # NVML_ERROR_NO_PERMISSION
    )
    facts = double.run_facts(libdir, scenario)
    assert facts["gpus"][1]["read_errors"] == [
        {"field": "temperature_c", "code": 15, "error": "GPU is lost"},
    ]
    # GPU_IS_LOST on any call means the GPU is lost: that one reason, not a read error.
    assert facts["gpus"][1]["lost"] and not facts["gpus"][0]["lost"]
    assert problems(facts) == [(W, "nvml_read", 0), (E, "gpu_lost", 1)]


# python -m onecat.health: what an operator runs on a node.

def test_module_entry_prints_the_verdict_and_exits_1_when_unhealthy(libdir: Path) -> None:
    done = double.run_health(libdir, "ecc_uncorrected_since_boot")
    assert done.returncode == 1, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first.endswith(": unhealthy (2 GPUs, 1 error, 0 warnings, topology PHB, "
                          "driver 535.261.03)")
    assert rest[0].startswith("  ERROR   ecc_volatile_uncorrected: GPU 1 (00000000:5E:00.0, "
                              "serial 0323117011202) has 1 uncorrectable ECC error since the "
                              "driver loaded (3 in its lifetime)")
    assert rest[-1] == "  serve: parallelism data; nccl_p2p_disable, disable_custom_all_reduce"


def test_module_entry_exits_0_when_healthy_and_honours_fail_on(libdir: Path) -> None:
    healthy = double.run_health(libdir, "healthy_nvlink_pair")
    assert (healthy.returncode, healthy.stderr) == (0, "")
    assert double.run_health(libdir, "pcie_gen3_x8").returncode == 0
    assert double.run_health(libdir, "pcie_gen3_x8", "--fail-on", "warning").returncode == 1
    assert double.run_health(libdir, "display_active", "--allow-display-active").returncode == 0
    assert double.run_health(libdir, "foreign_process", "--fail-on", "never").returncode == 0


def test_module_entry_json_is_the_full_facts(libdir: Path) -> None:
    done = double.run_health(libdir, "foreign_process", "--json", "--allowed-process", "python3")
    facts = json.loads(done.stdout)
    assert (done.returncode, facts["verdict"], facts["problems"]) == (0, "healthy", [])
    assert facts["gpus"][0]["processes"][0]["pid"] == 31337


def test_a_driver_library_mismatch_is_one_line_that_says_reboot(libdir: Path) -> None:
    """NVML error 18 after a driver upgrade is not "driver not loaded": the fix is a reboot."""
    done = double.run_health(libdir, "driver_library_mismatch")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("onecat health: Driver/library version mismatch on ")
    assert "NVML error 18" in done.stderr and "reboot the node" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_driver_not_loaded_is_one_clear_line_and_exit_2(libdir: Path) -> None:
    done = double.run_health(libdir, "driver_not_loaded")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("onecat health: NVIDIA driver not loaded on ")
    assert "NVML error 9: Driver Not Loaded" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_library_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    done = double.run_health(tmp_path, "healthy_pcie_pair")  # no libnvidia-ml.so.1 there
    assert done.returncode == 2
    assert "NVIDIA driver not loaded on " in done.stderr
    assert "NVML error 12: NVML Shared Library Not Found" in done.stderr


def test_onecat_health_local_is_the_same_check(libdir: Path) -> None:
    scenario = "pcie_gen3_x8"
    done = subprocess.run(
        [sys.executable, "-m", "onecat", "health", "--local", "--json", "--kernel-log",
         str(double.kernel_log(scenario))],
        env=double.double_env(libdir, scenario), capture_output=True, text=True, check=False,
        cwd=double.REPO, timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    facts = json.loads(done.stdout)
    assert (facts["verdict"], problems(facts)) == ("degraded", [(W, "pcie_link", 1)])


def test_a_timeline_changes_the_counters_while_the_process_reads(libdir: Path,
                                                                 tmp_path: Path) -> None:
    """`key@<seconds>` applies once that long has passed since nvmlInit (one process)."""
    scenario = tmp_path / "timeline.scenario"
    scenario.write_text(f"include = {double.scenario_path('healthy_pcie_pair')}\n"
                        "gpu.1.ecc.volatile.uncorrected@0.6 = 2\ndevice_count@1.2 = 1\n")
    code = (
        "import time, pynvml\n"
        "pynvml.nvmlInit()\n"
        "def read():\n"
        "    gpu = pynvml.nvmlDeviceGetHandleByIndex(1) if pynvml.nvmlDeviceGetCount() > 1 "
        "else None\n"
        "    ecc = pynvml.nvmlDeviceGetTotalEccErrors(gpu, 1, 0) if gpu else None\n"
        "    return pynvml.nvmlDeviceGetCount(), ecc\n"
        "seen = [read()]\n"
        "time.sleep(0.8); seen.append(read())\n"
        "time.sleep(0.6); seen.append(read())\n"
        "print(seen)\n")
    done = subprocess.run([sys.executable, "-c", code], env=double.double_env(libdir, scenario),
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(2, 0), (2, 2), (1, None)]"


def test_a_bad_timeline_time_is_refused(libdir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "bad.scenario"
    scenario.write_text("device_count = 2\ndevice_count@soon = 1\n")
    done = subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"],
                          env=double.double_env(libdir, scenario), capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode != 0
    assert "bad time in device_count@soon" in done.stderr
