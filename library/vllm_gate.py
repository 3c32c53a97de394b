#!/usr/bin/python
"""Ansible module: wait for a vLLM server to serve, then prove it with a smoke completion."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_gate
short_description: Gate a new vLLM server on health, its model list and a smoke completion
description:
  - Polls C(/health) until it answers 200 and C(/v1/models) lists the served model name, then
    sends one short completion at temperature 0 and checks that the text is not empty and not
    one token repeated (the garbage/NaN symptom of a broken engine).
  - When O(unit) is given, gives up as soon as systemd reports that the unit restarted or
    failed, instead of waiting for the whole timeout while the engine crash-loops.
  - Never changes the node; fails with the reason when the gate is not passed.
version_added: "0.1.0"
author: onecat developers
options:
  url:
    description: Base URL of the server as seen from the node.
    type: str
    default: http://127.0.0.1:8000
  served_model_name:
    description: The name C(/v1/models) must list and the smoke completion uses.
    type: str
    required: true
  timeout:
    description: Seconds to wait for health and the model list (model load can take minutes).
    type: int
    default: 900
  interval:
    description: Seconds between two health polls.
    type: float
    default: 2
  api_key:
    description: Bearer token, when the server requires one.
    type: str
    default: ""
  api_key_file:
    description:
      - An environment file on the node (the unit's C(--env-file)); its C(VLLM_API_KEY) is the
        bearer token, so a server is always gated with the keys it runs with. Overrides
        O(api_key); a missing file means no key.
    type: path
    default: ""
  smoke:
    description: Send the smoke completion once the server is ready.
    type: bool
    default: true
  smoke_prompt:
    description: Prompt of the smoke completion.
    type: str
    default: The capital of France is
  smoke_max_tokens:
    description: Tokens the smoke completion asks for.
    type: int
    default: 16
  unit:
    description: systemd unit running the server; its restarts and failure end the wait early.
    type: str
    default: ""
notes:
  - In check mode the module does nothing and reports success.
"""

EXAMPLES = r"""
- name: Gate the server on health and a smoke completion.
  vllm_gate:
    url: http://127.0.0.1:8000
    served_model_name: qwen2.5-14b
    timeout: 900
    unit: vllm.service
"""

RETURN = r"""
ready:
  description: Whether health and the model list were reached in time.
  returned: always
  type: bool
smoke_passed:
  description: Whether the smoke completion passed.
  returned: always
  type: bool
smoke_text:
  description: Text of the smoke completion.
  returned: when the smoke completion answered
  type: str
elapsed:
  description: Seconds until ready.
  returned: always
  type: float
msg:
  description: What passed or what failed.
  returned: always
  type: str
"""

import platform
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.serve.gate import key_from_env_file, smoke, wait_ready


def unit_state(unit: str) -> tuple[str, int]:
    """(ActiveState, NRestarts) of a systemd unit; ('', 0) when systemctl cannot tell."""
    proc = subprocess.run(["systemctl", "show", unit, "-p", "ActiveState", "-p", "NRestarts"],
                          capture_output=True, text=True, check=False)
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    try:
        restarts = int(values.get("NRestarts") or 0)
    except ValueError:
        restarts = 0
    return values.get("ActiveState", ""), restarts


def death_watch(unit: str):
    """A callable that names why the unit is dead (restarted or failed), else ''."""
    if not unit:
        return None
    _, first_restarts = unit_state(unit)

    def is_dead() -> str:
        state, restarts = unit_state(unit)
        if restarts > first_restarts:
            return f"{unit} exited and was restarted by systemd ({restarts} restart(s))"
        if state in ("failed", "inactive"):
            return f"{unit} is {state}"
        return ""

    return is_dead


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8000"},
            "served_model_name": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 900},
            "interval": {"type": "float", "default": 2},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "api_key_file": {"type": "path", "default": ""},
            "smoke": {"type": "bool", "default": True},
            "smoke_prompt": {"type": "str", "default": "The capital of France is"},
            "smoke_max_tokens": {"type": "int", "default": 16},
            "unit": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = platform.node() or "this host"
    if module.check_mode:
        module.exit_json(changed=False, ready=False, smoke_passed=False, elapsed=0.0,
                         msg="check mode: the server was not probed")
    url = p["url"].rstrip("/")
    api_key = p["api_key"]
    if p["api_key_file"]:
        try:
            with open(p["api_key_file"], encoding="utf-8") as handle:
                api_key = key_from_env_file(handle.read())
        except FileNotFoundError:
            api_key = ""
        except OSError as error:
            module.fail_json(msg=f"{host}: cannot read the key file {p['api_key_file']}: "
                                 f"{error.strerror}")
    if api_key:
        module.no_log_values.add(api_key)
    start = time.monotonic()
    ready, reason = wait_ready(url, p["served_model_name"], p["timeout"], api_key,
                               death_watch(p["unit"]), p["interval"])
    elapsed = round(time.monotonic() - start, 1)
    if not ready:
        module.fail_json(msg=f"{host}: the server at {url} is not serving: {reason}",
                         ready=False, smoke_passed=False, elapsed=elapsed)
    if not p["smoke"]:
        module.exit_json(changed=False, ready=True, smoke_passed=False, elapsed=elapsed,
                         msg=f"{host}: {reason} after {elapsed} s (no smoke test asked)")
    passed, why, text = smoke(url, p["served_model_name"], p["smoke_prompt"],
                              p["smoke_max_tokens"], api_key)
    if not passed:
        module.fail_json(msg=f"{host}: the server at {url} failed its smoke test: {why}",
                         ready=True, smoke_passed=False, smoke_text=text, elapsed=elapsed)
    module.exit_json(changed=False, ready=True, smoke_passed=True, smoke_text=text,
                     elapsed=elapsed, msg=f"{host}: {reason} after {elapsed} s; {why}")


if __name__ == "__main__":
    main()
