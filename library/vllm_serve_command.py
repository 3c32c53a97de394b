#!/usr/bin/python
"""Ansible module: compose and check the `vllm serve` command of a node (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_serve_command
short_description: Compose and check the vllm serve arguments of a node
description:
  - Merges the planner's recommended engine flags with the user's overrides (an override of
    C(null) or C(false) removes a flag), appends extra arguments, and checks the result before
    a unit file is written.
  - Refuses flags the engines no longer accept (C(--swap-space)), values they reject
    (C(--quantization nvfp4)), C(--dtype bfloat16) on a GPU without bfloat16, flags the role
    owns (C(--host), C(--port), C(--served-model-name), C(--api-key)), and, when the image's own
    C(vllm serve --help=all) text is given, any flag that text does not list.
  - Refuses an engine image reference that is unpinned or not CUDA 12.x, and an image whose
    C(CUDA_VERSION) is not 12.x.
version_added: "0.1.0"
author: onecat developers
options:
  engine:
    description: Serving engine.
    type: str
    choices: [1cat-vllm, vllm]
    default: 1cat-vllm
  model_path:
    description:
      - Model directory as the engine sees it (inside the container).
      - Without it (and O(served_model_name)) the module only runs the checks.
    type: str
  served_model_name:
    description: Name clients use in the C(model) field.
    type: str
  host:
    description: Address the engine listens on inside the container.
    type: str
    default: 0.0.0.0
  port:
    description: Port the engine listens on inside the container.
    type: int
    default: 8000
  planned_args:
    description: The planner's C(serve_args) (flag to value; C(true) is a bare flag).
    type: dict
    default: {}
  args:
    description: User overrides of engine flags; keys with or without C(--), C(_) or C(-).
    type: dict
    default: {}
  extra_args:
    description: Further engine arguments, appended as they are.
    type: list
    elements: str
    default: []
  compute_capability:
    description: GPU compute capability, as C(7.0).
    type: str
    default: "7.0"
  help_text:
    description: Output of C(vllm serve --help=all) from the pinned image; empty skips that check.
    type: str
    default: ""
  image_ref:
    description: An image reference that must be pinned and CUDA 12.x; empty skips that check.
    type: str
    default: ""
  image_env:
    description: The image's C(Config.Env) list, checked for C(CUDA_VERSION=12.*).
    type: list
    elements: str
    default: []
  image_env_required:
    description: Refuse an image that declares no C(CUDA_VERSION) at all.
    type: bool
    default: false
notes:
  - Check mode is supported; the module never changes the node.
"""

EXAMPLES = r"""
- name: Compose the engine command.
  vllm_serve_command:
    engine: 1cat-vllm
    model_path: /models/qwen2.5-14b-instruct-nvfp4
    served_model_name: qwen2.5-14b
    planned_args: "{{ serve_plan.plan.serve_args }}"
    args: {max_num_seqs: 32}
    extra_args: [--enable-prefix-caching]
  register: serve_command
"""

RETURN = r"""
argv:
  description: The arguments after C(vllm), starting with C(serve).
  returned: success
  type: list
  elements: str
  sample: [serve, /models/m, --served-model-name, m, --host, 0.0.0.0, --port, "8000", --dtype, half]
lines:
  description: The same arguments quoted for a systemd ExecStart, one flag and its value per line.
  returned: success
  type: list
  elements: str
args:
  description: The merged engine flags (flag to value).
  returned: success
  type: dict
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.serve.flags import (
    accepted_flags,
    args_to_argv,
    check_argv,
    group_lines,
    merge_args,
    serve_argv,
)
from ansible.module_utils.onecat.serve.image_ref import check_image_env, check_image_ref


def capability_of(text: str) -> int:
    major, _, minor = str(text).strip().partition(".")
    return int(major) * 10 + int(minor or 0)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "default": "1cat-vllm", "choices": ["1cat-vllm", "vllm"]},
            "model_path": {"type": "str"},
            "served_model_name": {"type": "str"},
            "host": {"type": "str", "default": "0.0.0.0"},
            "port": {"type": "int", "default": 8000},
            "planned_args": {"type": "dict", "default": {}},
            "args": {"type": "dict", "default": {}},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "compute_capability": {"type": "str", "default": "7.0"},
            "help_text": {"type": "str", "default": ""},
            "image_ref": {"type": "str", "default": ""},
            "image_env": {"type": "list", "elements": "str", "default": []},
            "image_env_required": {"type": "bool", "default": False},
        },
        required_together=[("model_path", "served_model_name")],
        supports_check_mode=True,
    )
    p = module.params
    host = platform.node() or "this host"
    try:
        capability = capability_of(p["compute_capability"])
    except ValueError:
        module.fail_json(msg=f"{host}: compute_capability {p['compute_capability']!r} is not "
                             "like 7.0")
    args = merge_args(p["planned_args"], p["args"])
    accepted = accepted_flags(p["help_text"]) if p["help_text"].strip() else None
    problems = check_argv(p["engine"], [*args_to_argv(args), *p["extra_args"]], capability,
                          accepted)
    if p["image_ref"]:
        problems += check_image_ref(p["image_ref"], "engine image")
    problems += check_image_env(p["image_env"], "the engine image", p["image_env_required"])
    if problems:
        what = repr(p["served_model_name"]) if p["served_model_name"] else "this node"
        module.fail_json(msg=f"{host}: the {p['engine']} command for {what} cannot be used: "
                             + "; ".join(problems), problems=problems)
    if not p["model_path"]:
        module.exit_json(changed=False, argv=[], lines=[], args=args)
    argv = serve_argv(p["model_path"], p["served_model_name"], p["host"], p["port"], args,
                      p["extra_args"])
    module.exit_json(changed=False, argv=argv, lines=group_lines(argv), args=args)


if __name__ == "__main__":
    main()
