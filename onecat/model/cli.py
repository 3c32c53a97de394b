"""`onecat plan MODEL_DIR|hf:ORG/NAME@REV`: can this checkpoint serve on these GPUs, and how?

An hf: source is planned from its config files and safetensors headers read over HTTP
(onecat.model.fetch.plan_remote): the same plan, without downloading the weights.

Exit status: 0 the plan is servable (it fits and nothing is wrong), 1 it does not fit or
has problems (the plan is still printed), 2 invalid input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from onecat.model.engines import DEFAULT_ENGINE, DEFAULT_ENGINE_VERSION, ENGINES
from onecat.model.fetch import FetchError, plan_remote
from onecat.model.overrides import effective_options
from onecat.model.plan import (
    DEFAULTS,
    GIB,
    INVALID_INPUT,
    KV_CACHE_DTYPE_BYTES,
    MAX_NUM_SEQS_CAP,
    WORKLOAD_DEFAULTS,
    PlanInputError,
    plan_model,
)
from onecat.model.safetensors import CheckpointError, read_json


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="check before starting a server whether a model fits the GPUs, and with which flags",
        description="Read a model directory's config and safetensors headers (never the "
        "tensor data) and plan it on the GPUs: quantization format, engine compatibility, "
        "weights and KV cache per GPU, how many full-length sequences fit, and the serve flags.",
        epilog="Exit status: 0 fits and servable, 1 does not fit or has problems, "
        "2 invalid input.",
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR",
                        help="Hugging Face model directory, or hf:ORG/NAME[@REVISION] "
                        "(read over HTTP from HF_ENDPOINT: config and safetensors headers only)")
    parser.add_argument("--gpus", type=int, default=DEFAULTS["gpus"],
                        help="GPUs on the node (default: %(default)s)")
    parser.add_argument("--gpu-memory-gib", type=float, default=DEFAULTS["gpu_memory_gib"],
                        help="nominal memory of one GPU in GiB, used only when --health gives "
                        "no NVML memory_total_mib (default: %(default)s; a '16 GB' V100 "
                        "reports 16160 MiB = 15.78 GiB)")
    parser.add_argument("--gpu-memory-utilization", type=float,
                        default=DEFAULTS["gpu_memory_utilization"],
                        help="share of each GPU vLLM requests (default: %(default)s)")
    parser.add_argument("--max-model-len", type=int, default=DEFAULTS["max_model_len"],
                        help="context length per sequence (default: %(default)s)")
    parser.add_argument("--tensor-parallel-size", type=int,
                        default=DEFAULTS["tensor_parallel_size"],
                        help="tensor parallel size (default: %(default)s)")
    parser.add_argument("--kv-cache-dtype", choices=tuple(KV_CACHE_DTYPE_BYTES),
                        default=DEFAULTS["kv_cache_dtype"],
                        help="KV cache element type (default: %(default)s = float16)")
    parser.add_argument("--engine", choices=ENGINES, default=DEFAULTS["engine"],
                        help="serving engine (default: %(default)s)")
    parser.add_argument("--engine-version",
                        help=f"engine release (default: {DEFAULT_ENGINE_VERSION} for "
                        f"{DEFAULT_ENGINE}; upstream vllm's rules do not depend on it)")
    parser.add_argument("--compute-capability", default=DEFAULTS["compute_capability"],
                        help="GPU compute capability (default: %(default)s = V100)")
    parser.add_argument("--max-num-batched-tokens", type=int,
                        default=DEFAULTS["max_num_batched_tokens"],
                        help="tokens per scheduler step; sizes the profiled activation peak "
                        "(default: %(default)s, vLLM's default on cards under 70 GiB)")
    parser.add_argument("--max-num-seqs", type=int, default=None,
                        help="sequences per step (default: as many typical requests as the KV "
                        f"cache holds, at most {MAX_NUM_SEQS_CAP}, the engine's default)")
    parser.add_argument("--speculative-config", metavar="JSON",
                        help="the engine's --speculative-config, e.g. '{\"method\": \"mtp\", "
                        "\"num_speculative_tokens\": 4}': on a Gated DeltaNet hybrid the plan "
                        "widens the conv state, holds 2 + n state blocks per linear group and "
                        "request, and counts the MTP layer's KV cache and weights")
    parser.add_argument("--env", metavar="NAME=VALUE", action="append", default=[],
                        help="environment the server gets (repeatable); the plan reads the "
                        "fork's MTP switches, e.g. VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1 (MTP4 "
                        "for a dense checkpoint with an MTP head)")
    parser.add_argument("--serve-args", metavar="JSON", default="{}",
                        help="the serve role's vllm_serve_args as JSON ({flag: value}; null "
                        "removes one): the flags the plan depends on are planned as the server "
                        "gets them, over the options above")
    parser.add_argument("--serve-extra-arg", metavar="ARG", action="append", default=[],
                        help="one item of vllm_serve_extra_args (repeatable), applied after "
                        "--serve-args as vLLM's parser does")
    parser.add_argument("--typical-input-tokens", type=int,
                        default=WORKLOAD_DEFAULTS["typical_input_tokens"],
                        help="prompt tokens of a typical request, sizes --max-num-seqs "
                        "(default: %(default)s, the benchmark's)")
    parser.add_argument("--typical-output-tokens", type=int,
                        default=WORKLOAD_DEFAULTS["typical_output_tokens"],
                        help="generated tokens of a typical request (default: %(default)s)")
    parser.add_argument("--cuda-context-gib", type=float, default=DEFAULTS["cuda_context_gib"],
                        help="per-GPU CUDA context + NCCL, outside vLLM's share (default: "
                        "%(default)s, an estimate)")
    parser.add_argument("--non-torch-gib", type=float, default=DEFAULTS["non_torch_gib"],
                        help="per-GPU non-torch memory that appears while vLLM profiles "
                        "(default: %(default)s, an estimate)")
    parser.add_argument("--cuda-graph-gib", type=float, default=DEFAULTS["cuda_graph_gib"],
                        help="per-GPU CUDA graph memory (default: %(default)s, from 1Cat's logs)")
    parser.add_argument("--health", metavar="FILE",
                        help="GPU health JSON (onecat's gpu_health facts) for topology advice")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def _load_health(path: str | None) -> Any:
    if path is None:
        return None
    try:
        return read_json(path)
    except CheckpointError as error:
        raise PlanInputError(f"--health {error}") from error


def _parse_env(items: list[str]) -> dict[str, str] | None:
    """--env NAME=VALUE items as a mapping; PlanInputError for an item without a name."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise PlanInputError(f"--env {item!r}: expected NAME=VALUE, e.g. "
                                 "VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1")
        env[name.strip()] = value
    return env or None


