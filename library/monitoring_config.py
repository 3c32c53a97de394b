#!/usr/bin/python
"""Ansible module: render the monitoring host's Prometheus and Alertmanager files (no effects)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: monitoring_config
short_description: Render the onecat fleet's Prometheus configuration, rules and Alertmanager routes
description:
  - Builds C(prometheus.yml) (scrape jobs for every node's node_exporter and engine and every
    gateway's HAProxy exporter, with the labels C(node), C(model) and C(gateway)), the alert and
    recording rules, and C(alertmanager.yml), from the inventory and each node's serving state.
  - Checks every value first and fails naming the host, the setting and the fix, so nothing is
    written on a bad one; the role then checks each file with promtool or amtool.
  - Changes nothing; the pure logic lives in C(onecat/monitoring).
version_added: "0.3.0"
author: onecat developers
options:
  monitor:
    description: Name of the monitoring host (the C(monitor) external label).
    type: str
    required: true
  node_names:
    description: The fleet's nodes (group v100), in inventory order.
    type: list
    elements: str
    required: true
  node_states:
    description:
      - "For each of O(node_names), what it serves: C(address), C(exporter_port),
        C(engine_port) (0 when not serving), C(model); null for a node not reached."
    type: list
    elements: raw
    required: true
  node_keyed:
    description:
      - For each of O(node_names), whether its engine's /metrics needs the scrapers' key, as
        the key's length (0 for none); the key itself never reaches the module.
    type: list
    elements: raw
    required: true
  gateway_names:
    description: The gateway hosts.
    type: list
    elements: str
    default: []
  gateway_addresses:
    description: For each gateway, the address another host reaches it at.
    type: list
    elements: str
    default: []
  gateway_admin_binds:
    description: For each gateway, the address its HAProxy exporter (admin port) binds.
    type: list
    elements: str
    default: []
  gateway_admin_port:
    description: Port of the gateways' HAProxy exporter.
    type: int
    default: 8404
  settings:
    description: The role's monitoring_* settings (roles/monitoring/defaults/main.yml).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Render the monitoring configuration.
  monitoring_config:
    monitor: "{{ inventory_hostname }}"
    node_names: "{{ groups['v100'] }}"
    node_states: >-
      {{ groups['v100'] | map('extract', hostvars)
         | map(attribute='monitoring_node', default=none) | list }}
    node_keyed: [43, 43]
    settings: {scrape_interval: 15s}
  delegate_to: localhost
  register: rendered
"""

RETURN = r"""
prometheus_config:
  description: Text of prometheus.yml.
  returned: success
  type: str
rules:
  description: Text of the alert and recording rule file.
  returned: success
  type: str
alertmanager_config:
  description: Text of alertmanager.yml.
  returned: success
  type: str
key_files:
  description: Node name to the path of its scrapers' key file on the monitoring host.
  returned: success
  type: dict
prometheus_args:
  description: Prometheus's flags (Debian's ARGS).
  returned: success
  type: list
  elements: str
alertmanager_args:
  description: Alertmanager's flags (Debian's ARGS).
  returned: success
  type: list
  elements: str
prometheus_url:
  description: Where the monitoring host reaches Prometheus.
  returned: success
  type: str
alertmanager_url:
  description: Where the monitoring host reaches Alertmanager.
  returned: success
  type: str
receiver:
  description: Whether any receiver (webhook, email, Slack) is set.
  returned: success
  type: bool
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.monitoring.plan import plan

ARGUMENT_SPEC = {
    "monitor": {"type": "str", "required": True},
    "node_names": {"type": "list", "elements": "str", "required": True},
    "node_states": {"type": "list", "elements": "raw", "required": True},
    "node_keyed": {"type": "list", "elements": "raw", "required": True},
    "gateway_names": {"type": "list", "elements": "str", "default": []},
    "gateway_addresses": {"type": "list", "elements": "str", "default": []},
    "gateway_admin_binds": {"type": "list", "elements": "str", "default": []},
    "gateway_admin_port": {"type": "int", "default": 8404},
    "settings": {"type": "dict", "required": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params: dict[str, Any] = module.params
    refused = ""
    try:
        result = plan(**params)
    except ValueError as error:
        refused = str(error)
    if refused:  # outside the handler: a refusal is a message, not an exception to report
        module.fail_json(
            msg=f"monitoring on {params['monitor']}: {refused}; nothing was changed")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
