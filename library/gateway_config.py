#!/usr/bin/python
"""Ansible module: choose the gateway's back ends and read its client keys (no side effects)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_config
short_description: Choose the onecat gateway's back-end servers and validate its client keys
description:
  - Picks one HAProxy server per node that passed its serve gate, from each node's serving
    state (the serve stage's state file or facts), never from the inventory alone. A node
    that serves but failed its last gate is listed disabled, with its reason.
  - Sizes each server's C(maxconn) from the engine's C(--max-num-seqs).
  - Reads and validates the client key file (owner-only, C(NAME KEY [REQUESTS_PER_MINUTE])
    per line) and returns the HAProxy key map (SHA-256 of each key to its name, no keys).
  - Fails, before anything is written, when no node can take traffic or the key file is
    malformed, so a running gateway keeps its old configuration.
  - Changes nothing; run it where the key file is (the controller, with C(delegate_to)).
  - Refuses an O(maxconn) outside 0-1000000 and an O(maxconn_factor) that is not a finite
    number above 0 and at most 1000 (NaN made the server's maxconn a traceback).
version_added: "0.2.0"
author: onecat developers
options:
  nodes:
    description: Node name to its serving state (C(serving), C(in_rotation), C(reason),
      C(address), C(port), C(max_num_seqs), C(agent_port)); null when the node has none.
    type: dict
    required: true
  keys_file:
    description: Path of the client key file; empty runs the gateway without client keys.
    type: path
    default: ""
  maxconn:
    description: Concurrent requests per server; 0 derives it from C(max_num_seqs).
    type: int
    default: 0
  maxconn_factor:
    description: Multiplier on C(max_num_seqs) when O(maxconn) is 0.
    type: float
    default: 1.0
  gateway:
    description: Name of the gateway host, for messages.
    type: str
    default: the gateway
"""

EXAMPLES = r"""
- name: Choose the back ends and read the client keys.
  gateway_config:
    nodes:
      gpu-node-01: {serving: true, address: 10.0.0.11, port: 8000, max_num_seqs: 64}
      gpu-node-02: null
    keys_file: /etc/onecat/gateway-keys
    gateway: "{{ inventory_hostname }}"
  delegate_to: localhost
"""

RETURN = r"""
servers:
  description: HAProxy servers (C(name), C(address), C(port), C(maxconn), C(enabled), C(reason)).
  returned: success
  type: list
  elements: dict
excluded:
  description: Nodes without a server line, with the reason.
  returned: always
  type: dict
key_map:
  description: HAProxy map text, SHA-256 of each key to its name; empty without a key file.
  returned: success
  type: str
key_names:
  description: Names of the client keys.
  returned: success
  type: list
  elements: str
rate_limits:
  description: Key name to requests per minute, for the keys that have a limit.
  returned: success
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.gateway.backends import NoBackendError, require_backend, select
from ansible.module_utils.onecat.gateway.keys import (
    KeyFileError,
    rate_limits,
    read_key_file,
    render_key_map,
)
from ansible.module_utils.onecat.validate import problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "dict", "required": True},
            "keys_file": {"type": "path", "default": ""},
            "maxconn": {"type": "int", "default": 0},
            "maxconn_factor": {"type": "float", "default": 1.0},
            "gateway": {"type": "str", "default": "the gateway"},
        },
        supports_check_mode=True,
    )
    p = module.params
    found = problems({"maxconn": ["count", p["maxconn"], 0, 1000000],
                      "maxconn_factor": ["number", p["maxconn_factor"], 0, 1000]})
    if found:
        module.fail_json(msg=f"{p['gateway']}: " + "; ".join(found)
                             + " (gateway_maxconn_per_server, gateway_maxconn_factor)")
    selection = select(p["nodes"], p["maxconn"], p["maxconn_factor"])
    excluded = dict(selection.excluded)
    try:
        require_backend(selection, p["gateway"])
    except NoBackendError as error:
        module.fail_json(msg=str(error), excluded=excluded)
    key_map, names, limits = "", [], {}
    if p["keys_file"]:
        path = p["keys_file"]
        try:
            client_keys = read_key_file(path)
        except OSError as error:
            module.fail_json(msg=f"{p['gateway']}: cannot read the client key file {path}: "
                                 f"{error.strerror}; the gateway keeps its current configuration")
        except KeyFileError as error:
            module.fail_json(msg=f"{p['gateway']}: the client key file is refused: {error}; "
                                 "the gateway keeps its current configuration")
        key_map = render_key_map(client_keys)
        names = sorted(k.name for k in client_keys)
        limits = rate_limits(client_keys)
    module.exit_json(changed=False, servers=[s.as_dict() for s in selection.servers],
                     excluded=excluded, key_map=key_map, key_names=names, rate_limits=limits)


if __name__ == "__main__":
    main()
