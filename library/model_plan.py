#!/usr/bin/python
"""Ansible module: plan a model directory on this node's GPUs (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_plan
short_description: Check on the node whether a model can be served on its GPUs, and with which flags
description:
  - Reads the model directory's C(config.json), C(hf_quant_config.json),
    C(generation_config.json) and the safetensors headers (never the tensor data), detects
    the real quantization format from the metadata and the tensors, checks the engine can
    load it on this GPU, and computes weights and KV cache per GPU, how many full-length
    sequences fit, suggestions and the recommended engine flags.
  - The same planner as C(onecat plan); the result is returned as C(plan).
  - By default fails when the model does not fit or has problems, with the planner's reasons
    and computed suggestions, so a play never installs a server that cannot start.
version_added: "0.1.0"
author: onecat developers
options:
  model_dir:
    description: Model directory on the node.
    type: path
    required: true
  gpus:
    description: GPUs on the node.
    type: int
    default: 2
  gpu_memory_gib:
    description:
      - Nominal memory of one GPU in GiB, used only when O(health) gives no NVML
        C(memory_total_mib) (a "16 GB" V100 reports 16160 MiB = 15.78 GiB).
    type: float
    default: 16.0
  gpu_memory_utilization:
    description: Share of each GPU the engine reserves (C(--gpu-memory-utilization)).
    type: float
    default: 0.9
  max_model_len:
    description: Context length per sequence (C(--max-model-len)).
    type: int
    default: 8192
  tensor_parallel_size:
    description: Tensor parallel size; at most O(gpus).
    type: int
    default: 2
  kv_cache_dtype:
    description: KV cache element type; C(auto) is float16 on V100.
    type: str
    choices: [auto, fp8_e5m2]
    default: auto
  engine:
    description: Serving engine.
    type: str
    choices: [1cat-vllm, vllm]
    default: 1cat-vllm
  engine_version:
    description:
      - Engine release. Unset means 1.5.0 for C(1cat-vllm); upstream C(vllm) rules ignore it.
    type: str
  compute_capability:
    description: GPU compute capability, as C(7.0).
    type: str
    default: "7.0"
  max_num_batched_tokens:
    description:
      - Tokens per scheduler step (C(--max-num-batched-tokens)); sizes the activation peak
        vLLM profiles. 2048 is vLLM's default on cards under 70 GiB.
    type: int
    default: 2048
  max_num_seqs:
    description:
      - Sequences per step (C(--max-num-seqs)); sizes the profiled sampler pass. Unset means
        the plan chooses as many typical requests (O(typical_input_tokens) +
        O(typical_output_tokens)) as the KV cache holds, at most the engine's 256.
    type: int
  typical_input_tokens:
    description:
      - Prompt tokens of a typical request, which sizes C(--max-num-seqs) (the benchmark's 500).
    type: int
    default: 500
  typical_output_tokens:
    description:
      - Generated tokens of a typical request, which sizes C(--max-num-seqs) (the
        benchmark's 256).
    type: int
    default: 256
  cuda_context_gib:
    description: Per-GPU CUDA context and NCCL memory, which must fit outside vLLM's share.
    type: float
    default: 0.6
  non_torch_gib:
    description: Per-GPU non-torch memory that appears while vLLM profiles (inside its share).
    type: float
    default: 0.15
  cuda_graph_gib:
    description:
      - Per-GPU CUDA graph memory; outside vLLM's share with 1Cat's FLASH_ATTN_V100 (graphs are
        captured after the KV cache is sized), inside it otherwise.
    type: float
    default: 0.3
  speculative_config:
    description:
      - The engine's C(--speculative-config) (a JSON object, as text or a dict), such as
        method C(mtp) with C(num_speculative_tokens) 4. On a Gated DeltaNet hybrid the plan
        widens the conv state, holds 2 + n state blocks per linear group and request, and
        counts the MTP layer's KV cache and weights. O(args) and O(extra_args) override it.
    type: raw
  engine_env:
    description:
      - The environment the server gets (the role's C(vllm_serve_env)). The plan reads the
        fork's MTP switches from it (C(VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1) turns MTP4 on for a
        dense checkpoint with an MTP head) and returns them in C(serve_env).
    type: dict
  args:
    description:
      - The user's overrides of the engine flags (the role's C(vllm_serve_args), flag or option
        name to value; null or false removes a flag). The flags the plan depends on
        (C(--max-num-seqs), C(--max-num-batched-tokens), C(--kv-cache-dtype),
        C(--speculative-config), C(--max-model-len), C(--gpu-memory-utilization),
        C(--tensor-parallel-size)) are planned with the value the server will get.
    type: dict
    default: {}
  extra_args:
    description:
      - Further C(vllm serve) arguments (the role's C(vllm_serve_extra_args)), applied after
        O(args) as vLLM's parser does.
    type: list
    elements: str
    default: []
  health:
    description:
      - The C(gpu_health) facts (or a dict wrapping them under C(gpu_health)). Their NVML
        C(memory_total_mib) is the card size the plan uses; a cross-socket pair adds
        C(NCCL_P2P_DISABLE=1). Tensor parallel on sm_70 always adds
        C(--disable-custom-all-reduce).
    type: dict
  fail_on_misfit:
    description: Fail when the model does not fit or the plan has problems.
    type: bool
    default: true
notes:
  - Check mode is supported; the module never changes the node.
seealso:
  - name: onecat plan
    description: The same planner on the command line (C(onecat plan MODEL_DIR --json)).
    link: https://example.invalid/onecat/docs/plan.md
"""

