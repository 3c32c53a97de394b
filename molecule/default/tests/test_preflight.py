"""Preflight stops the host that cannot become a node and lets the others continue."""

import re

PREFLIGHT_WITH_NODE2_GPULESS = """
- name: Make onecat-node2 a host without GPUs.
  hosts: onecat-node2
  gather_facts: false
  tasks:
    - name: Point preflight at the recorded GPU-less host.
      ansible.builtin.set_fact:
        preflight_sysfs_root: /opt/onecat-test/sysfs/no-gpu

- name: Run the real preflight stage.
  ansible.builtin.import_playbook: @PROJECT@/playbooks/preflight.yml
"""


def test_preflight_reports_each_node(run_playbook):
    run = run_playbook("- ansible.builtin.import_playbook: @PROJECT@/playbooks/preflight.yml")
    assert run.rc == 0, run.output[-3000:]
    for node in ("onecat-node1", "onecat-node2"):
        assert re.search(rf"{node}: ready: Debian 12\.\d+, 2/2 GPU\(s\) \[volta\]", run.output)
    # The NVLink node's recorded tree has nouveau loaded: later stages must fix that.
    assert "onecat-node2: nouveau is loaded" in run.output
    assert run.recap("onecat-node1")["changed"] == 0


def test_gpuless_node_is_stopped_and_the_other_continues(run_playbook):
    run = run_playbook(PREFLIGHT_WITH_NODE2_GPULESS)
    assert run.rc == 2, run.output[-3000:]
    assert run.recap("onecat-node2")["failed"] == 1
    assert run.recap("onecat-node1")["failed"] == 0
    assert (
        "onecat-node2 cannot become a onecat node: no NVIDIA GPU found on the PCI bus"
        in run.output
    )
    assert "onecat-node1 cannot become" not in run.output
