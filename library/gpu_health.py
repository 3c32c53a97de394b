#!/usr/bin/python
"""Ansible module gpu_health: NVML health checks with one verdict per node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Check NVIDIA GPU health through NVML and judge it
description:
  - Reads every GPU through NVML (pynvml) and the kernel log since boot, then
    judges the readings with the onecat health policy.
  - "Checks: GPU count, compute capability, memory size, ECC mode and counters,
    retired pages (or remapped rows on GPUs that remap), PCIe link, display,
    foreign processes, temperature, throttling, NVIDIA Xid events."
  - Returns the readings, a verdict (C(healthy), C(degraded) or C(unhealthy)),
    the problems and recommendations for serving as C(ansible_facts.gpu_health).
  - Read-only; fails when the verdict reaches O(fail_on).
  - A field NVML does not support on a GPU or driver is C(null).
version_added: "0.1.0"
author: onecat
requirements:
  - nvidia-ml-py (pynvml) on the node (PyPI C(nvidia-ml-py), Debian C(python3-pynvml))
  - the NVIDIA driver (libnvidia-ml.so.1 and the kernel module)
options:
  expected_gpus:
    description: GPUs the node must have. Fewer is an error, more a warning.
    type: int
    default: 2
  min_compute_capability:
    description: Lowest acceptable compute capability (V100 is C(7.0)).
    type: str
    default: "7.0"
  min_memory_mib:
    description: Smallest acceptable GPU memory in MiB; C(0) skips the check.
    type: int
    default: 0
  require_ecc:
    description: ECC disabled or not reported is an error.
    type: bool
    default: true
  max_aggregate_uncorrected_ecc:
    description: More lifetime uncorrectable ECC errors than this is an error.
    type: int
    default: 0
  max_volatile_uncorrected_ecc:
    description: More uncorrectable ECC errors since driver load than this is an error.
    type: int
    default: 0
  max_volatile_corrected_ecc:
    description: More corrected ECC errors since driver load than this is a warning.
    type: int
    default: 50000000
  max_retired_pages:
    description: Single- plus double-bit retired pages at or above this is an error (DCGM).
    type: int
    default: 63
  warn_retired_pages:
    description:
      - Double-bit retired pages above this (DCGM's soft limit,
        C(DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT)) are a warning, and an error when more than
        O(max_double_bit_retirements_per_week) were retired in the past week.
    type: int
    default: 15
  max_double_bit_retirements_per_week:
    description:
      - Above the soft limit, more double-bit page retirements than this in the past week is an
        error (DCGM's rate rule, modules/health/DcgmHealthWatch.cpp).
    type: int
    default: 1
  min_pcie_gen:
    description: A link that cannot train at this PCIe generation is an error.
    type: int
    default: 3
  min_pcie_width:
    description: A link that cannot train at this width is an error.
    type: int
    default: 16
  allow_display_active:
    description: Do not flag a GPU that drives a display.
    type: bool
    default: false
  allow_foreign_processes:
    description: Do not flag processes holding GPU memory.
    type: bool
    default: false
  allowed_processes:
    description: A process whose name contains one of these strings is not foreign.
    type: list
    elements: str
    default: []
  max_temperature_c:
    description: At or above this temperature (Celsius) a GPU is a warning (V100 slowdown temp).
    type: int
    default: 87
  check_xid:
    description: Scan the kernel log since boot for NVIDIA Xid events.
    type: bool
    default: true
  xid_error_codes:
    description:
      - Xid codes that are errors; every other Xid is a warning.
      - The default is the error codes of onecat's one Xid table (C(onecat/health/xid.py),
        each code's severity from NVIDIA's Xid catalog, DCGM and gpud, cited there).
    type: list
    elements: int
    default: [46, 48, 61, 62, 64, 74, 79, 95, 119]
  kernel_log_path:
    description:
      - File holding the kernel log of the current boot to scan for Xid events.
      - Without it the module reads C(journalctl -k -b 0), then C(/dev/kmsg), then C(dmesg).
    type: path
  metrics_file:
    description:
      - Write the check's readings and verdict here for node_exporter's textfile collector
        (C(onecat_health_*) metrics, onecat/health/metrics.py), so a node the stage holds
        out, which gets no watch, still shows its fault on the dashboard and in the alerts.
      - Written only when its folder exists, and never in check mode; empty writes nothing.
    type: path
    default: ""
  fail_on:
    description: Fail the task when the verdict is this bad or worse.
    type: str
    choices: [error, warning, never]
    default: error
notes:
  - Supports check mode; it changes nothing on the node.
"""

