#!/usr/bin/python
"""Ansible module: write a node's serving state for the gateway and its agent's answer."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_node
short_description: Record a onecat node's serving state for the gateway and its agent's answer
description:
  - "Writes O(state_dir)/node.json (serving, in rotation, reason, address, port, agent port and
    the server unit's C(--max-num-seqs)), which the gateway's configuration is built from, and
    O(state_dir)/agent-state, the answer of the node's agent check: C(up), or
    C(maint down #reason) for a node held out."
  - "Removes O(state_dir)/deploy-drain, the drain the deploy set before restarting or burning
    in the node (the gateway role's C(tasks_from: drain)): the node is now readmitted or held.
    Not reported as a change (the drain is transient)."
  - "Writes O(admitted_file) when the node is in rotation. It lives in a folder a boot empties
    (C(/run) is a tmpfs), and the agent answers C(maint) while it is missing: a node that booted,
    planned or not, stays out until the serve stage gates it and admits it again."
  - "One round trip: reads the unit, compares both files and writes only what differs
    (atomically, root-owned, mode 0644). Reports C(changed) when a file was written."
  - "Refuses, before writing, an O(state_dir) that is not a plain absolute path (it is the node
    agent's shell argument), an O(address) that is neither an IP address nor a host name, and
    ports out of range (the rules of onecat/validate.py)."
version_added: "0.3.0"
author: onecat developers
options:
  state_dir:
    description: Folder of node.json and agent-state (created root-owned, mode 0755).
    type: path
    default: /var/lib/onecat-gateway
  serving:
    description: Whether a server answers on the node.
    type: bool
    default: true
  in_rotation:
    description: Whether the node takes requests (its last gate passed).
    type: bool
    default: true
  reason:
    description: Why the node is out of rotation (ignored when O(in_rotation)).
    type: str
    default: ""
  address:
    description: Address the gateway reaches the node's server at.
    type: str
    required: true
  port:
    description: Port of the node's server.
    type: int
    required: true
  agent_port:
    description: Port of the node agent (0 when none is installed).
    type: int
    default: 0
  unit_file:
    description: The server's unit; its C(--max-num-seqs) sizes the node's maxconn (absent is fine).
    type: path
    default: /etc/systemd/system/vllm.service
  admitted_file:
    description: "Marker of the node's admission since its last boot (its folder is created
      root-owned, mode 0755); written when O(in_rotation), left alone otherwise."
    type: path
    default: /run/onecat-gateway/admitted
"""

EXAMPLES = r"""
- name: Record the node as serving and in rotation.
  gateway_node:
    address: "{{ ansible_facts['default_ipv4']['address'] }}"
    port: 8000
    agent_port: 8003
"""

RETURN = r"""
state:
  description: What node.json holds now.
  returned: always
  type: dict
agent_answer:
  description: What the agent answers now.
  returned: always
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.gateway.node_state import agent_answer, node_state, render_state
from ansible.module_utils.onecat.validate import problems

# What the admission marker holds (its presence is what counts).
ADMITTED = "admitted since the last boot by the serve stage (roles/gateway)\n"
# The deploy's drain before a restart or a burn-in (roles/gateway tasks/drain.yml): the agent
# answers it until the deploy readmits the node or holds it out, which this module records.
DEPLOY_DRAIN = "deploy-drain"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _attributes(module: AnsibleModule, path: str, mode: str) -> dict[str, object]:
    return module.load_file_common_arguments(
        {"mode": mode, "owner": "root", "group": "root"}, path=path
    )


def _write(module: AnsibleModule, path: str, text: str) -> bool:
    """Write text to path when it differs; True when something changed (or would)."""
    changed = _read(path) != text
    if changed and not module.check_mode:
        folder = os.path.dirname(path)
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gateway_node.")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            module.fail_json(
                msg=f"gateway_node: cannot write {path}: {err}; check the disk and "
                f"the folder's permissions"
            )
        module.atomic_move(tmp, path)
    if os.path.exists(path):
        changed = module.set_fs_attributes_if_different(_attributes(module, path, "0644"), changed)
    return changed


def _remove(module: AnsibleModule, path: str) -> None:
    """Remove path when it exists (not in check mode)."""
    if os.path.lexists(path) and not module.check_mode:
        try:
            os.unlink(path)
        except OSError as err:
            module.fail_json(msg=f"gateway_node: cannot remove {path}: {err}")


def _folder(module: AnsibleModule, folder: str) -> bool:
    """Create folder (root-owned, 0755) when missing; True when something changed (or would)."""
    changed = not os.path.isdir(folder)
    if changed and not module.check_mode:
        try:
            os.makedirs(folder, mode=0o755)
        except OSError as err:
            module.fail_json(msg=f"gateway_node: cannot create {folder}: {err}")
    if os.path.isdir(folder):
        changed = module.set_fs_attributes_if_different(
            _attributes(module, folder, "0755"), changed
        )
    return changed


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state_dir": {"type": "path", "default": "/var/lib/onecat-gateway"},
            "serving": {"type": "bool", "default": True},
            "in_rotation": {"type": "bool", "default": True},
            "reason": {"type": "str", "default": ""},
            "address": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "agent_port": {"type": "int", "default": 0},
            "unit_file": {"type": "path", "default": "/etc/systemd/system/vllm.service"},
            "admitted_file": {"type": "path", "default": "/run/onecat-gateway/admitted"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["address"].strip():
        module.fail_json(
            msg="gateway_node: the node's address is empty: set onecat_gateway_address "
            "to an address the gateway can reach the node at"
        )
    # The state folder is the agent's shell argument and the address a server line of the
    # gateway's haproxy.cfg: the rules of onecat.validate (the role checks them first).
    found = problems({
        "state_dir": ["path", params["state_dir"]],
        "admitted_file": ["path", params["admitted_file"]],
        "address": ["address", params["address"].strip()],
        "port": ["port", params["port"]],
        "agent_port": ["port", params["agent_port"], True],
    })
    if found:
        module.fail_json(msg="gateway_node: " + "; ".join(found)
                         + " (address: onecat_gateway_address; nothing was written)")
    state = node_state(
        serving=params["serving"],
        in_rotation=params["in_rotation"],
        reason=params["reason"],
        address=params["address"],
        port=params["port"],
        agent_port=params["agent_port"],
        unit_text=_read(params["unit_file"]) or "",
    )
    answer = agent_answer(params["in_rotation"], params["reason"])

    folder = params["state_dir"]
    changed = _folder(module, folder)
    if os.path.isdir(folder):
        changed = _write(module, os.path.join(folder, "node.json"), render_state(state)) or changed
        changed = _write(module, os.path.join(folder, "agent-state"), answer) or changed
        # The deploy decided where the node stands: its drain for a restart or a burn-in
        # (tasks/drain.yml) is over, whichever way it went. Transient, as the drain itself:
        # not reported as a change.
        _remove(module, os.path.join(folder, DEPLOY_DRAIN))
    # Written after agent-state: the agent reads both, and a node becomes admitted only once its
    # answer is "up".
    admitted = params["admitted_file"]
    if params["in_rotation"]:
        changed = _folder(module, os.path.dirname(admitted)) or changed
        if os.path.isdir(os.path.dirname(admitted)):
            changed = _write(module, admitted, ADMITTED) or changed
    module.exit_json(changed=changed, state=state, agent_answer=answer)


if __name__ == "__main__":
    main()
