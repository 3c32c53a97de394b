"""`onecat plan MODEL_DIR`: can this checkpoint serve on these GPUs, and with which flags?

Exit status: 0 the plan is servable (it fits and nothing is wrong), 1 it does not fit or
has problems (the plan is still printed), 2 invalid input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from onecat.model.engines import DEFAULT_ENGINE, DEFAULT_ENGINE_VERSION, ENGINES
from onecat.model.plan import (
    DEFAULTS,
    GIB,
    INVALID_INPUT,
    KV_CACHE_DTYPE_BYTES,
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
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="Hugging Face model directory")
    parser.add_argument("--gpus", type=int, default=DEFAULTS["gpus"],
                        help="GPUs on the node (default: %(default)s)")
    parser.add_argument("--gpu-memory-gib", type=float, default=DEFAULTS["gpu_memory_gib"],
                        help="memory of one GPU in GiB (default: %(default)s)")
    parser.add_argument("--gpu-memory-utilization", type=float,
                        default=DEFAULTS["gpu_memory_utilization"],
                        help="share of each GPU vLLM reserves (default: %(default)s)")
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
    parser.add_argument("--overhead-gib", type=float, default=DEFAULTS["overhead_gib"],
                        help="per-GPU CUDA context, graphs and activations (default: "
                        "%(default)s)")
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


def run(args: argparse.Namespace) -> int:
    try:
        health = _load_health(args.health)
        plan = plan_model(
            args.model_dir,
            health=health,
            gpus=args.gpus,
            gpu_memory_gib=args.gpu_memory_gib,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            tensor_parallel_size=args.tensor_parallel_size,
            kv_cache_dtype=args.kv_cache_dtype,
            engine=args.engine,
            engine_version=args.engine_version,
            compute_capability=args.compute_capability,
            overhead_gib=args.overhead_gib,
        )
    except INVALID_INPUT as error:
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


def format_table(plan: dict[str, Any]) -> str:
    inputs, memory, engine = plan["inputs"], plan["memory_per_gpu"], plan["engine"]
    tp, length = inputs["tensor_parallel_size"], inputs["max_model_len"]
    meta = plan["quant_metadata"]
    verdict = "FITS" if plan["fits"] else "DOES NOT FIT"
    if plan["fits"] and not plan["ok"]:
        verdict += ", but has problems (see below)"
    rows = [
        ("model", f"{plan['model_dir']} ({plan['architecture']}, {plan['model_type']})"),
        ("format", f"{plan['quant_format']} (metadata: {meta['source']}: {meta['claim']})"),
        ("engine", f"{engine['name']} {engine['version'] or '(any version)'}: "
                   f"{'compatible' if engine['compatible'] else 'NOT compatible'}"),
        ("hardware", f"{inputs['gpus']} x {float(inputs['gpu_memory_gib']):g} GiB, cc "
                     f"{inputs['compute_capability']}, TP{tp}, utilization "
                     f"{float(inputs['gpu_memory_utilization']):.2f} = "
                     f"{memory['usable_bytes'] / GIB:.2f} GiB usable per GPU"),
        ("weights", f"{plan['weight_bytes'] / GIB:.2f} GiB total, "
                    f"{plan['weight_bytes_per_gpu'] / GIB:.2f} GiB per GPU (linear "
                    f"{memory['linear_bytes'] / GIB:.2f}, embeddings/lm_head "
                    f"{memory['embeddings_bytes'] / GIB:.2f}, other "
                    f"{memory['other_bytes'] / GIB:.2f})"),
        ("overhead", f"{memory['overhead_bytes'] / GIB:.2f} GiB per GPU"),
        ("KV cache", f"{_kib(plan['kv_cache_bytes_per_token'])}/token "
                     f"({_kib(plan['kv_cache_bytes_per_token_per_gpu'])} per GPU, "
                     f"{inputs['kv_cache_dtype']}), {_kv_budget(memory['kv_budget_bytes'])}"),
        ("capacity", f"{plan['max_kv_tokens']:,} tokens = "
                     f"{plan['max_concurrency_at_max_model_len']} sequence(s) of {length}"),
        ("verdict", verdict),
        ("serve args", format_serve_args(plan["serve_args"])),
    ]
    if plan["serve_env"]:
        rows.append(("serve env", " ".join(f"{k}={v}" for k, v in plan["serve_env"].items())))
    lines = [f"{label:<11} {value}" for label, value in rows]
    for title in ("problems", "warnings", "suggestions"):
        if plan[title]:
            lines.append(f"{title}:")
            lines.extend(f"  - {item}" for item in plan[title])
    return "\n".join(lines)