def _serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--serve-args and --serve-extra-arg as planner options (the serve role's own rule)."""
    try:
        given = json.loads(args.serve_args)
    except ValueError as error:
        raise PlanInputError(f"--serve-args is not JSON: {error}") from None
    if not isinstance(given, dict):
        raise PlanInputError("--serve-args must be a JSON object of flags, e.g. "
                             '\'{"max_num_seqs": 64}\'')
    return effective_options(given, args.serve_extra_arg)[0]


def run(args: argparse.Namespace) -> int:
    try:
        health = _load_health(args.health)
        options = {
            "health": health,
            "gpus": args.gpus,
            "gpu_memory_gib": args.gpu_memory_gib,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "max_model_len": args.max_model_len,
            "tensor_parallel_size": args.tensor_parallel_size,
            "kv_cache_dtype": args.kv_cache_dtype,
            "engine": args.engine,
            "engine_version": args.engine_version,
            "compute_capability": args.compute_capability,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "max_num_seqs": args.max_num_seqs,
            "typical_input_tokens": args.typical_input_tokens,
            "typical_output_tokens": args.typical_output_tokens,
            "cuda_context_gib": args.cuda_context_gib,
            "non_torch_gib": args.non_torch_gib,
            "cuda_graph_gib": args.cuda_graph_gib,
            "speculative_config": args.speculative_config,
            "engine_env": _parse_env(args.env),
            **_serve_overrides(args),
        }
        if args.model_dir.startswith("hf:"):
            plan = plan_remote(args.model_dir, plan_model, **options)
        else:
            plan = plan_model(args.model_dir, **options)
    except (*INVALID_INPUT, FetchError) as error:
        print(f"onecat plan: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan, indent=2))
    else:
        print(format_table(plan))
    return 0 if plan["ok"] else 1


def format_serve_args(args: dict[str, Any]) -> str:
    """Flags as a command line: True is a bare flag."""
    parts = []
    for flag, value in args.items():
        parts.append(flag if value is True else f"{flag} {value}")
    return " ".join(parts)


def _kib(value: int) -> str:
    return f"{value / 1024:g} KiB"


def _kv_budget(budget: int) -> str:
    if budget <= 0:
        return f"no room: short by {-budget / GIB:.2f} GiB per GPU"
    return f"{budget / GIB:.2f} GiB per GPU"


def _g(value: float) -> str:
    return f"{value / GIB:.2f}"


def _hybrid_rows(plan: dict[str, Any]) -> list[tuple[str, str]]:
    hybrid = plan.get("hybrid")
    if not hybrid:
        return []
    mib = 2**20
    rows = [
        ("state", f"{hybrid['state_bytes'] / mib:.2f} MiB per linear layer and sequence per GPU "
                  f"(conv {hybrid['conv_state_bytes'] / 1024:g} KiB + recurrent "
                  f"{hybrid['ssm_state_bytes'] / 1024:g} KiB), "
                  f"{hybrid['state_bytes_per_sequence'] / mib:.1f} MiB per sequence once; "
                  f"align mode holds {hybrid['state_blocks_per_sequence']} state blocks = "
                  f"{hybrid['state_bytes_held_per_sequence'] / mib:.1f} MiB per sequence"),
        ("page", f"{hybrid['page_bytes']:,} bytes = {hybrid['block_size']}-token attention "
                 f"blocks x {_kib(hybrid['attention_bytes_per_token'])}; groups of "
                 f"{hybrid['group_size']} layers: {hybrid['full_groups']} attention + "
                 f"{hybrid['linear_groups']} state; {hybrid['num_blocks']:,} blocks, "
                 f"{hybrid['blocks_per_request']} per full-length request, state slots "
                 f"{hybrid['state_slots']}"),
    ]
    spec = plan.get("speculation")
    if spec:
        drafter = (f"; drafter: {spec['drafter_attention_layers']} attention layer(s), "
                   f"{spec['drafter_weight_bytes_per_gpu'] / GIB:.2f} GiB weights per GPU "
                   f"({spec['drafter_weights']})" if spec["drafter_weights"] else "")
        rows.append(("speculate", f"{spec['method'] or '(method unset)'} "
                                  f"{spec['num_speculative_tokens']} tokens from "
                                  f"{spec['source']}{drafter}"))
    return rows


def format_table(plan: dict[str, Any]) -> str:
    inputs, memory, engine = plan["inputs"], plan["memory_per_gpu"], plan["engine"]
    tp, length = inputs["tensor_parallel_size"], inputs["max_model_len"]
    meta = plan["quant_metadata"]
    verdict = "FITS" if plan["fits"] else "DOES NOT FIT"
    if plan["fits"] and not plan["ok"]:
        verdict += ", but has problems (see below)"
    graphs = (f"CUDA graphs {_g(memory['cuda_graph_bytes'])} inside"
              if memory["cuda_graphs_in_budget"] else "")
    rows = [
        ("model", f"{plan['model_dir']} ({plan['architecture']}, {plan['model_type']})"),
        ("format", f"{plan['quant_format']} (metadata: {meta['source']}: {meta['claim']})"),
        ("engine", f"{engine['name']} {engine['version'] or '(any version)'}: "
                   f"{'compatible' if engine['compatible'] else 'NOT compatible'}"),
        ("card", f"{inputs['gpus']} x {memory['total_source']}, cc "
                 f"{inputs['compute_capability']}, TP{tp}"),
        ("requested", f"ceil({_g(memory['total_bytes'])} GiB x "
                      f"{float(inputs['gpu_memory_utilization']):.2f}) = "
                      f"{_g(memory['requested_bytes'])} GiB per GPU"),
        ("weights", f"{_g(plan['weight_bytes_per_gpu'])} GiB per GPU resident (linear "
                    f"{_g(memory['linear_bytes'])}, embeddings/lm_head "
                    f"{_g(memory['embeddings_bytes'])}, other {_g(memory['other_bytes'])}); "
                    f"checkpoint {_g(plan['checkpoint_bytes_per_gpu'])} per GPU, "
                    f"{_g(plan['checkpoint_bytes'])} total"),
        ("resident", plan["resident_rule"]),
        ("buffers", f"{_g(memory['rotary_cache_bytes'])} GiB rotary cos_sin_cache"),
        ("activation", f"{_g(memory['activation_bytes'])} GiB peak (forward of "
                       f"{inputs['max_num_batched_tokens']} tokens "
                       f"{_g(memory['activation_forward_bytes'])}, sampler over "
                       f"{inputs['max_num_seqs']} sequences "
                       f"{_g(memory['activation_sampler_bytes'])}"
                       + (f", + TurboMind GEMM workspace "
                          f"{memory['activation_workspace_bytes'] / 2**20:.0f} MiB"
                          if memory["activation_workspace_bytes"] else "")
                       + "; estimated)"),
        ("non-torch", f"{_g(memory['non_torch_bytes'])} GiB"
                      + (f"; {graphs}" if graphs else "")),
        ("KV cache", f"{_kib(plan['kv_cache_bytes_per_token'])}/token "
                     f"({_kib(plan['kv_cache_bytes_per_token_per_gpu'])} per GPU, "
                     f"{inputs['kv_cache_dtype']}), {_kv_budget(memory['kv_budget_bytes'])}"),
        *_hybrid_rows(plan),
        ("capacity", f"{plan['max_kv_tokens']:,} tokens = "
                     f"{plan['max_concurrency_at_max_model_len']} sequence(s) of {length}"),
        ("max-seqs", plan["max_num_seqs_reason"]),
        ("headroom", f"{_g(memory['headroom_bytes'])} GiB outside the share for "
                     f"{_g(memory['outside_bytes'])} GiB (CUDA context + NCCL "
                     f"{_g(memory['cuda_context_bytes'])}"
                     + ("" if memory["cuda_graphs_in_budget"]
                        else f", CUDA graphs {_g(memory['cuda_graph_bytes'])}")
                     + f"): utilization at most {memory['max_utilization']:.2f}"),
        ("verdict", verdict),
        ("serve args", format_serve_args(plan["serve_args"])),
    ]
    if plan["serve_env"]:
        rows.append(("serve env", " ".join(f"{k}={v}" for k, v in plan["serve_env"].items())))
    lines = [f"{label:<11} {value}" for label, value in rows]
    for title, key in (("why", "serve_notes"), ("problems", "problems"),
                       ("warnings", "warnings"), ("suggestions", "suggestions")):
        if plan[key]:
            lines.append(f"{title}:")
            lines.extend(f"  - {item}" for item in plan[key])
    return "\n".join(lines)