EXAMPLES = r"""
- name: Plan the model on this node's GPUs.
  model_plan:
    model_dir: /models/qwen2.5-14b-instruct-nvfp4
    max_model_len: 8192
    health: "{{ ansible_facts['gpu_health'] | default(omit) }}"
  register: serve_plan

- name: Show the recommended engine flags.
  ansible.builtin.debug:
    var: serve_plan.plan.serve_args
"""

RETURN = r"""
plan:
  description: The planner's result (the same object as C(onecat plan --json)).
  returned: when the model directory could be read
  type: dict
  sample:
    model_type: qwen2
    architecture: Qwen2ForCausalLM
    quant_format: nvfp4-compressed-tensors
    problems: []
    warnings: ["bfloat16 checkpoint parts: V100 has no BF16, so they are served as float16"]
    engine: {name: 1cat-vllm, version: 1.5.0, compatible: true, reason: "..."}
    weight_bytes: 11373490816
    weight_bytes_per_gpu: 5687243392
    checkpoint_bytes: 10547737216
    checkpoint_bytes_per_gpu: 5274366592
    kv_cache_bytes_per_token: 196608
    kv_cache_bytes_per_gpu: 9205052390
    max_kv_tokens: 93632
    max_concurrency_at_max_model_len: 11
    fits: true
    ok: true
    suggestions: []
    serve_args:
      --dtype: half
      --tensor-parallel-size: 2
      --max-model-len: 8192
      --gpu-memory-utilization: 0.9
      --max-num-seqs: 44
      --attention-backend: FLASH_ATTN_V100
      --disable-custom-all-reduce: true
    serve_env: {}
msg:
  description: One line saying whether and how the model fits.
  returned: always
  type: str
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.model.overrides import effective_options
from ansible.module_utils.onecat.model.plan import INVALID_INPUT, misfit_message, plan_model

PLANNER_OPTIONS = ("gpus", "gpu_memory_gib", "gpu_memory_utilization", "max_model_len",
                   "tensor_parallel_size", "kv_cache_dtype", "engine", "engine_version",
                   "compute_capability", "max_num_batched_tokens", "max_num_seqs",
                   "cuda_context_gib", "non_torch_gib", "cuda_graph_gib",
                   "typical_input_tokens", "typical_output_tokens", "speculative_config",
                   "engine_env")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "model_dir": {"type": "path", "required": True},
            "gpus": {"type": "int", "default": 2},
            "gpu_memory_gib": {"type": "float", "default": 16.0},
            "gpu_memory_utilization": {"type": "float", "default": 0.9},
            "max_model_len": {"type": "int", "default": 8192},
            "tensor_parallel_size": {"type": "int", "default": 2},
            "kv_cache_dtype": {"type": "str", "default": "auto", "choices": ["auto", "fp8_e5m2"]},
            "speculative_config": {"type": "raw"},
            "engine_env": {"type": "dict"},
            "args": {"type": "dict", "default": {}},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "engine": {"type": "str", "default": "1cat-vllm", "choices": ["1cat-vllm", "vllm"]},
            "engine_version": {"type": "str"},
            "compute_capability": {"type": "str", "default": "7.0"},
            "max_num_batched_tokens": {"type": "int", "default": 2048},
            "max_num_seqs": {"type": "int"},
            "typical_input_tokens": {"type": "int", "default": 500},
            "typical_output_tokens": {"type": "int", "default": 256},
            "cuda_context_gib": {"type": "float", "default": 0.6},
            "non_torch_gib": {"type": "float", "default": 0.15},
            "cuda_graph_gib": {"type": "float", "default": 0.3},
            "health": {"type": "dict"},
            "fail_on_misfit": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    host = platform.node() or "this host"
    # The server gets the role's flags merged with the user's: plan those (overrides.py).
    overrides, sources = effective_options(params["args"], params["extra_args"])
    options = {**{name: params[name] for name in PLANNER_OPTIONS}, **overrides}
    try:
        plan = plan_model(params["model_dir"], health=params["health"], **options)
    except INVALID_INPUT as error:
        given = "; ".join(f"{option} from {source}" for option, source in sources.items())
        module.fail_json(msg=f"{host}: cannot plan the model: {error}"
                         + (f" (planned with {given})" if given else ""))
    if sources:
        plan["overrides"] = sources
    if not plan["ok"] and params["fail_on_misfit"]:
        module.fail_json(msg=misfit_message(plan, host), plan=plan)
    module.exit_json(changed=False, plan=plan, msg=f"{host}: {plan['fit_reason']}")


if __name__ == "__main__":
    main()
