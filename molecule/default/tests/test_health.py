"""GPU health on the converged nodes: the JSON report, the verdict, and the held-out node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
REPORTS = EPHEMERAL / "results" / "health"
SCENARIOS = "/opt/onecat-test/nvml/scenarios"

HEALTH_WITH_NODE2_ECC = """
- name: Give onecat-node2 a card with an uncorrectable ECC error.
  hosts: onecat-node2
  gather_facts: false
  tasks:
    - name: Point NVML at the ECC scenario.
      ansible.builtin.set_fact:
        gpu_health_environment:
          LD_LIBRARY_PATH: /opt/onecat-test/nvml
          ONECAT_NVML_DOUBLE_SCENARIO: @SCENARIOS@/ecc_uncorrected_since_boot.scenario

- name: Run the real health stage.
  ansible.builtin.import_playbook: @PROJECT@/playbooks/health.yml
"""
ECC_PLAY = HEALTH_WITH_NODE2_ECC.replace("@SCENARIOS@", SCENARIOS)


@pytest.mark.parametrize(
    ("node", "topology", "p2p"),
    [("onecat-node1", "PHB", "CHIPSET_NOT_SUPPORTED"), ("onecat-node2", "NV2", "OK")],
)
def test_converge_wrote_a_healthy_report_per_node(node, topology, p2p):
    report = json.loads((REPORTS / f"{node}.json").read_text())
    assert report["verdict"] == "healthy"
    assert report["problems"] == []
    assert report["gpu_count"] == 2
    assert [g["compute_capability"] for g in report["gpus"]] == ["7.0", "7.0"]
    (pair,) = report["pairs"]
    assert pair["gpus"] == [0, 1]
    assert pair["topology"] == topology
    assert pair["p2p_read"] == p2p


def test_pcie_pair_recommends_no_custom_all_reduce():
    report = json.loads((REPORTS / "onecat-node1.json").read_text())
    assert report["recommendations"]["disable_custom_all_reduce"] is True
    nvlink = json.loads((REPORTS / "onecat-node2.json").read_text())
    assert nvlink["recommendations"]["disable_custom_all_reduce"] is False


def test_unhealthy_node_is_stopped_with_its_reason_and_the_other_continues(
    run_playbook, tmp_path
):
    # Its own report folder: the converged fleet's reports stay as the rollout wrote them.
    run = run_playbook(ECC_PLAY, "-e", "onecat_max_unhealthy_percent=50",
                       "-e", f"gpu_health_report_dir={tmp_path}")
    assert run.rc == 2, run.output[-3000:]
    assert run.recap("onecat-node2")["failed"] == 1
    assert run.recap("onecat-node1")["failed"] == 0
    assert "onecat-node2 failed the GPU health check (unhealthy" in run.output
    assert "aggregate uncorrectable ECC" in run.output or "uncorrectable" in run.output
    assert "onecat-node1 failed the GPU health check" not in run.output
    report = json.loads((tmp_path / "onecat-node2.json").read_text())
    assert report["verdict"] == "unhealthy"
    assert [p["check"] for p in report["problems"] if p["severity"] == "error"] == [
        "ecc_volatile_uncorrected"
    ]


def test_too_many_unhealthy_nodes_stop_everything(run_playbook, tmp_path):
    run = run_playbook(ECC_PLAY, "-e", "onecat_max_unhealthy_percent=10",
                       "-e", f"gpu_health_report_dir={tmp_path}")
    assert run.rc != 0
    # The healthy node does not get to its post-task: the whole stage was aborted.
    assert "Record that the host passed the health stage" not in run.output.split(
        "failed the GPU health check")[-1]
