"""Plan a model on N GPUs before starting a server: weights, KV cache, fit, advice, flags.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.plan``
(the serve role refuses to start a server that this plan says cannot fit).

Memory model, per GPU (vLLM reserves ``gpu_memory_utilization`` of each card up front):

    usable      = gpu_memory x gpu_memory_utilization
    kv_budget   = usable - weights_per_gpu - overhead
    max_tokens  = kv_budget // kv_bytes_per_token_per_gpu   (whole 16-token blocks)
    concurrency = max_tokens // max_model_len                (full-length sequences at once)

Weights are the exact bytes from the safetensors headers. Under tensor parallel (TP)
vLLM shards most tensors; the rule used here (see ``tensor_bytes_per_gpu``):

- column-parallel linears (q/k/v, gate/up, ...): weight, scales and bias / TP, except
  k/v projections when TP > kv heads: each rank keeps whole kv heads (/ kv heads);
- row-parallel linears (o_proj, down_proj, ...): weight and scales / TP, bias replicated;
- embed_tokens and lm_head (kept 16-bit by every NVFP4 recipe): split by vocab rows,
  the vocab first padded to a multiple of 64 as vLLM does;
- everything else (norms, per-tensor global/input scales, routers, vision towers) is
  replicated: counted whole on every GPU.

KV cache per token = 2 (K and V) x attention layers x kv heads x head dim x bytes per
element (2 for float16, 1 for fp8_e5m2), split across TP ranks by kv heads (a rank
holds at least one head). ``head_dim`` is the config's when it sets one, else
hidden_size / num_attention_heads. The overhead (default 1.5 GiB per GPU) stands for
the CUDA context, NCCL buffers, CUDA graphs and peak activations of a prefill chunk.
"""

from __future__ import annotations

import math
from typing import Any

from .checkpoint import (
    COLUMN_PARALLEL,
    LINEAR_LEAVES,
    ROW_PARALLEL,
    VOCAB_PARALLEL,
    inspect_model,
)
from .engines import (
    DEFAULT_COMPUTE_CAPABILITY,
    DEFAULT_ENGINE,
    DEFAULT_ENGINE_VERSION,
    ENGINES,
    check_engine,
    parse_capability,
    parse_version,
)
from .safetensors import CheckpointError, Tensor, numel

GIB = 1024**3
KV_CACHE_DTYPE_BYTES = {"auto": 2, "fp8_e5m2": 1}
BLOCK_TOKENS = 16  # vLLM's default KV-cache block size
VOCAB_PADDING = 64  # vLLM pads embedding/lm_head rows to a multiple of this
MAX_SUGGESTED_UTILIZATION = 0.95  # above this the CUDA allocator has no slack left
FEW_SEQUENCES = 4  # fewer full-length sequences than this deserves advice even when it fits
MAX_NUM_SEQS_CAP = 64  # V100-sized batch: more only grows activation/graph memory
FLASH_ATTN_V100_HEAD_DIMS = (64, 128, 256)
NVFP4_BYTES_PER_PARAM = 0.5 + 1 / 16  # packed FP4 + one FP8 scale per 16 weights

DEFAULTS: dict[str, Any] = {
    "gpus": 2,
    "gpu_memory_gib": 16.0,
    "gpu_memory_utilization": 0.9,
    "max_model_len": 8192,
    "tensor_parallel_size": 2,
    "kv_cache_dtype": "auto",
    "engine": DEFAULT_ENGINE,
    "engine_version": None,  # DEFAULT_ENGINE_VERSION for 1cat-vllm; upstream rules ignore it
    "compute_capability": DEFAULT_COMPUTE_CAPABILITY,
    "overhead_gib": 1.5,
}


class PlanInputError(ValueError):
    """An option is out of range (invalid input, like an unreadable checkpoint)."""


