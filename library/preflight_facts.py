#!/usr/bin/python
"""Ansible module: read a host's GPU/boot/disk readiness and judge it (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_facts
short_description: Judge whether a host can become a onecat 2xV100 inference node
description:
  - Finds NVIDIA GPUs on the PCI bus through sysfs (no driver needed), reads the Secure Boot
    state, whether nouveau is loaded, whether kernel headers exist for the running kernel and
    the free disk where the engine image and the model will live.
  - Judges the readings and returns them as the C(onecat_preflight) fact. The module never
    changes the host and never fails because of what it found; the preflight role decides.
version_added: "0.1.0"
author: onecat developers
options:
  os_name:
    description: Distribution name, usually C(ansible_facts.distribution).
    type: str
    required: true
  os_version:
    description: Distribution version, usually C(ansible_facts.distribution_version).
    type: str
    required: true
  expected_gpus:
    description: Number of NVIDIA GPUs the node must have.
    type: int
    default: 2
  disk_requirements:
    description: Paths that need free space, with the purpose named in messages.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Directory that will hold the data (it may not exist yet).
        type: str
        required: true
      min_free_gib:
        description: Free space needed on that filesystem, in GiB.
        type: float
        required: true
      purpose:
        description: What the space is for, used in messages.
        type: str
        default: data
  sysfs_root:
    description: Where sysfs is mounted. Point it at another tree to read a recorded host.
    type: path
    default: /sys
  modules_root:
    description: Where kernel modules and their C(build) header links live.
    type: path
    default: /lib/modules
seealso:
  - name: onecat preflight role
    description: Runs this module and stops hosts that cannot become nodes.
    link: https://example.invalid/onecat/roles/preflight
"""

EXAMPLES = r"""
- name: Read and judge the host.
  preflight_facts:
    os_name: "{{ ansible_facts['distribution'] }}"
    os_version: "{{ ansible_facts['distribution_version'] }}"
    expected_gpus: 2
    disk_requirements:
      - path: /var/lib/docker
        min_free_gib: 40
        purpose: the engine image
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: complex
  contains:
    onecat_preflight:
      description: What preflight saw and its judgement.
      type: dict
      sample:
        ok: true
        volta: true
        gpus:
          - pci_bus_id: "0000:3b:00.0"
            device_id: "0x1db4"
            class: "0x030200"
            name: Tesla V100-PCIE-16GB
            architecture: volta
        secure_boot: false
        nouveau_loaded: false
        kernel_release: 6.1.0-18-amd64
        kernel_headers: true
        disks:
          - {path: /var/lib/docker, measured_at: /var/lib, free_gib: 120.5, total_gib: 250.0}
        errors: []
        warnings: []
        summary: "ready: Debian 12, 2/2 GPU(s) [volta], secure boot off, ..."
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.preflight.checks import (
    check_disk_requirements,
    gather,
    judge,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "os_name": {"type": "str", "required": True},
            "os_version": {"type": "str", "required": True},
            "expected_gpus": {"type": "int", "default": 2},
            "disk_requirements": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "path": {"type": "str", "required": True},
                    "min_free_gib": {"type": "float", "required": True},
                    "purpose": {"type": "str", "default": "data"},
                },
            },
            "sysfs_root": {"type": "path", "default": "/sys"},
            "modules_root": {"type": "path", "default": "/lib/modules"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        check_disk_requirements(params["disk_requirements"])
    except ValueError as error:
        module.fail_json(msg=f"preflight_facts: {error}")
    try:
        facts = gather(
            sysfs_root=params["sysfs_root"],
            modules_root=params["modules_root"],
            disk_paths=[req["path"] for req in params["disk_requirements"]],
        )
    except OSError as error:
        module.fail_json(msg=f"preflight could not read the host: {error}")
    verdict = judge(
        facts,
        os_name=params["os_name"],
        os_version=params["os_version"],
        expected_gpus=params["expected_gpus"],
        disk_requirements=params["disk_requirements"],
    )
    module.exit_json(changed=False, ansible_facts={"onecat_preflight": {**facts, **verdict}})


if __name__ == "__main__":
    main()
