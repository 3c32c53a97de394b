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
  - Flag names are read as vLLM's parser reads them (C(--api_key) is C(--api-key)), and an
    abbreviation of a role-owned flag is refused too.
  - Refuses control characters in every value that reaches the unit, the environment file or a
    command line, names that do not match their rule as a whole, secret-looking or role-owned
    environment variables outside the root-only environment file, and a bind address that is
    not an IP literal; returns where the API is published and whether that is beyond loopback.
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
  help_required:
    description: The image's help text must list its flags (the check fails closed).
    type: bool
    default: false
  image_id:
    description: The image ID the unit runs; must be C(sha256:) and 64 hex digits.
    type: str
    default: ""
  image_tag:
    description: The image's tag, written into a comment of the unit.
    type: str
    default: ""
  guard:
    description: Load the key guard (C(--middleware onecat_guard.Guard)); the image must accept it.
    type: bool
    default: false
  bind_address:
    description: Host address (an IP literal) the API is published on; empty skips the check.
    type: str
    default: ""
  publish_port:
    description: Host port the API is published on.
    type: str
    default: "8000"
  env:
    description: Container environment; role-owned and secret-looking names are refused.
    type: dict
    default: {}
  baked_env:
    description: Environment baked into the image; checked like O(env).
    type: dict
    default: {}
  secret_env:
    description: Secrets for the root-only environment file; names checked, values single-line.
    type: dict
    default: {}
  keys:
    description: API and scraper keys by variable name (empty, or 16-512 printable characters).
    type: dict
    default: {}
  open_paths:
    description: URL paths answered without a key.
    type: list
    elements: str
    default: []
  names:
    description: Variable name to value, each matched whole against its rule.
    type: dict
    default: {}
  values:
    description: Variable name to value (nested lists and dicts too) without control characters.
    type: dict
    default: {}
  requirements_lock:
    description: Text of the image's requirements lock; every requirement must be pinned with
      C(==) and carry C(--hash=sha256:...).
    type: str
    default: ""
  requirements_lock_name:
    description: Where the lock comes from, for messages.
    type: str
    default: the requirements lock
  torch_spec:
    description: The torch requirement the lock must pin (empty skips that check).
    type: str
    default: ""
  torch_index_url:
    description:
      - The index torch comes from. Its last path segment (cu128, cpu...) is the local label
        the locked torch must carry (empty skips that check).
    type: str
    default: ""
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
publish:
  description: The C(docker run --publish) value, e.g. C(127.0.0.1:8000:8000).
  returned: when O(bind_address) is given
  type: str
url:
  description: The URL the node reaches the server at.
  returned: when O(bind_address) is given
  type: str
exposed:
  description: Whether the API is published beyond loopback.
  returned: when O(bind_address) is given
  type: bool
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.serve.flags import (
    accepted_flags,
    args_to_argv,
    check_argv,
    group_lines,
    help_problems,
    merge_args,
    serve_argv,
)
from ansible.module_utils.onecat.serve.image_ref import (
    check_image_env,
    check_image_ref,
    check_lock,
    torch_variant,
)
from ansible.module_utils.onecat.serve.inputs import (
    control_problems,
    env_problems,
    exposure,
    key_problems,
    name_problems,
    open_path_problems,
)


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
            "help_required": {"type": "bool", "default": False},
            "image_id": {"type": "str", "default": ""},
            "image_tag": {"type": "str", "default": ""},
            "guard": {"type": "bool", "default": False},
            "bind_address": {"type": "str", "default": ""},
            "publish_port": {"type": "str", "default": "8000"},
            "env": {"type": "dict", "default": {}},
            "baked_env": {"type": "dict", "default": {}},
            "secret_env": {"type": "dict", "default": {}, "no_log": True},
            "keys": {"type": "dict", "default": {}, "no_log": True},
            "open_paths": {"type": "list", "elements": "str", "default": []},
            "names": {"type": "dict", "default": {}},
            "values": {"type": "dict", "default": {}},
            "requirements_lock": {"type": "str", "default": ""},
            "requirements_lock_name": {"type": "str", "default": "the requirements lock"},
            "torch_spec": {"type": "str", "default": ""},
            "torch_index_url": {"type": "str", "default": ""},
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
    problems = help_problems(p["help_text"], p["help_required"])
    problems += check_argv(p["engine"], [*args_to_argv(args), *p["extra_args"]], capability,
                           accepted)
    if p["guard"] and accepted and "--middleware" not in accepted:
        problems.append("this engine image has no --middleware flag, so the key guard that "
                        "closes every path cannot load; pin an image that has it, or publish on "
                        "loopback without a key (vllm_serve_bind_address: 127.0.0.1)")
    if p["image_ref"]:
        problems += check_image_ref(p["image_ref"], "engine image")
    problems += check_image_env(p["image_env"], "the engine image", p["image_env_required"])
    problems += name_problems({"image_id": p["image_id"], **p["names"]})
    problems += control_problems("image_tag", p["image_tag"])
    for name, value in p["values"].items():
        problems += control_problems(name, value)
    problems += control_problems("vllm_serve_args", p["args"])
    problems += control_problems("vllm_serve_extra_args", p["extra_args"])
    problems += control_problems("served_model_name", p["served_model_name"] or "")
    problems += control_problems("model_path", p["model_path"] or "")
    problems += control_problems("environment", p["env"])
    problems += env_problems("vllm_serve_env", p["env"])
    problems += env_problems("vllm_serve_image_env", p["baked_env"])
    problems += control_problems("vllm_serve_image_env", p["baked_env"])
    problems += env_problems("vllm_serve_secret_env", p["secret_env"], secrets=True)
    # Names and the offending character only: a secret's value is never echoed.
    problems += control_problems("vllm_serve_secret_env", p["secret_env"])
    problems += key_problems(p["keys"])
    problems += open_path_problems(p["open_paths"])
    if p["requirements_lock"].strip() or p["requirements_lock_name"] != "the requirements lock":
        problems += check_lock(p["requirements_lock"], p["requirements_lock_name"], p["torch_spec"],
                               torch_variant(p["torch_index_url"]))
    published: dict = {}
    if p["bind_address"]:
        published, wrong = exposure(p["bind_address"], p["publish_port"])
        problems += wrong
    if problems:
        what = repr(p["served_model_name"]) if p["served_model_name"] else "this node"
        module.fail_json(msg=f"{host}: the {p['engine']} command for {what} cannot be used: "
                             + "; ".join(problems), problems=problems)
    if not p["model_path"]:
        module.exit_json(changed=False, argv=[], lines=[], args=args, **published)
    argv = serve_argv(p["model_path"], p["served_model_name"], p["host"], p["port"], args,
                      p["extra_args"], guard=p["guard"])
    try:
        lines = group_lines(argv)
    except ValueError as error:
        module.fail_json(msg=f"{host}: the engine command cannot go into a unit: {error}")
    module.exit_json(changed=False, argv=argv, lines=lines, args=args, **published)


if __name__ == "__main__":
    main()
