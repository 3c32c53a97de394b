"""Plan a model on N GPUs before starting a server: weights, KV cache, fit, advice, flags.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.plan``
(the serve role refuses to start a server that this plan says cannot fit).

Memory model, per GPU, term by term as vLLM's V1 worker computes it (line numbers from
1CatAI/1Cat-vLLM at ae13773a, whose worker is upstream vLLM's; see docs/plan.md):

    total       = the card's memory: NVML memory_total_mib from the health facts (a
                  "16 GB" V100 is 16160 MiB), the nominal --gpu-memory-gib without them
    requested   = ceil(total x gpu_memory_utilization)        v1/worker/utils.py:440-442
    kv_budget   = requested - weights - activation_peak - non_torch_increase
                  [- cuda_graphs when the engine estimates them inside the budget]
                                                              v1/worker/gpu_worker.py:425-460
    max_tokens  = kv_budget // kv_bytes_per_token_per_gpu    (whole 16-token blocks)
    concurrency = max_tokens // max_model_len                 (full-length sequences at once)

and, separately, what must fit OUTSIDE the requested share: the CUDA context and NCCL
(already up when vLLM takes its init snapshot, gpu_worker.py:288-308; utils.py:444 refuses to
start when free memory then is below `requested`) plus the CUDA graphs when they are captured
after the budget (1Cat auto-sets VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 for FLASH_ATTN_V100,
config/vllm.py:1451-1456). ``headroom = total - requested`` must hold them.

- weights: the bytes the engine keeps resident, from the safetensors headers and the
  engine's rule (engines.resident_rule: 1Cat's TurboMind NVFP4 path keeps FP16 block scales,
  0.625 bytes/parameter); checkpoint bytes are reported next to them.
- activation_peak: torch's allocated peak during the profile run, one forward of
  --max-num-batched-tokens tokens (default 2048 on cards under 70 GiB, engine/arg_utils.py:
  2546-2554) and a sampler pass over min(--max-num-seqs, tokens) rows of full-vocab logits
  (v1/worker/gpu_model_runner.py:10912-10981, 10717-10760): see ``activation_peak``.
- non_torch_increase: memory outside torch's allocator that appears during profiling
  (cuBLAS and attention workspaces; utils/mem_utils.py:268).

Weights under tensor parallel (TP) follow vLLM's sharding (see ``tensor_bytes_per_gpu``):

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
hidden_size / num_attention_heads. Hybrid models with recurrent (linear-attention, Mamba)
layers are refused: their per-request state lives outside the paged KV cache.
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
    resident_rule,
)
from .safetensors import CheckpointError, Tensor, numel

GIB = 1024**3
MIB = 1024**2
KV_CACHE_DTYPE_BYTES = {"auto": 2, "fp8_e5m2": 1}
BLOCK_TOKENS = 16  # vLLM's default KV-cache block size
VOCAB_PADDING = 64  # vLLM pads embedding/lm_head rows to a multiple of this
FEW_SEQUENCES = 4  # fewer full-length sequences than this deserves advice even when it fits
MAX_NUM_SEQS_CAP = 64  # V100-sized batch: more only grows activation/graph memory
FLASH_ATTN_V100_HEAD_DIMS = (64, 128, 256)
NVFP4_RESIDENT_BYTES_PER_PARAM = 0.5 + 2 / 16  # 1Cat TurboMind: packed FP4 + FP16 scale per 16

# vLLM's --max-num-batched-tokens default for `vllm serve` on a card under 70 GiB (chunked
# prefill caps every step at it): 1Cat-vLLM vllm/engine/arg_utils.py:2546-2554.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# Activation peak of one forward pass, in float16 elements per token: hidden states, the
# residual, the normed copy and a layer output (4 x hidden) plus the MLP's gate_up output
# (2 x intermediate / TP), its activation (1 x) and one allocator spare (1 x); the attention
# q/k/v output (3 x its width / TP) when wider. UNCONFIRMED coefficients: calibrated against
# vLLM's logged "torch peak memory increase", not read from code.
ACTIVATION_HIDDEN_COPIES = 4
ACTIVATION_INTERMEDIATE_COPIES = 4
# The profile's sampler pass (_dummy_sampler_run with top-k/top-p): per logit float16 logits
# (2) + float32 logits (4) + sorted values (4) + int64 sort indices (8) + probabilities (4).
# UNCONFIRMED: the sum of the tensors the sampler allocates, not a measured peak.
SAMPLER_BYTES_PER_LOGIT = 22
# Memory outside torch's allocator. UNCONFIRMED estimates (no source gives V100 figures):
# CUDA context + cuBLAS handles + NCCL communicators for TP2, present at vLLM's init snapshot;
CUDA_CONTEXT_NCCL_GIB = 0.6
# workspaces created during the profile run (1Cat's Flash-V100 shared workspace is 85 MiB,
# docs/design/sm70_fp8_long_prefill_exact_dense.md:92, plus cuBLAS workspaces);
NON_TORCH_INCREASE_GIB = 0.15
# CUDA graphs: 1Cat's logs show 0.18-0.26 GiB per rank for FLASH_ATTN_V100 decode graphs
# (docs/design/sm70_v100_migration_control.md:14048, sm70_fp8_long_prefill_exact_dense.md:94).
CUDA_GRAPH_GIB = 0.3

DEFAULTS: dict[str, Any] = {
    "gpus": 2,
    "gpu_memory_gib": 16.0,  # nominal: used only when the health facts give no NVML size
    "gpu_memory_utilization": 0.9,
    "max_model_len": 8192,
    "tensor_parallel_size": 2,
    "kv_cache_dtype": "auto",
    "engine": DEFAULT_ENGINE,
    "engine_version": None,  # DEFAULT_ENGINE_VERSION for 1cat-vllm; upstream rules ignore it
    "compute_capability": DEFAULT_COMPUTE_CAPABILITY,
    "max_num_batched_tokens": DEFAULT_MAX_NUM_BATCHED_TOKENS,
    "max_num_seqs": None,  # None: chosen by the plan (4 x full-length capacity, capped at 64)
    "cuda_context_gib": CUDA_CONTEXT_NCCL_GIB,
    "non_torch_gib": NON_TORCH_INCREASE_GIB,
    "cuda_graph_gib": CUDA_GRAPH_GIB,
}


class PlanInputError(ValueError):
    """An option is out of range (invalid input, like an unreadable checkpoint)."""


class UnsupportedModelError(PlanInputError):
    """A model this planner refuses to plan rather than give a wrong number for."""


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


def _is_block_scale(name: str, tensor: Tensor) -> bool:
    """An NVFP4 linear's FP8 E4M3 per-16 block scale (compressed-tensors and ModelOpt name)."""
    return tensor.dtype == "F8_E4M3" and name.endswith(".weight_scale") and len(tensor.shape) == 2


