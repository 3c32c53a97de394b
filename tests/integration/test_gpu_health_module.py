"""library/gpu_health.py through Ansible (`ansible localhost -c local -m gpu_health`).

The real pynvml in the venv loads the NVML test double (LD_LIBRARY_PATH), so
the module runs exactly as on a node, module_utils shipping included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
import nvml_double_harness as double

BIN = Path(sys.executable).parent


def run_module(libdir: Path, scenario: str, args: str = "", *, python: str = sys.executable,
               check: bool = False) -> dict[str, Any]:
    """Run the module ad hoc and return its result for localhost."""
    log = double.kernel_log(scenario)
    env = {
        **double.double_env(libdir, scenario),
        "ANSIBLE_LIBRARY": str(double.REPO / "library"),
        "ANSIBLE_MODULE_UTILS": str(double.REPO / "module_utils"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_NOCOLOR": "1",
    }
    command = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
               "-e", f"ansible_python_interpreter={python}", "-m", "gpu_health",
               "-a", f"kernel_log_path={log} {args}".strip()]
    if check:
        command.append("--check")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                          cwd=double.REPO, timeout=120)
    output = json.loads(done.stdout)
    return output["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_healthy_node_returns_the_facts(libdir: Path) -> None:
    result = run_module(libdir, "healthy_pcie_pair")
    assert result.get("failed") is not True, result.get("msg")
    facts = result["ansible_facts"]["gpu_health"]
    assert result["changed"] is False
    assert (facts["verdict"], facts["problems"], facts["gpu_count"]) == ("healthy", [], 2)
    assert facts["driver_version"] == "535.261.03"
    assert facts["cuda_driver_version"] == "12.2"
    assert [g["pci_bus_id"] for g in facts["gpus"]] == ["00000000:3B:00.0", "00000000:5E:00.0"]
    assert facts["gpus"][1]["ecc"] == {"volatile": {"corrected": 0, "uncorrected": 0},
                                       "aggregate": {"corrected": 0, "uncorrected": 0}}
    assert facts["pairs"][0]["topology"] == "PHB"
    assert facts["pairs"][0]["p2p_read"] == "CHIPSET_NOT_SUPPORTED"
    assert facts["recommendations"]["preferred_parallelism"] == "data"
    assert result["msg"].endswith(
        "is healthy (2 GPUs, 0 errors, 0 warnings, topology PHB, driver 535.261.03)")


def test_unhealthy_node_fails_with_its_errors_and_still_returns_facts(libdir: Path) -> None:
    result = run_module(libdir, "ecc_uncorrected_since_boot")
    assert result["failed"] is True
    # One fault, one error: the lifetime count rides along with the errors since the driver loaded.
    assert "is unhealthy (2 GPUs, 1 error, 0 warnings" in result["msg"]
    assert ("GPU 1 (00000000:5E:00.0, serial 0323117011202) has 1 uncorrectable ECC error since "
            "the driver loaded (3 in its lifetime)") in result["msg"]
    assert result["ansible_facts"]["gpu_health"]["verdict"] == "unhealthy"


def test_fail_on_never_and_warning(libdir: Path) -> None:
    never = run_module(libdir, "ecc_uncorrected_since_boot", "fail_on=never")
    assert never.get("failed") is not True
    assert never["ansible_facts"]["gpu_health"]["verdict"] == "unhealthy"
    warning = run_module(libdir, "pcie_gen3_x8", "fail_on=warning")
    assert warning["failed"] is True
    assert "is degraded" in warning["msg"]
    assert "runs at Gen3 x8, below its maximum Gen3 x16" in warning["msg"]


def test_check_mode_reads_the_same(libdir: Path) -> None:
    result = run_module(libdir, "healthy_nvlink_pair", check=True)
    assert result.get("failed") is not True, result.get("msg")
    assert result["ansible_facts"]["gpu_health"]["pairs"][0]["topology"] == "NV2"


def test_driver_not_loaded_is_a_clean_failure(libdir: Path) -> None:
    result = run_module(libdir, "driver_not_loaded")
    assert result["failed"] is True
    assert result["msg"].startswith("NVIDIA driver not loaded on ")
    assert "NVML error 9: Driver Not Loaded" in result["msg"]
    assert result["nvml_error_code"] == 9


def test_missing_pynvml_names_the_package(libdir: Path, tmp_path: Path) -> None:
    # The venv's Python without site-packages: the standard library, no pynvml.
    python = tmp_path / "python-without-site"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    result = run_module(libdir, "healthy_pcie_pair", python=str(python))
    assert result["failed"] is True
    assert "Failed to import the required Python library (nvidia-ml-py" in result["msg"]
    assert "python3-pynvml" in result["msg"]


def test_ansible_doc_renders() -> None:
    done = subprocess.run([str(BIN / "ansible-doc"), "-M", "library", "gpu_health"],
                          capture_output=True, text=True, check=False, cwd=double.REPO,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "fail_on" in done.stdout
    assert "ansible_facts" in done.stdout
