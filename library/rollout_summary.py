#!/usr/bin/python
"""Ansible module: write the fleet rollout summary (rollout.json) on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollout_summary
short_description: Summarise a onecat rollout per host and write rollout.json
description:
  - Takes the facts each stage recorded per host (stage reached, preflight and health
    judgements, serve state) and returns one row per host with its status, verdict,
    serving or not, rolled back or not, and the reasons a host was held out.
  - Writes the summary as JSON to I(dest) (not in check mode). Meant to run once, on the
    controller. Writing it is never reported as a change, since it is the run's log.
version_added: "0.1.0"
author: onecat developers
options:
  hosts:
    description: Host name to its facts (C(onecat_stage), C(onecat_stages_passed),
      C(onecat_preflight), C(gpu_health), C(vllm_serve_result), C(gateway_node_state)).
    type: dict
    required: true
  run_id:
    description: Id of this run, written into the summary.
    type: str
    default: ""
  notes:
    description:
      - What holds for the whole fleet in this run (e.g. an open gateway), one line each;
        written into the summary and printed under the table on every run.
    type: list
    elements: str
    default: []
  dest:
    description: Path of the JSON file to write; its folder is created.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Write the rollout summary.
  rollout_summary:
    hosts:
      gpu-node-01:
        onecat_stage: serve
        onecat_stages_passed: [preflight, driver, runtime, health, serve]
        vllm_serve_result: {serving: true, rolled_back: false, image_id: "sha256:0f3c..."}
    run_id: "{{ onecat_run_id }}"
    dest: results/{{ onecat_run_id }}/rollout.json
"""

RETURN = r"""
summary:
  description: The summary written to I(dest).
  returned: always
  type: dict
table:
  description: The summary as a fixed-width table, one line per host.
  returned: always
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.fleet.rollout import render_table, summarize

FACT_KEYS = ("onecat_stage", "onecat_stages_passed", "onecat_skip_reason", "onecat_hold_reason",
             "onecat_preflight", "gpu_health", "vllm_serve_result", "gateway_node_state")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "hosts": {"type": "dict", "required": True},
            "run_id": {"type": "str", "default": ""},
            "notes": {"type": "list", "elements": "str", "default": []},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    hosts = {
        name: {key: facts.get(key) for key in FACT_KEYS} if isinstance(facts, dict) else {}
        for name, facts in module.params["hosts"].items()
    }
    summary = summarize(hosts, module.params["run_id"], module.params["notes"])
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    dest = module.params["dest"]
    # The summary is this run's log on the controller, not a change to any host: it is
    # never reported as changed, so an idempotent re-run stays at changed=0.
    if not module.check_mode:
        try:
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            with open(dest, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as error:
            module.fail_json(msg=f"cannot write the rollout summary to {dest}: {error}")
    module.exit_json(changed=False, summary=summary, table=render_table(summary))


if __name__ == "__main__":
    main()
