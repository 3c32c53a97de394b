#!/usr/bin/python
"""Ansible module: drain, hold or release one node at an HAProxy gateway (runtime API)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_server
short_description: Set one server of the onecat gateway to drain, maint or ready
description:
  - "Talks to HAProxy's runtime API on its admin socket (C(set server B/S state ...),
    C(show stat)). Runs on the gateway host."
  - With O(state=drain) and O(wait_idle) above 0, waits until the server has no session
    left (the requests in flight finished), at most O(wait_idle) seconds.
  - "Does nothing, successfully, when no gateway runs yet (no admin socket) or the server is
    not in the back end (the node never passed a gate): there is nothing to drain."
  - Reports C(changed) when the server's administrative state changed.
  - "With O(state=query) and no O(server), reads every server of the back end (RETURN
    C(servers)): C(onecat status) shows each gateway's own view of the nodes."
version_added: "0.2.0"
author: onecat developers
options:
  socket:
    description: HAProxy's admin socket (a path, or HOST:PORT).
    type: str
    default: /run/haproxy/admin.sock
  backend:
    description: The back end holding the nodes.
    type: str
    default: onecat_nodes
  server:
    description: "Server name (the node's inventory name). Required unless O(state=query);
      a query without it reads the whole back end."
    type: str
  state:
    description: Administrative state to set; C(query) only reads it.
    type: str
    choices: [drain, maint, ready, query]
    default: query
  master_socket:
    description: "HAProxy's master CLI (a path, or HOST:PORT): a drain also waits for the
      server's sessions in the old workers of a reload. Ignored when the path is absent."
    type: str
    default: /run/haproxy-master.sock
  wait_idle:
    description: With C(drain), seconds to wait for zero sessions (0 does not wait).
    type: float
    default: 0
  fail_on_busy:
    description: Fail when sessions remain after O(wait_idle) (otherwise only report them).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Drain the node at the gateway and wait for its requests to finish.
  gateway_server:
    server: "{{ inventory_hostname }}"
    state: drain
    wait_idle: 300
  delegate_to: "{{ groups['gateway'] | first }}"
"""

RETURN = r"""
present:
  description: "Whether a gateway runs and the server is in its back end (without O(server):
    the back end is)."
  returned: always
  type: bool
previous:
  description: Administrative state before (ready, drain, maint), when present.
  returned: always
  type: str
admin:
  description: Administrative state after, when present.
  returned: always
  type: str
sessions:
  description: Sessions still on the server at the end.
  returned: always
  type: int
waited:
  description: Seconds spent waiting for the server to become idle.
  returned: always
  type: float
rotation:
  description: Each server of the back end and its status (UP, DRAIN, MAINT, DOWN ...), before
    any change, when present.
  returned: always
  type: dict
  sample: {"fleet-a": "MAINT", "fleet-b": "UP"}
servers:
  description: Each server of the back end, when present (before any change), with its status
    and the last word of its agent check (HAProxy's C(last_agt), e.g. C(held ...)).
  returned: always
  type: dict
  sample: {"fleet-a": {"status": "MAINT", "agent": "maint"}, "fleet-b": {"status": "UP",
           "agent": "Layer7 check passed"}}
last_in_rotation:
  description: Whether the server takes requests and no other server of the back end does,
    before any change (taking it out then leaves every client without a server).
  returned: always
  type: bool
msg:
  description: What happened.
  returned: always
  type: str
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.gateway.runtime import (
    Runtime,
    RuntimeApiError,
    in_rotation,
    last_in_rotation,
    rotation,
    server_status,
    servers,
)


def every_server(rows: list[dict[str, str]], backend: str) -> dict[str, dict[str, str]]:
    return {s.server: {"status": s.status, "agent": s.agent} for s in servers(rows, backend)}


def backend_present(module: AnsibleModule, gateway: str, backend: str,
                    rows: list[dict[str, str]], result: dict) -> None:
    """A query without a server: the whole back end's servers, and nothing else to do."""
    present = any(row.get("pxname") == backend for row in rows)
    states = rotation(rows, backend)
    result.update(present=present, rotation=states, servers=every_server(rows, backend))
    module.exit_json(changed=False, msg=(
        f"{gateway}: {backend}: {sum(in_rotation(s) for s in states.values())} of "
        f"{len(states)} server(s) in rotation" if present
        else f"{gateway}: no back end {backend} in the gateway's configuration"), **result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "str", "default": "/run/haproxy/admin.sock"},
            "backend": {"type": "str", "default": "onecat_nodes"},
            "server": {"type": "str"},
            "state": {"type": "str", "default": "query",
                      "choices": ["drain", "maint", "ready", "query"]},
            "master_socket": {"type": "str", "default": "/run/haproxy-master.sock"},
            "wait_idle": {"type": "float", "default": 0},
            "fail_on_busy": {"type": "bool", "default": False},
        },
        required_if=[("state", state, ["server"]) for state in ("drain", "maint", "ready")],
        supports_check_mode=True,
    )
    p = module.params
    gateway = platform.node() or "the gateway"
    result = {"present": False, "previous": "", "admin": "", "sessions": 0, "waited": 0.0,
              "rotation": {}, "servers": {}, "last_in_rotation": False}
    if p["socket"].startswith("/") and not os.path.exists(p["socket"]):
        module.exit_json(changed=False, msg=f"{gateway}: no gateway runs here yet "
                                            f"({p['socket']} is absent): nothing to do", **result)
    master = p["master_socket"]
    runtime = Runtime(p["socket"], master=master if master and (
        not master.startswith("/") or os.path.exists(master)) else None)
    where = f"{gateway}: {p['backend']}/{p['server']}"
    try:
        rows = runtime.stat()
        if not p["server"]:
            backend_present(module, gateway, p["backend"], rows, result)
        status = server_status(rows, p["backend"], p["server"])
        if status is None:
            module.exit_json(changed=False, msg=f"{where} is not in the gateway's back end "
                                                "(it never passed a gate): nothing to do",
                             **result)
        states = rotation(rows, p["backend"])
        result.update(present=True, previous=status.admin, admin=status.admin,
                      sessions=status.sessions, rotation=states,
                      servers=every_server(rows, p["backend"]),
                      last_in_rotation=last_in_rotation(states, p["server"]))
        state = p["state"]
        changed = state != "query" and status.admin != state
        if changed and not module.check_mode:
            runtime.set_state(p["backend"], p["server"], state)
            result["admin"] = state
        if state == "drain" and p["wait_idle"] > 0 and not module.check_mode:
            idle, left, waited = runtime.wait_idle(p["backend"], p["server"], p["wait_idle"])
            result.update(sessions=left, waited=round(waited, 1))
            if not idle:
                message = (f"{where} still has {left} request(s) in flight after "
                           f"{waited:.0f} s of draining (raise the drain timeout to wait longer)")
                if p["fail_on_busy"]:
                    module.fail_json(msg=message, changed=changed, **result)
                module.warn(message + "; going on, they will be cut")
    except RuntimeApiError as error:
        module.fail_json(msg=f"{gateway}: {error}", **result)
    module.exit_json(changed=changed,
                     msg=f"{where}: {result['previous']} -> {result['admin']}, "
                         f"{result['sessions']} session(s) left after {result['waited']} s",
                     **result)


if __name__ == "__main__":
    main()