EXAMPLES = r"""
- name: Check the GPUs and stop on any error.
  gpu_health:
    expected_gpus: 2

- name: Gather the verdict without failing, for a report.
  gpu_health:
    fail_on: never
    allowed_processes: [vllm]
  register: health

- name: Show the verdict.
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu_health.verdict }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(gpu_health).
  returned: always
  type: dict
  contains:
    gpu_health:
      description: Readings and judgement of this node's GPUs.
      type: dict
      returned: always
      contains:
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "535.261.03"
        cuda_driver_version:
          description: Newest CUDA version the driver supports.
          type: str
          sample: "12.2"
        gpu_count:
          description: GPUs NVML sees.
          type: int
          sample: 2
        gpus:
          description:
            - Per GPU, C(index name uuid serial pci_bus_id compute_capability
              memory_total_mib memory_used_mib ecc_mode ecc retired_pages
              remapped_rows pcie temperature_c power_draw_w power_limit_w
              throttle_reasons persistence_mode display_active display_mode
              processes read_errors); unsupported fields are null.
          type: list
          elements: dict
        pairs:
          description:
            - Per GPU pair, C(gpus topology pcie_path nvlinks p2p_read p2p_write p2p_nvlink).
            - C(topology) is C(NV<n>) with n NVLinks, else PIX, PXB, PHB, NODE or SYS.
          type: list
          elements: dict
          sample: [{gpus: [0, 1], topology: PHB, pcie_path: PHB, nvlinks: null,
                    p2p_read: CHIPSET_NOT_SUPPORTED, p2p_write: CHIPSET_NOT_SUPPORTED,
                    p2p_nvlink: NOT_SUPPORTED}]
        xid_events:
          description: Xid events since boot grouped by GPU and code; null if not read.
          type: list
          elements: dict
        verdict:
          description: C(healthy), C(degraded) (warnings only) or C(unhealthy) (any error).
          type: str
          sample: healthy
        summary:
          description: The verdict in one line.
          type: str
          sample: healthy (2 GPUs, 0 errors, 0 warnings, topology PHB, driver 535.261.03)
        problems:
          description: C(severity) (error or warning), C(check), C(gpu) (index or null), C(message).
          type: list
          elements: dict
        recommendations:
          description:
            - C(nccl_p2p_disable), C(disable_custom_all_reduce) (bools),
              C(preferred_parallelism) (tensor, data, single or null), C(reasons).
          type: dict
"""

import platform
import time
import traceback
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.onecat.files import write_atomic
from ansible.module_utils.onecat.health.judge import (
    SLOWDOWN_TEMPERATURE_C,
    XID_ERROR_CODES,
    Thresholds,
    fails,
    judge,
    summary,
)
from ansible.module_utils.onecat.health.metrics import render as render_metrics
from ansible.module_utils.onecat.health.nvml import (
    NvmlUnavailable,
    gather,
    kernel_log_problem,
    unavailable_line,
)

try:
    import pynvml
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    PYNVML_IMPORT_ERROR = None

ARGUMENT_SPEC = {
    "expected_gpus": {"type": "int", "default": 2},
    "min_compute_capability": {"type": "str", "default": "7.0"},
    "min_memory_mib": {"type": "int", "default": 0},
    "require_ecc": {"type": "bool", "default": True},
    "max_aggregate_uncorrected_ecc": {"type": "int", "default": 0},
    "max_volatile_uncorrected_ecc": {"type": "int", "default": 0},
    "max_volatile_corrected_ecc": {"type": "int", "default": 50000000},
    "max_retired_pages": {"type": "int", "default": 63},
    "warn_retired_pages": {"type": "int", "default": 15},
    "max_double_bit_retirements_per_week": {"type": "int", "default": 1},
    "min_pcie_gen": {"type": "int", "default": 3},
    "min_pcie_width": {"type": "int", "default": 16},
    "allow_display_active": {"type": "bool", "default": False},
    "allow_foreign_processes": {"type": "bool", "default": False},
    "allowed_processes": {"type": "list", "elements": "str", "default": []},
    "max_temperature_c": {"type": "int", "default": SLOWDOWN_TEMPERATURE_C},
    "check_xid": {"type": "bool", "default": True},
    "xid_error_codes": {"type": "list", "elements": "int", "default": list(XID_ERROR_CODES)},
    "kernel_log_path": {"type": "path"},
    "metrics_file": {"type": "path", "default": ""},
    "fail_on": {"type": "str", "choices": ["error", "warning", "never"], "default": "error"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    host = platform.node()
    if pynvml is None:
        module.fail_json(
            msg=missing_required_lib("nvidia-ml-py (pynvml; Debian/Ubuntu package python3-pynvml)"),
            exception=PYNVML_IMPORT_ERROR,
        )
    try:
        thresholds = Thresholds.from_mapping(module.params)
    except ValueError as error:
        module.fail_json(msg=f"gpu_health on {host}: {error}")
    log_path = module.params["kernel_log_path"]
    problem = kernel_log_problem(log_path) if log_path and thresholds.check_xid else None
    if problem:
        module.fail_json(msg=f"gpu_health on {host}: kernel_log_path: {problem}")
    try:
        readings = gather(pynvml, check_xid=thresholds.check_xid,
                          kernel_log_path=module.params["kernel_log_path"])
    except NvmlUnavailable as error:
        module.fail_json(msg=unavailable_line(error, host), nvml_error_code=error.code)
    except pynvml.NVMLError as error:
        module.fail_json(
            msg=f"NVML failed on {host} while reading the GPUs: {error}. "
                "Run nvidia-smi -q on the node to see which GPU is in trouble.",
            exception=traceback.format_exc(),
        )
    facts = {**readings, **judge(readings, thresholds)}
    facts["summary"] = summary(facts)
    result = {"changed": False, "ansible_facts": {"gpu_health": facts}}
    _write_metrics(module, facts)
    if fails(facts["verdict"], module.params["fail_on"]):
        listed = [p for p in facts["problems"]
                  if p["severity"] == "error" or module.params["fail_on"] == "warning"]
        module.fail_json(
            msg=f"GPU health of {host} is {facts['summary']}: "
            + " | ".join(p["message"] for p in listed),
            **result,
        )
    module.exit_json(msg=f"GPU health of {host} is {facts['summary']}", **result)


def _write_metrics(module: AnsibleModule, facts: dict) -> None:
    """The check for node_exporter, where its folder is (a reading, not a configuration: it
    changes nothing a later run compares, so it is not reported as a change)."""
    path = module.params["metrics_file"]
    if not path or module.check_mode or not Path(path).parent.is_dir():
        return
    try:
        write_atomic(Path(path), render_metrics(facts, time.time()))
    except OSError as error:
        module.warn(f"gpu_health could not write {path}: {error}")


if __name__ == "__main__":
    main()