INVALID_INPUT = (CheckpointError, PlanInputError)


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def tensor_bytes_per_gpu(name: str, tensor: Tensor, tp: int, kv_heads: int) -> int:
    """Bytes of one checkpoint tensor that each GPU holds under tensor parallel `tp`."""
    if tp == 1 or numel(tensor.shape) <= 1:
        return tensor.nbytes
    module, _, param = name.rpartition(".")
    leaf = module.rpartition(".")[2]
    if leaf in VOCAB_PARALLEL and tensor.shape:
        rows = tensor.shape[0]
        padded = -(-rows // VOCAB_PADDING) * VOCAB_PADDING
        per_rank_rows = -(-padded // tp)
        if tensor.nbytes % rows == 0:
            return tensor.nbytes // rows * min(per_rank_rows, rows)
        return -(-tensor.nbytes // tp)
    if leaf in COLUMN_PARALLEL:
        if param == "g_idx":
            return tensor.nbytes
        divisor = min(tp, kv_heads) if leaf in ("k_proj", "v_proj") else tp
        return -(-tensor.nbytes // divisor)
    if leaf in ROW_PARALLEL:
        return tensor.nbytes if param == "bias" else -(-tensor.nbytes // tp)
    return tensor.nbytes


def weight_bytes(tensors: dict[str, Tensor], tp: int, kv_heads: int) -> dict[str, int]:
    """Total and per-GPU weight bytes; per GPU also split into linear layers, embeddings/lm_head
    and the rest (norms and the like)."""
    result = {"total": 0, "per_gpu": 0, "linear_per_gpu": 0, "linear_16bit_per_gpu": 0,
              "embeddings_per_gpu": 0, "other_per_gpu": 0}
    for name, tensor in tensors.items():
        per_gpu = tensor_bytes_per_gpu(name, tensor, tp, kv_heads)
        result["total"] += tensor.nbytes
        result["per_gpu"] += per_gpu
        leaf = name.rpartition(".")[0].rpartition(".")[2]
        if leaf in VOCAB_PARALLEL:
            result["embeddings_per_gpu"] += per_gpu
        elif leaf in LINEAR_LEAVES:
            result["linear_per_gpu"] += per_gpu
            if tensor.dtype in ("F16", "BF16") and name.endswith(".weight"):
                result["linear_16bit_per_gpu"] += per_gpu
        else:
            result["other_per_gpu"] += per_gpu
    return result


def kv_bytes_per_token(dims: dict[str, Any], element_bytes: int, tp: int) -> tuple[int, int]:
    """(whole model, per GPU) KV-cache bytes for one token."""
    per_head = 2 * dims["kv_layers"] * dims["head_dim"] * element_bytes
    kv_heads = dims["num_key_value_heads"]
    heads_per_rank = max(1, kv_heads // tp)
    return per_head * kv_heads, per_head * heads_per_rank


def kv_tokens(budget: float, per_token_gpu: int) -> int:
    """Tokens the KV cache holds in whole blocks; 0 when the budget is gone."""
    if budget <= 0 or per_token_gpu <= 0:
        return 0
    return int(budget // (per_token_gpu * BLOCK_TOKENS)) * BLOCK_TOKENS


def round_down(value: int, step: int = 256) -> int:
    return value // step * step


def health_topology(health: Any) -> dict[str, Any]:
    """What the GPU-health facts say about TP communication (accepts the wrapper or bare dict)."""
    if health is None:
        return {"known": False, "pcie_only": False, "cross_socket": False,
                "disable_custom_all_reduce": False, "nccl_p2p_disable": False}
    if not isinstance(health, dict):
        raise PlanInputError("health: expected the gpu_health JSON object")
    facts = health.get("gpu_health", health)
    pairs = facts.get("pairs") if isinstance(facts, dict) else None
    if not isinstance(pairs, list) or not all(isinstance(pair, dict) for pair in pairs):
        raise PlanInputError("health: expected {\"gpu_health\": {\"pairs\": [{\"gpus\": [0, 1], "
                             "\"topology\": \"PHB\", ...}]}} or the bare gpu_health object")
    recommendations = facts.get("recommendations")
    recommendations = recommendations if isinstance(recommendations, dict) else {}
    topologies = [str(pair.get("topology") or "").upper() for pair in pairs]
    pcie_only = any(topo and not topo.startswith("NV") for topo in topologies)
    cross_socket = "SYS" in topologies
    return {
        "known": bool(pairs),
        "pcie_only": pcie_only,
        "cross_socket": cross_socket,
        "disable_custom_all_reduce": pcie_only
        or bool(recommendations.get("disable_custom_all_reduce")),
        "nccl_p2p_disable": cross_socket or bool(recommendations.get("nccl_p2p_disable")),
    }


# Upper bounds of the numeric options: no GPU comes near them, and beyond them the byte
# arithmetic leaves float range (a plan of inf or NaN bytes is a lie, not a plan).
MAX_GPU_MEMORY_GIB = 4096.0
MAX_MODEL_LEN = 1 << 24


def _shown(value: Any) -> str:
    """A user's value in a one-line message: as typed when printable, else quoted."""
    return value if isinstance(value, str) and value.isprintable() and value else repr(value)


def _number(value: Any, flag: str, integer: bool) -> float:
    """`value` as a finite number (an integer when `integer`); PlanInputError otherwise."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool):
        raise PlanInputError(f"{flag} {value!r}: not {kind}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise PlanInputError(f"{flag} {value!r}: not {kind}") from None
    if not math.isfinite(number) or (integer and not number.is_integer()):
        raise PlanInputError(f"{flag} {value!r}: not {kind}" if math.isfinite(number) else
                             f"{flag} {value!r}: must be a finite number")
    return number


def _validate(opts: dict[str, Any]) -> None:
    """Every option checked and normalised in place (ints as int, floats as float)."""
    for name, flag, integer in (("gpus", "--gpus", True),
                                ("tensor_parallel_size", "--tensor-parallel-size", True),
                                ("max_model_len", "--max-model-len", True),
                                ("gpu_memory_gib", "--gpu-memory-gib", False),
                                ("gpu_memory_utilization", "--gpu-memory-utilization", False),
                                ("overhead_gib", "--overhead-gib", False)):
        number = _number(opts[name], flag, integer)
        opts[name] = int(number) if integer else number
    if opts["gpus"] < 1:
        raise PlanInputError(f"--gpus {opts['gpus']}: needs at least 1 GPU")
    tp = opts["tensor_parallel_size"]
    if tp < 1 or tp > opts["gpus"]:
        raise PlanInputError(f"--tensor-parallel-size {tp}: must be between 1 and --gpus "
                             f"{opts['gpus']}")
    if not 0 < opts["gpu_memory_gib"] <= MAX_GPU_MEMORY_GIB:
        raise PlanInputError(f"--gpu-memory-gib {opts['gpu_memory_gib']:g}: must be positive "
                             f"and at most {MAX_GPU_MEMORY_GIB:g}, e.g. 16 for a V100-16GB")
    if not 0 < opts["gpu_memory_utilization"] <= 1:
        raise PlanInputError(f"--gpu-memory-utilization {opts['gpu_memory_utilization']:g}: "
                             "must be in (0, 1], e.g. 0.9")
    if not 1 <= opts["max_model_len"] <= MAX_MODEL_LEN:
        raise PlanInputError(f"--max-model-len {opts['max_model_len']}: must be between 1 and "
                             f"{MAX_MODEL_LEN}")
    if opts["overhead_gib"] < 0:
        raise PlanInputError(f"--overhead-gib {opts['overhead_gib']:g}: must not be negative")
    if opts["overhead_gib"] > MAX_GPU_MEMORY_GIB:
        raise PlanInputError(f"--overhead-gib {opts['overhead_gib']:g}: must be at most "
                             f"{MAX_GPU_MEMORY_GIB:g}")
    if not isinstance(opts["kv_cache_dtype"], str) or \
            opts["kv_cache_dtype"] not in KV_CACHE_DTYPE_BYTES:
        raise PlanInputError(f"--kv-cache-dtype {_shown(opts['kv_cache_dtype'])}: use one of "
                             f"{', '.join(KV_CACHE_DTYPE_BYTES)}")
    if not isinstance(opts["engine"], str) or opts["engine"] not in ENGINES:
        raise PlanInputError(f"--engine {_shown(opts['engine'])}: use one of "
                             f"{', '.join(ENGINES)}")
    try:
        if opts["engine_version"]:
            parse_version(opts["engine_version"])
        parse_capability(opts["compute_capability"])
    except ValueError as error:
        raise PlanInputError(str(error)) from error


def plan_model(model_dir: str, health: Any = None, **options: Any) -> dict[str, Any]:
    """The whole plan as a JSON-ready dict; raises one of INVALID_INPUT on bad input."""
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise PlanInputError(f"unknown planner option(s): {', '.join(sorted(unknown))}")
    opts = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    if not opts["engine_version"]:
        opts["engine_version"] = DEFAULT_ENGINE_VERSION if opts["engine"] == DEFAULT_ENGINE else ""
    _validate(opts)
    topology = health_topology(health)
    info = inspect_model(model_dir)
    dims = info["dims"]
    tp = int(opts["tensor_parallel_size"])
    length = int(opts["max_model_len"])
    util = float(opts["gpu_memory_utilization"])
    gpu_bytes = float(opts["gpu_memory_gib"]) * GIB
    overhead = float(opts["overhead_gib"]) * GIB
    capability = parse_capability(opts["compute_capability"])
    problems = list(info["problems"])
    warnings = list(info["warnings"])

    engine, engine_warnings = check_engine(opts["engine"], str(opts["engine_version"]),
                                           info["quant_format"], capability)
    warnings.extend(engine_warnings)
    if not engine["compatible"]:
        problems.append(f"engine: {engine['reason']}")
    problems.extend(_shape_problems(dims, tp, length))
    kv_quantized = info["metadata"]["kv_cache_quantized"]
    if opts["kv_cache_dtype"] == "fp8_e5m2" and kv_quantized:
        problems.append("--kv-cache-dtype fp8_e5m2 is rejected for checkpoints that carry a "
                        "kv_cache_scheme (1Cat-vLLM issue #489): use --kv-cache-dtype auto")

    weights = weight_bytes(info["tensors"], tp, dims["num_key_value_heads"])
    element = KV_CACHE_DTYPE_BYTES[opts["kv_cache_dtype"]]
    kv_total, kv_gpu = kv_bytes_per_token(dims, element, tp)
    usable = gpu_bytes * util
    budget = usable - weights["per_gpu"] - overhead
    max_tokens = kv_tokens(budget, kv_gpu)
    concurrency = max_tokens // length
    fits = concurrency >= 1
    fit_reason = _fit_reason(fits, budget, max_tokens, concurrency, length, weights["per_gpu"],
                             overhead, usable, opts)
    ctx = {"opts": opts, "dims": dims, "info": info, "tp": tp, "length": length, "util": util,
           "gpu_bytes": gpu_bytes, "overhead": overhead, "weights": weights, "kv_gpu": kv_gpu,
           "element": element, "budget": budget, "max_tokens": max_tokens,
           "concurrency": concurrency, "fits": fits, "kv_quantized": kv_quantized}
    suggestions, nothing_fits = _suggestions(ctx)
    args, env = _serve_args(ctx, topology, capability, warnings)
    return {
        "model_dir": model_dir,
        "model_type": info["model_type"],
        "architecture": info["architecture"],
        "quant_format": info["quant_format"],
        "quant_metadata": {k: info["metadata"][k] for k in ("format", "source", "claim")},
        "tensor_format": info["tensor_format"],
        "problems": problems,
        "warnings": warnings,
        "engine": engine,
        "weight_bytes": weights["total"],
        "weight_bytes_per_gpu": weights["per_gpu"],
        "kv_cache_bytes_per_token": kv_total,
        "kv_cache_bytes_per_token_per_gpu": kv_gpu,
        "kv_cache_bytes_per_gpu": max(0, int(budget)),
        "max_kv_tokens": max_tokens,
        "max_concurrency_at_max_model_len": concurrency,
        "fits": fits,
        "fit_reason": fit_reason,
        "nothing_fits": nothing_fits,
        "ok": fits and not problems,
        "suggestions": suggestions,
        "serve_args": args,
        "serve_env": env,
        "inputs": {**{k: opts[k] for k in DEFAULTS}, "health": topology},
        "dims": dims,
        "memory_per_gpu": {
            "total_bytes": int(gpu_bytes),
            "usable_bytes": int(usable),
            "weights_bytes": weights["per_gpu"],
            "linear_bytes": weights["linear_per_gpu"],
            "embeddings_bytes": weights["embeddings_per_gpu"],
            "other_bytes": weights["other_per_gpu"],
            "overhead_bytes": int(overhead),
            "kv_budget_bytes": int(budget),
        },
        "generation_defaults": info["generation_defaults"],
    }


def _shape_problems(dims: dict[str, Any], tp: int, length: int) -> list[str]:
    problems = []
    heads, kv_heads = dims["num_attention_heads"], dims["num_key_value_heads"]
    if heads % tp:
        problems.append(f"num_attention_heads {heads} is not divisible by --tensor-parallel-size "
                        f"{tp}: vLLM refuses this split; use a TP size that divides {heads}")
    elif (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        problems.append(f"num_key_value_heads {kv_heads} and --tensor-parallel-size {tp} do not "
                        "divide each other: vLLM refuses this split")
    limit = dims["max_position_embeddings"]
    if isinstance(limit, int) and length > limit:
        problems.append(f"--max-model-len {length} exceeds the model's max_position_embeddings "
                        f"{limit}: vLLM refuses it; use --max-model-len {limit} or less")
    return problems


def _fit_reason(fits: bool, budget: float, max_tokens: int, concurrency: int, length: int,
                weights: int, overhead: float, usable: float, opts: dict[str, Any]) -> str:
    usable_text = (f"{gib(usable)} usable ({float(opts['gpu_memory_gib']):g} GiB x "
                   f"{float(opts['gpu_memory_utilization']):.2f})")
    if budget <= 0:
        return (f"does not fit: weights need {gib(weights)} per GPU plus {gib(overhead)} "
                f"overhead, more than the {usable_text}")
    if not fits:
        return (f"does not fit: the KV cache left per GPU ({gib(budget)}) holds {max_tokens} "
                f"tokens, less than one {length}-token sequence")
    return (f"fits: {gib(weights)} weights + {gib(overhead)} overhead per GPU of {usable_text} "
            f"leave {gib(budget)} of KV cache = {max_tokens} tokens = {concurrency} "
            f"sequence(s) of {length} tokens at once")


def _suggestions(ctx: dict[str, Any]) -> tuple[list[str], bool]:
    """Computed changes that would make the model fit (or fit more); and whether none can."""
    tips: list[str] = []
    length, kv_gpu = ctx["length"], ctx["kv_gpu"]
    weights, overhead, gpu_bytes = ctx["weights"]["per_gpu"], ctx["overhead"], ctx["gpu_bytes"]
    concurrency, max_tokens, budget = ctx["concurrency"], ctx["max_tokens"], ctx["budget"]
    if ctx["fits"] and concurrency >= FEW_SEQUENCES:
        return tips, False
    fp8_allowed = ctx["element"] == 2 and not ctx["kv_quantized"]
    cheapest_kv = kv_gpu // 2 if fp8_allowed else kv_gpu
    best_budget = gpu_bytes * MAX_SUGGESTED_UTILIZATION - weights - overhead
    # "Nothing fits": even at the highest sensible utilization with the cheapest KV cache,
    # not one sequence of min(max-model-len, 2048) tokens fits.
    nothing_fits = kv_tokens(best_budget, cheapest_kv) < min(length, 2048)
    if nothing_fits:
        tips.extend(_nothing_fits_tips(ctx))
        return tips, True
    if not ctx["fits"]:
        one = round_down(max_tokens)
        if one >= 512:
            tips.append(f"--max-model-len {one}: room for 1 sequence at that length")
        four = round_down(max_tokens // 4)
        if four >= 512:
            tips.append(f"--max-model-len {four}: room for 4 sequences at that length")
        needed = (weights + overhead + kv_gpu * length) / gpu_bytes
        needed = math.ceil(needed * 100) / 100
        if ctx["util"] < needed <= MAX_SUGGESTED_UTILIZATION:
            tips.append(f"--gpu-memory-utilization {needed:.2f}: room for 1 sequence of "
                        f"{length} tokens (only if nothing else uses the GPUs)")
    else:
        half = length // 2
        tips.append(f"only {concurrency} full-length sequence(s) fit: --max-model-len {half} "
                    f"gives room for {max_tokens // half}")
    if fp8_allowed:
        doubled = kv_tokens(budget, kv_gpu // 2)
        tips.append(f"--kv-cache-dtype fp8_e5m2 halves the KV cache per token: "
                    f"{doubled // length} sequence(s) of {length} tokens ({doubled} tokens)")
    elif ctx["kv_quantized"]:
        tips.append("--kv-cache-dtype fp8_e5m2 is not an option: the checkpoint carries a "
                    "kv_cache_scheme (1Cat-vLLM issue #489)")
    return tips, False


def _nothing_fits_tips(ctx: dict[str, Any]) -> list[str]:
    opts, length, tp = ctx["opts"], ctx["length"], ctx["tp"]
    weights, overhead, util = ctx["weights"]["per_gpu"], ctx["overhead"], ctx["util"]
    need = (weights + overhead + ctx["kv_gpu"] * length) / util
    tips = [
        f"nothing fits on {opts['gpus']}x{float(opts['gpu_memory_gib']):g} GiB: the weights "
        f"alone take {gib(weights)} per GPU (+{gib(overhead)} overhead) and no context length, "
        f"KV dtype or utilization changes that: not recommended on this hardware (the seed "
        f"does not recommend 34B+ on 2x16 GB). It needs about "
        f"{math.ceil(need / GIB * 10) / 10:.1f} GiB per GPU at TP{tp} (e.g. 32 GB V100s) for "
        f"one {length}-token sequence",
    ]
    kv_heads = ctx["dims"]["num_key_value_heads"]
    for wider in (4, 8):
        if wider <= tp or ctx["dims"]["num_attention_heads"] % wider:
            continue
        wide = weight_bytes(ctx["info"]["tensors"], wider, kv_heads)["per_gpu"]
        wide_kv = kv_bytes_per_token(ctx["dims"], ctx["element"], wider)[1]
        tokens = kv_tokens(ctx["gpu_bytes"] * util - wide - overhead, wide_kv)
        if tokens >= length:
            tips.append(f"--tensor-parallel-size {wider} over {wider} such GPUs: {gib(wide)} "
                        f"weights per GPU, room for {tokens // length} sequence(s) of {length}")
            break
    quant = ctx["info"]["quant_format"]
    if quant in ("fp16", "bf16"):
        linear16 = ctx["weights"]["linear_16bit_per_gpu"]
        estimate = weights - linear16 + linear16 / 2 * NVFP4_BYTES_PER_PARAM
        tokens = kv_tokens(ctx["gpu_bytes"] * util - estimate - overhead, ctx["kv_gpu"])
        if tokens >= length:
            tips.append(f"an NVFP4 checkpoint of this model would take about {gib(estimate)} per "
                        f"GPU and leave room for {tokens // length} sequence(s) of {length}")
    return tips


def _serve_args(ctx: dict[str, Any], topology: dict[str, Any], capability: int,
                warnings: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Engine flags (flag -> value; True means a bare flag) and environment for this plan."""
    opts, dims = ctx["opts"], ctx["dims"]
    args: dict[str, Any] = {
        "--dtype": "half",
        "--tensor-parallel-size": ctx["tp"],
        "--max-model-len": ctx["length"],
        "--gpu-memory-utilization": ctx["util"],
        # Most requests are shorter than max-model-len: allow ~4x the full-length capacity
        # (vLLM preempts when the cache runs out), capped for V100-sized batches.
        "--max-num-seqs": max(1, min(MAX_NUM_SEQS_CAP, ctx["concurrency"] * 4)),
    }
    if opts["engine"] == "1cat-vllm":
        if dims["head_dim"] in FLASH_ATTN_V100_HEAD_DIMS:
            args["--attention-backend"] = "FLASH_ATTN_V100"
        else:
            args["--attention-backend"] = "TRITON_ATTN"
            warnings.append(f"head_dim {dims['head_dim']} is not one FLASH_ATTN_V100 supports "
                            "(64/128/256): TRITON_ATTN chosen instead")
    elif capability < 80:
        args["--attention-backend"] = "TRITON_ATTN"
    if opts["kv_cache_dtype"] != "auto":
        args["--kv-cache-dtype"] = opts["kv_cache_dtype"]
    env: dict[str, str] = {}
    if ctx["tp"] > 1 and topology["disable_custom_all_reduce"]:
        # Custom all-reduce deadlocks on PCIe-only V100 pairs (1Cat-vLLM #652, #430).
        args["--disable-custom-all-reduce"] = True
    if ctx["tp"] > 1 and topology["nccl_p2p_disable"]:
        env["NCCL_P2P_DISABLE"] = "1"
    return args, env


def misfit_message(plan: dict[str, Any], host: str) -> str:
    """One human paragraph: why this host cannot serve this model, and what would help."""
    reasons = list(plan["problems"])
    if not plan["fits"]:
        reasons.append(plan["fit_reason"])
    text = (f"{host}: {plan['model_dir']} ({plan['quant_format']}) cannot be served with "
            f"--tensor-parallel-size {plan['inputs']['tensor_parallel_size']} --max-model-len "
            f"{plan['inputs']['max_model_len']}: " + "; ".join(reasons))
    if plan["suggestions"]:
        text += ". Suggestions: " + "; ".join(plan["suggestions"])
    return text