def weight_bytes(tensors: dict[str, Tensor], tp: int, kv_heads: int,
                 block_scale_factor: int = 1) -> dict[str, int]:
    """Checkpoint and resident bytes, total and per GPU; per GPU (resident) also split into
    linear layers, embeddings/lm_head and the rest (norms and the like)."""
    result = {"total": 0, "per_gpu": 0, "checkpoint_total": 0, "checkpoint_per_gpu": 0,
              "linear_per_gpu": 0, "linear_16bit_per_gpu": 0, "embeddings_per_gpu": 0,
              "other_per_gpu": 0}
    for name, tensor in tensors.items():
        on_disk = tensor_bytes_per_gpu(name, tensor, tp, kv_heads)
        factor = block_scale_factor if _is_block_scale(name, tensor) else 1
        per_gpu = on_disk * factor
        result["checkpoint_total"] += tensor.nbytes
        result["checkpoint_per_gpu"] += on_disk
        result["total"] += tensor.nbytes * factor
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


def _dimension(value: Any) -> int | None:
    """A config dimension when it is a sane positive integer, else None (then: estimated)."""
    return value if type(value) is int and 0 < value <= 2**31 - 1 else None


def _vocab_rows(tensors: dict[str, Tensor]) -> int | None:
    """The vocabulary size as the embedding/lm_head tensors have it (when config.json lies)."""
    for name, tensor in tensors.items():
        leaf = name.rpartition(".")[0].rpartition(".")[2]
        if leaf in VOCAB_PARALLEL and len(tensor.shape) == 2:
            return _dimension(tensor.shape[0])
    return None


