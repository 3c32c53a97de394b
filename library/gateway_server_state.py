#!/usr/bin/python
"""Ansible module: save the gateway's server states for its next reload (server-state-file)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_server_state
short_description: Save the onecat gateway's server states before HAProxy reloads
description:
  - "Writes HAProxy's C(show servers state) (runtime API, admin socket) to O(dest), the
    C(server-state-file) the new process loads on reload: a server drained or held in maint
    through the runtime API stays so, and a server that was down does not start UP."
  - "Does nothing, successfully, when no gateway runs yet (no admin socket): the first start
    has no state to keep."
  - "Never reports C(changed): the file is a hand-over between two HAProxy processes."
version_added: "0.3.0"
author: onecat developers
options:
  socket:
    description: HAProxy's admin socket (a path, or HOST:PORT).
    type: str
    required: true
  dest:
    description: The C(server-state-file) the configuration names.
    type: path
    required: true
notes:
  - Check mode is supported; nothing is written in check mode.
"""

EXAMPLES = r"""
- name: Save the servers' state before the reload.
  gateway_server_state:
    socket: /run/haproxy/admin.sock
    dest: /var/lib/haproxy/onecat-server-state
"""

RETURN = r"""
servers:
  description: Server lines written (0 when no gateway runs).
  returned: always
  type: int
msg:
  description: One line saying what was done.
  returned: always
  type: str
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.gateway.runtime import RuntimeApiError, save_server_state


def main() -> None:
    module = AnsibleModule(
        argument_spec={"socket": {"type": "str", "required": True},
                       "dest": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    host = platform.node() or "this host"
    address, dest = module.params["socket"], module.params["dest"]
    if address.startswith("/") and not os.path.exists(address):
        module.exit_json(changed=False, servers=0,
                         msg=f"{host}: no gateway runs yet ({address} absent): no state to keep")
    if module.check_mode:
        module.exit_json(changed=False, servers=0, msg=f"{host}: would save {dest}")
    try:
        count = save_server_state(address, dest)
    except RuntimeApiError as error:
        module.fail_json(msg=f"{host}: cannot save the servers' state for the reload: {error}; "
                         "the reload would forget every drain and hold")
    except OSError as error:
        module.fail_json(msg=f"{host}: cannot write {dest}: {error.strerror or error}")
    module.exit_json(changed=False, servers=count, msg=f"{host}: saved {count} server(s) to {dest}")


if __name__ == "__main__":
    main()