def activation_peak(dims: dict[str, Any], tp: int, batched_tokens: int,
                    max_num_seqs: int) -> dict[str, int]:
    """Torch's allocated peak during vLLM's profile run, per GPU: {forward, sampler, peak}.

    The profile run is one forward of ``batched_tokens`` tokens, then a sampler pass over
    min(max_num_seqs, batched_tokens) rows of full-vocab logits (gpu_model_runner.py:10331,
    10717-10760, 10979-10981); the peak is the larger of the two (the forward's activations are
    freed before the sampler runs).
    """
    hidden = int(dims["hidden_size"])
    inter = _dimension(dims.get("intermediate_size")) or 4 * hidden
    qkv = (dims["num_attention_heads"] + 2 * dims["num_key_value_heads"]) * dims["head_dim"]
    widest = max(ACTIVATION_INTERMEDIATE_COPIES * -(-inter // tp), 3 * -(-qkv // tp))
    forward = batched_tokens * 2 * (ACTIVATION_HIDDEN_COPIES * hidden + widest)
    vocab = _dimension(dims.get("vocab_size")) or 0
    rows = min(max_num_seqs, batched_tokens)
    sampler = rows * vocab * SAMPLER_BYTES_PER_LOGIT
    return {"forward": forward, "sampler": sampler, "peak": max(forward, sampler),
            "rows": rows}


def health_topology(health: Any) -> dict[str, Any]:
    """What the GPU-health facts say about TP communication and card size (accepts the
    wrapper or the bare dict)."""
    if health is None:
        return {"known": False, "pcie_only": False, "cross_socket": False,
                "disable_custom_all_reduce": False, "nccl_p2p_disable": False,
                "memory_total_mib": None}
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
    gpus = facts.get("gpus")
    sizes = [gpu.get("memory_total_mib") for gpu in (gpus if isinstance(gpus, list) else [])
             if isinstance(gpu, dict)]
    sizes = [size for size in sizes if isinstance(size, (int, float))
             and not isinstance(size, bool) and math.isfinite(size) and 0 < size <= 1 << 32]
    return {
        "known": bool(pairs),
        "pcie_only": pcie_only,
        "cross_socket": cross_socket,
        "disable_custom_all_reduce": pcie_only
        or bool(recommendations.get("disable_custom_all_reduce")),
        "nccl_p2p_disable": cross_socket or bool(recommendations.get("nccl_p2p_disable")),
        # The smallest card bounds a tensor-parallel group.
        "memory_total_mib": min(sizes) if sizes else None,
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
                                ("max_num_batched_tokens", "--max-num-batched-tokens", True),
                                ("gpu_memory_gib", "--gpu-memory-gib", False),
                                ("gpu_memory_utilization", "--gpu-memory-utilization", False),
                                ("cuda_context_gib", "--cuda-context-gib", False),
                                ("non_torch_gib", "--non-torch-gib", False),
                                ("cuda_graph_gib", "--cuda-graph-gib", False)):
        number = _number(opts[name], flag, integer)
        opts[name] = int(number) if integer else number
    if opts["max_num_seqs"] is not None:
        opts["max_num_seqs"] = int(_number(opts["max_num_seqs"], "--max-num-seqs", True))
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
    if not 1 <= opts["max_num_batched_tokens"] <= MAX_MODEL_LEN:
        raise PlanInputError(f"--max-num-batched-tokens {opts['max_num_batched_tokens']}: must "
                             f"be between 1 and {MAX_MODEL_LEN}")
    if opts["max_num_seqs"] is not None and not 1 <= opts["max_num_seqs"] <= MAX_MODEL_LEN:
        raise PlanInputError(f"--max-num-seqs {opts['max_num_seqs']}: must be between 1 and "
                             f"{MAX_MODEL_LEN}")
    for key in ("cuda_context_gib", "non_torch_gib", "cuda_graph_gib"):
        flag = "--" + key.replace("_", "-")
        if opts[key] < 0:
            raise PlanInputError(f"{flag} {opts[key]:g}: must not be negative")
        if opts[key] > MAX_GPU_MEMORY_GIB:
            raise PlanInputError(f"{flag} {opts[key]:g}: must be at most {MAX_GPU_MEMORY_GIB:g}")
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


def _attention_backend(engine: str, head_dim: int, capability: int) -> str | None:
    if engine == "1cat-vllm":
        return "FLASH_ATTN_V100" if head_dim in FLASH_ATTN_V100_HEAD_DIMS else "TRITON_ATTN"
    return "TRITON_ATTN" if capability < 80 else None


def _card(opts: dict[str, Any], topology: dict[str, Any]) -> tuple[float, str]:
    """(card bytes, where the figure came from): NVML's when the health facts have it."""
    if topology["memory_total_mib"]:
        mib = topology["memory_total_mib"]
        return float(mib) * MIB, f"NVML memory_total_mib {mib:g} ({mib / 1024:.2f} GiB)"
    nominal = float(opts["gpu_memory_gib"])
    return nominal * GIB, f"nominal {nominal:g} GiB (no NVML figure: pass --health for it)"


def memory_budget(ctx: dict[str, Any], tp: int | None = None, util: float | None = None,
                  element: int | None = None, weights: int | None = None) -> dict[str, Any]:
    """Every term of the per-GPU budget for this plan (or a variant: another TP, utilization,
    KV element size or weight figure), as vLLM's worker computes it."""
    tp = ctx["tp"] if tp is None else tp
    util = ctx["util"] if util is None else util
    element = ctx["element"] if element is None else element
    opts, dims = ctx["opts"], ctx["dims"]
    if weights is None:
        weights = (ctx["weights"] if tp == ctx["tp"] else weight_bytes(
            ctx["info"]["tensors"], tp, dims["num_key_value_heads"],
            ctx["resident"]["block_scale_factor"]))["per_gpu"]
    total = ctx["card_bytes"]
    requested = math.ceil(total * util)
    act = activation_peak(dims, tp, int(opts["max_num_batched_tokens"]), ctx["max_num_seqs"])
    non_torch = float(opts["non_torch_gib"]) * GIB
    graphs = float(opts["cuda_graph_gib"]) * GIB
    graphs_inside = not ctx["graphs_outside"]
    budget = requested - weights - act["peak"] - non_torch - (graphs if graphs_inside else 0)
    outside = float(opts["cuda_context_gib"]) * GIB + (0 if graphs_inside else graphs)
    kv_total, kv_gpu = kv_bytes_per_token(dims, element, tp)
    tokens = kv_tokens(budget, kv_gpu)
    return {"total": total, "requested": requested, "weights": weights, "activation": act,
            "non_torch": non_torch, "graphs": graphs, "graphs_inside": graphs_inside,
            "budget": budget, "outside": outside, "headroom": total - requested,
            "kv_total": kv_total, "kv_gpu": kv_gpu, "tokens": tokens,
            "concurrency": tokens // ctx["length"]}


def max_utilization(ctx: dict[str, Any]) -> float:
    """The highest utilization whose headroom still holds the CUDA context, NCCL and graphs."""
    outside = float(ctx["opts"]["cuda_context_gib"]) * GIB
    if ctx["graphs_outside"]:
        outside += float(ctx["opts"]["cuda_graph_gib"]) * GIB
    return max(0.0, math.floor((1 - outside / ctx["card_bytes"]) * 100) / 100)


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
    if dims.get("hybrid"):
        raise UnsupportedModelError(
            f"{model_dir}: a hybrid model ({dims['hybrid']}): its recurrent layers keep a "
            "per-request state outside vLLM's paged KV cache, which this planner does not "
            "model; it refuses rather than give a wrong number. Start the server with a small "
            "--max-model-len and read 'Available KV cache memory' in its log")
    if not _dimension(dims.get("vocab_size")):
        dims["vocab_size"] = _vocab_rows(info["tensors"])
    tp = int(opts["tensor_parallel_size"])
    length = int(opts["max_model_len"])
    util = float(opts["gpu_memory_utilization"])
    card_bytes, card_source = _card(opts, topology)
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

    resident = resident_rule(opts["engine"], str(opts["engine_version"]), info["quant_format"])
    weights = weight_bytes(info["tensors"], tp, dims["num_key_value_heads"],
                           resident["block_scale_factor"])
    backend = _attention_backend(opts["engine"], dims["head_dim"], capability)
    ctx: dict[str, Any] = {
        "opts": opts, "dims": dims, "info": info, "tp": tp, "length": length, "util": util,
        "card_bytes": card_bytes, "weights": weights, "resident": resident,
        "element": KV_CACHE_DTYPE_BYTES[opts["kv_cache_dtype"]], "kv_quantized": kv_quantized,
        # 1Cat turns the CUDA-graph estimate off for FLASH_ATTN_V100 (config/vllm.py:1451-1456):
        # graphs are captured after the KV cache is allocated, outside the requested share.
        "graphs_outside": opts["engine"] == "1cat-vllm" and backend == "FLASH_ATTN_V100",
        "max_num_seqs": int(opts["max_num_seqs"] or MAX_NUM_SEQS_CAP),
    }
    if opts["max_num_seqs"] is None:
        # Two passes: size the sampler for the cap, then plan with the --max-num-seqs we pass.
        first = memory_budget(ctx)
        ctx["max_num_seqs"] = max(1, min(MAX_NUM_SEQS_CAP, first["concurrency"] * 4))
    memory = memory_budget(ctx)
    ctx.update(memory=memory, budget=memory["budget"], max_tokens=memory["tokens"],
               concurrency=memory["concurrency"], kv_gpu=memory["kv_gpu"])
    fits = memory["concurrency"] >= 1
    ctx["fits"] = fits
    if memory["headroom"] < memory["outside"]:
        problems.append(_headroom_problem(ctx))
    fit_reason = _fit_reason(ctx)
    suggestions, nothing_fits = _suggestions(ctx)
    args, env, notes = _serve_args(ctx, topology, capability, backend, warnings)
    act = memory["activation"]
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
        "checkpoint_bytes": weights["checkpoint_total"],
        "checkpoint_bytes_per_gpu": weights["checkpoint_per_gpu"],
        "resident_rule": resident["text"],
        "kv_cache_bytes_per_token": memory["kv_total"],
        "kv_cache_bytes_per_token_per_gpu": memory["kv_gpu"],
        "kv_cache_bytes_per_gpu": max(0, int(memory["budget"])),
        "max_kv_tokens": memory["tokens"],
        "max_concurrency_at_max_model_len": memory["concurrency"],
        "fits": fits,
        "fit_reason": fit_reason,
        "nothing_fits": nothing_fits,
        "ok": fits and not problems,
        "suggestions": suggestions,
        "serve_args": args,
        "serve_env": env,
        "serve_notes": notes,
        "inputs": {**{k: opts[k] for k in DEFAULTS}, "max_num_seqs": ctx["max_num_seqs"],
                   "health": topology},
        "dims": dims,
        "memory_per_gpu": {
            "total_bytes": int(memory["total"]),
            "total_source": card_source,
            "usable_bytes": int(memory["requested"]),  # = requested
            "requested_bytes": int(memory["requested"]),
            "weights_bytes": weights["per_gpu"],
            "checkpoint_weights_bytes": weights["checkpoint_per_gpu"],
            "linear_bytes": weights["linear_per_gpu"],
            "embeddings_bytes": weights["embeddings_per_gpu"],
            "other_bytes": weights["other_per_gpu"],
            "activation_bytes": act["peak"],
            "activation_forward_bytes": act["forward"],
            "activation_sampler_bytes": act["sampler"],
            "non_torch_bytes": int(memory["non_torch"]),
            "cuda_graph_bytes": int(memory["graphs"]),
            "cuda_graphs_in_budget": memory["graphs_inside"],
            "kv_budget_bytes": int(memory["budget"]),
            "headroom_bytes": int(memory["headroom"]),
            "outside_bytes": int(memory["outside"]),
            "cuda_context_bytes": int(float(opts["cuda_context_gib"]) * GIB),
            "max_utilization": max_utilization(ctx),
        },
        "generation_defaults": info["generation_defaults"],
    }


def _headroom_problem(ctx: dict[str, Any]) -> str:
    memory, opts = ctx["memory"], ctx["opts"]
    graphs = "" if memory["graphs_inside"] else f" + {gib(memory['graphs'])} CUDA graphs"
    return (f"--gpu-memory-utilization {ctx['util']:g} leaves {gib(memory['headroom'])} of the "
            f"{gib(memory['total'])} card outside vLLM's share, less than the "
            f"{float(opts['cuda_context_gib']):.2f} GiB CUDA context + NCCL{graphs} that live "
            "there (vLLM refuses to start when free memory is below its share, or the graph "
            f"capture runs out of memory): use --gpu-memory-utilization {max_utilization(ctx):.2f}"
            " or less")


def _shape_problems(dims: dict[str, Any], tp: int, length: int) -> list[str]:
    problems = []
    heads, kv_heads = dims["num_attention_heads"], dims["num_key_value_heads"]
    if heads % tp:
        problems.append(f"num_attention_heads {heads} is not divisible by --tensor-parallel-size "
                        f"{tp}: vLLM refuses this split; use a TP size that divides {heads}")
    elif (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        problems.append(f"num_key_value_heads {kv_heads} and --tensor-parallel-size {tp} do not "
                        "divide each other: vLLM refuses this split")
    limit = dims.get("max_model_len_limit")
    if isinstance(limit, int) and length > limit:
        problems.append(f"--max-model-len {length} exceeds the model's limit {limit} "
                        f"({dims['max_model_len_limit_source']}): vLLM refuses it; use "
                        f"--max-model-len {limit} or less")
    return problems


def _fit_reason(ctx: dict[str, Any]) -> str:
    memory, opts, length = ctx["memory"], ctx["opts"], ctx["length"]
    requested = (f"{gib(memory['requested'])} requested ({gib(memory['total'])} x "
                 f"{float(opts['gpu_memory_utilization']):.2f})")
    used = (f"{gib(memory['weights'])} weights + {gib(memory['activation']['peak'])} activation "
            f"peak + {gib(memory['non_torch'])} non-torch"
            + (f" + {gib(memory['graphs'])} CUDA graphs" if memory["graphs_inside"] else ""))
    if memory["budget"] <= 0:
        return f"does not fit: {used} per GPU need more than the {requested}"
    if not ctx["fits"]:
        return (f"does not fit: the KV cache left per GPU ({gib(memory['budget'])}) holds "
                f"{memory['tokens']} tokens, less than one {length}-token sequence")
    return (f"fits: {used} per GPU of {requested} leave {gib(memory['budget'])} of KV cache = "
            f"{memory['tokens']} tokens = {memory['concurrency']} sequence(s) of {length} tokens "
            "at once")


def _suggestions(ctx: dict[str, Any]) -> tuple[list[str], bool]:
    """Computed changes that would make the model fit (or fit more); and whether none can."""
    tips: list[str] = []
    length, kv_gpu = ctx["length"], ctx["kv_gpu"]
    concurrency, max_tokens, budget = ctx["concurrency"], ctx["max_tokens"], ctx["budget"]
    if ctx["fits"] and concurrency >= FEW_SEQUENCES:
        return tips, False
    fp8_allowed = ctx["element"] == 2 and not ctx["kv_quantized"]
    best_util = max(ctx["util"], max_utilization(ctx))
    best = memory_budget(ctx, util=best_util, element=1 if fp8_allowed else ctx["element"])
    # "Nothing fits": even at the highest utilization the headroom allows, with the cheapest
    # KV cache, not one sequence of min(max-model-len, 2048) tokens fits.
    nothing_fits = best["tokens"] < min(length, 2048)
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
        for step in range(round(ctx["util"] * 100) + 1, round(best_util * 100) + 1):
            if memory_budget(ctx, util=step / 100)["concurrency"] >= 1:
                tips.append(f"--gpu-memory-utilization {step / 100:.2f}: room for 1 sequence of "
                            f"{length} tokens (only if nothing else uses the GPUs; the rest of "
                            "the card still holds the CUDA context, NCCL and graphs)")
                break
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
    if not ctx["fits"]:
        tips.extend(_nvfp4_tip(ctx))
    return tips, False


def _nothing_fits_tips(ctx: dict[str, Any]) -> list[str]:
    opts, length, tp, memory = ctx["opts"], ctx["length"], ctx["tp"], ctx["memory"]
    weights, util = memory["weights"], ctx["util"]
    inside = memory["requested"] - memory["budget"] + ctx["kv_gpu"] * length
    need = max(inside / util, memory["outside"] / (1 - util) if util < 1 else 0)
    tips = [
        f"nothing fits on {opts['gpus']}x{round(memory['total'] / GIB, 2):g} GiB: the weights "
        f"alone take {gib(weights)} per GPU (+{gib(memory['activation']['peak'])} activation peak) "
        "and no context length, KV dtype or utilization changes that: not recommended on this "
        "hardware (the seed does not recommend 34B+ on 2x16 GB). It needs about "
        f"{math.ceil(need / GIB * 10) / 10:.1f} GiB per GPU at TP{tp} (e.g. 32 GB V100s) for "
        f"one {length}-token sequence",
    ]
    for wider in (4, 8):
        if wider <= tp or ctx["dims"]["num_attention_heads"] % wider:
            continue
        wide = memory_budget(ctx, tp=wider)
        if wide["tokens"] >= length:
            tips.append(f"--tensor-parallel-size {wider} over {wider} such GPUs: "
                        f"{gib(wide['weights'])} weights per GPU, room for "
                        f"{wide['tokens'] // length} sequence(s) of {length}")
            break
    tips.extend(_nvfp4_tip(ctx))
    return tips


def _nvfp4_tip(ctx: dict[str, Any]) -> list[str]:
    """For a 16-bit checkpoint: what its NVFP4 version would hold on 1Cat's TurboMind path."""
    if ctx["info"]["quant_format"] not in ("fp16", "bf16"):
        return []
    weights, length = ctx["memory"]["weights"], ctx["length"]
    linear16 = ctx["weights"]["linear_16bit_per_gpu"]
    estimate = int(weights - linear16 + linear16 / 2 * NVFP4_RESIDENT_BYTES_PER_PARAM)
    tokens = memory_budget(ctx, weights=estimate)["tokens"]
    if tokens < length:
        return []
    return [f"an NVFP4 checkpoint of this model would take about {gib(estimate)} per GPU on "
            f"1cat-vllm and leave room for {tokens // length} sequence(s) of {length}"]


def _serve_args(ctx: dict[str, Any], topology: dict[str, Any], capability: int,
                backend: str | None,
                warnings: list[str]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Engine flags (flag -> value; True means a bare flag), environment, and why."""
    opts, dims, tp = ctx["opts"], ctx["dims"], ctx["tp"]
    notes: list[str] = []
    args: dict[str, Any] = {
        "--dtype": "half",
        "--tensor-parallel-size": tp,
        "--max-model-len": ctx["length"],
        "--gpu-memory-utilization": ctx["util"],
        # Most requests are shorter than max-model-len: allow ~4x the full-length capacity
        # (vLLM preempts when the cache runs out), capped for V100-sized batches.
        "--max-num-seqs": ctx["max_num_seqs"],
    }
    if int(opts["max_num_batched_tokens"]) != DEFAULT_MAX_NUM_BATCHED_TOKENS:
        args["--max-num-batched-tokens"] = int(opts["max_num_batched_tokens"])
    if backend is not None:
        args["--attention-backend"] = backend
    if opts["engine"] == "1cat-vllm" and backend == "TRITON_ATTN":
        warnings.append(f"head_dim {dims['head_dim']} is not one FLASH_ATTN_V100 supports "
                        "(64/128/256): TRITON_ATTN chosen instead")
    if opts["kv_cache_dtype"] != "auto":
        args["--kv-cache-dtype"] = opts["kv_cache_dtype"]
    env: dict[str, str] = {}
    volta = 70 <= capability < 75
    if tp > 1 and (volta or topology["disable_custom_all_reduce"]):
        args["--disable-custom-all-reduce"] = True
        if volta:
            notes.append(
                "--disable-custom-all-reduce: on sm_70 custom all-reduce fails whatever the "
                "topology (1Cat's use_custom_allreduce() is always true, platforms/cuda.py:473; "
                "startup deadlock on PCIe pairs, 1Cat-vLLM #652/#430 with Xid 62; a "
                "custom_all_reduce.cuh failure on NVLink SXM2, maintainer in PR #88); NCCL's "
                "all-reduce costs little at TP2")
        else:
            notes.append("--disable-custom-all-reduce: the health facts show a PCIe-only pair")
    if tp > 1 and topology["nccl_p2p_disable"]:
        env["NCCL_P2P_DISABLE"] = "1"
        notes.append("NCCL_P2P_DISABLE=1: the health facts show a cross-socket pair or broken "
                     "peer-to-peer")
    return args, env, notes


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
