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
hidden_size / num_attention_heads. Gated DeltaNet hybrids (Qwen3.5 family, Qwen3-Next) are
laid out as vLLM's hybrid KV-cache manager does (``hybrid_layout_bytes``: KV per token over the
full-attention layers, per-request conv + recurrent state in pages of one size, enlarged
attention blocks, layer groups sharing one pool); other hybrids (Mamba, Mamba2) are refused.
Speculative decoding (the fork's MTP opt-in or --speculative-config, mtp.py) widens their
state and adds the MTP drafter's layer and weights; what the fork refuses at startup for a
hybrid (a block above --max-num-batched-tokens, --max-num-seqs above the Mamba cache blocks)
is a problem of the plan (hybrid_limits.py).
Also per GPU: the rotary cos_sin_cache (``rotary_cache_bytes``) next to the weights and
TurboMind's GEMM workspace inside the activation peak; the estimated constants come from
calibration.py.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from . import mtp as speculative
from .calibration import as_dict as calibration_table
from .calibration import value as estimate
from .checkpoint import (
    COLUMN_PARALLEL,
    LINEAR_LEAVES,
    ROW_PARALLEL,
    VOCAB_PARALLEL,
    inspect_model,
    load_json,
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
from .hybrid_limits import block_problem, mamba_blocks_problem
from .safetensors import CheckpointError, Tensor, numel

GIB = 1024**3
MIB = 1024**2
KV_CACHE_DTYPE_BYTES = {"auto": 2, "fp8_e5m2": 1}
BLOCK_TOKENS = 16  # vLLM's default KV-cache block size
VOCAB_PADDING = 64  # vLLM pads embedding/lm_head rows to a multiple of this
FEW_SEQUENCES = 4  # fewer full-length sequences than this deserves advice even when it fits
FLASH_ATTN_V100_HEAD_DIMS = (64, 128, 256)
NVFP4_RESIDENT_BYTES_PER_PARAM = 0.5 + 2 / 16  # 1Cat TurboMind: packed FP4 + FP16 scale per 16

# vLLM's --max-num-batched-tokens default for `vllm serve` on a card under 70 GiB (chunked
# prefill caps every step at it): 1Cat-vLLM vllm/engine/arg_utils.py:2546-2554.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# ... and its --max-num-seqs default there (the engine's own ceiling for such a card).
ENGINE_MAX_NUM_SEQS = 256
MAX_NUM_SEQS_CAP = ENGINE_MAX_NUM_SEQS
# The estimated constants live in one table with their sources (calibration.py): activation
# copies per token, sampler bytes per logit, CUDA context + NCCL, non-torch increase, graphs.
ACTIVATION_HIDDEN_COPIES = int(estimate("activation_hidden_copies"))
ACTIVATION_INTERMEDIATE_COPIES = int(estimate("activation_intermediate_copies"))
SAMPLER_BYTES_PER_LOGIT = int(estimate("sampler_bytes_per_logit"))
CUDA_CONTEXT_NCCL_GIB = estimate("cuda_context_nccl_gib")
NON_TORCH_INCREASE_GIB = estimate("non_torch_increase_gib")
CUDA_GRAPH_GIB = estimate("cuda_graph_gib")
# TurboMind's per-stream GEMM workspace, allocated by torch at the first NVFP4 GEMM of the
# profile run (csrc/sm70_turbomind/ops/awq_sm70_gemm.cu:1365-1415): inside the activation peak.
TURBOMIND_WORKSPACE_BYTES = int(estimate("turbomind_workspace_bytes"))
# The benchmark's request (bench defaults: 500 prompt tokens, 256 generated).
TYPICAL_INPUT_TOKENS = 500
TYPICAL_OUTPUT_TOKENS = 256
# Hybrid (Gated DeltaNet) models on 1Cat SM70: `vllm serve` turns prefix caching on and sets
# mamba_cache_mode "align" (engine/arg_utils.py:1769-1778), where each request holds 2 state
# blocks per linear-layer group (v1/kv_cache_interface.py:589-590; 1 without prefix caching).
MAMBA_ALIGN_BLOCKS_PER_REQUEST = 2

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
    "max_num_seqs": None,  # None: sized by the plan for the typical request (see _choose_seqs)
    "cuda_context_gib": CUDA_CONTEXT_NCCL_GIB,
    "non_torch_gib": NON_TORCH_INCREASE_GIB,
    "cuda_graph_gib": CUDA_GRAPH_GIB,
    # The engine's --speculative-config (JSON object) and the environment the server gets
    # (the fork's MTP switches): speculative decoding is planned from them (mtp.py).
    "speculative_config": None,
    "engine_env": None,
}
# The typical request that sizes --max-num-seqs (kept apart from DEFAULTS, which the
# model_plan Ansible module documents option by option).
WORKLOAD_DEFAULTS: dict[str, Any] = {
    "typical_input_tokens": TYPICAL_INPUT_TOKENS,
    "typical_output_tokens": TYPICAL_OUTPUT_TOKENS,
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
    # The MTP head's fc is a ColumnParallelLinear (qwen3_5_mtp.py:155-163, qwen3_next_mtp.py:67).
    if leaf in COLUMN_PARALLEL or (leaf == "fc" and name.startswith("mtp.")):
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


def kv_bytes_per_token(dims: dict[str, Any], element_bytes: int, tp: int,
                       drafter_layers: int = 0) -> tuple[int, int]:
    """(whole model, per GPU) KV-cache bytes for one token; an MTP drafter's full-attention
    layers share the cache (mtp.py)."""
    per_head = 2 * (dims["kv_layers"] + drafter_layers) * dims["head_dim"] * element_bytes
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
                    max_num_seqs: int, workspace: int = 0,
                    spec_tokens: int = 0) -> dict[str, int]:
    """Torch's allocated peak during vLLM's profile run, per GPU: {forward, sampler, peak}.

    The profile run is one forward of ``batched_tokens`` tokens, then a sampler pass over
    min(max_num_seqs, batched_tokens) rows of full-vocab logits (gpu_model_runner.py:10331,
    10717-10760, 10979-10981); the peak is the larger of the two (the forward's activations are
    freed before the sampler runs). ``workspace`` (TurboMind's GEMM workspace, created at the
    first GEMM and kept) sits under both. With ``spec_tokens`` n the profile run's
    rejection-sampler pass holds (1 + n) target logits rows and n draft-probability rows per
    sequence (gpu_model_runner.py:10791-10822): counted as (1 + n) rows at the sampler's bytes
    per logit (estimated).
    """
    hidden = int(dims["hidden_size"])
    inter = _dimension(dims.get("intermediate_size")) or 4 * hidden
    qkv = (dims["num_attention_heads"] + 2 * dims["num_key_value_heads"]) * dims["head_dim"]
    widest = max(ACTIVATION_INTERMEDIATE_COPIES * -(-inter // tp), 3 * -(-qkv // tp))
    forward = batched_tokens * 2 * (ACTIVATION_HIDDEN_COPIES * hidden + widest)
    vocab = _dimension(dims.get("vocab_size")) or 0
    rows = min(max_num_seqs, batched_tokens)
    sampler = rows * (1 + spec_tokens) * vocab * SAMPLER_BYTES_PER_LOGIT
    return {"forward": forward, "sampler": sampler, "workspace": workspace,
            "peak": max(forward, sampler) + workspace, "rows": rows}


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
MIN_GPU_MEMORY_GIB = 0.25  # no CUDA card is smaller; below a byte the plan's sums go negative
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
                                ("typical_input_tokens", "--typical-input-tokens", True),
                                ("typical_output_tokens", "--typical-output-tokens", True),
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
    if not MIN_GPU_MEMORY_GIB <= opts["gpu_memory_gib"] <= MAX_GPU_MEMORY_GIB:
        raise PlanInputError(f"--gpu-memory-gib {opts['gpu_memory_gib']:g}: must be at least "
                             f"{MIN_GPU_MEMORY_GIB:g} and at most {MAX_GPU_MEMORY_GIB:g}, e.g. 16 "
                             "for a V100-16GB")
    if not 0 < opts["gpu_memory_utilization"] <= 1:
        raise PlanInputError(f"--gpu-memory-utilization {opts['gpu_memory_utilization']:g}: "
                             "must be in (0, 1], e.g. 0.9")
    if not 1 <= opts["max_model_len"] <= MAX_MODEL_LEN:
        raise PlanInputError(f"--max-model-len {opts['max_model_len']}: must be between 1 and "
                             f"{MAX_MODEL_LEN}")
    if not 1 <= opts["max_num_batched_tokens"] <= MAX_MODEL_LEN:
        raise PlanInputError(f"--max-num-batched-tokens {opts['max_num_batched_tokens']}: must "
                             f"be between 1 and {MAX_MODEL_LEN}")
    for key in ("typical_input_tokens", "typical_output_tokens"):
        if not 1 <= opts[key] <= MAX_MODEL_LEN:
            raise PlanInputError(f"--{key.replace('_', '-')} {opts[key]}: must be between 1 and "
                                 f"{MAX_MODEL_LEN}")
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
        opts["speculative_config"] = speculative.parse_speculative_config(
            opts["speculative_config"])
        opts["engine_env"] = speculative.check_env(opts["engine_env"])
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


def hybrid_layout_bytes(dims: dict[str, Any], tp: int, element: int, spec_tokens: int = 0,
                        drafter_layers: int = 0) -> dict[str, Any]:
    """How vLLM's hybrid KV-cache manager lays out a Gated DeltaNet hybrid, per GPU.

    - attention page for 1 token = 2 x kv heads per rank x head_dim x element
      (FullAttentionSpec, v1/kv_cache_interface.py:167-184);
    - state page per linear layer and request = conv state (conv_dim / TP) x (kernel - 1) in
      float16 + recurrent state (value heads / TP) x value_dim x key_dim in float32, conv_dim =
      2 x key heads x key_dim + value heads x value_dim (gated_delta_net_state_shape/_dtype,
      model_executor/layers/mamba/mamba_utils.py:108-123, 219-241; qwen3_5.py:956-987;
      MambaSpec.page_size_bytes, kv_cache_interface.py:571-580);
    - block size enlarged to 16 x ceil(state / (16 x attention page per token)) tokens so both
      pages are one size, the state page padded up to it (platforms/interface.py:641-690);
    - layers grouped by type in groups of min(full, linear) layers, all groups sharing one
      pool of `budget // page // group_size` blocks (v1/core/kv_cache_utils.py:1142-1176,
      935-952, 1291-1316).

    With ``spec_tokens`` n speculative tokens (mtp.py) the conv state keeps kernel - 1 + n
    positions (mamba_utils.py:220-241), each request holds 2 + n state blocks per linear group
    in align mode (kv_cache_interface.py:588-590), and an MTP drafter's ``drafter_layers``
    full-attention layers join the attention layers (they share the pool and its groups).
    """
    lin = dims["linear"]
    kv_heads = max(1, dims["num_key_value_heads"] // tp)
    attn_token = 2 * kv_heads * dims["head_dim"] * element
    conv_dim = (2 * lin["linear_num_key_heads"] * lin["linear_key_head_dim"]
                + lin["linear_num_value_heads"] * lin["linear_value_head_dim"])
    conv = conv_dim // tp * (lin["linear_conv_kernel_dim"] - 1 + spec_tokens) * 2
    ssm = (lin["linear_num_value_heads"] // tp * lin["linear_value_head_dim"]
           * lin["linear_key_head_dim"] * lin["ssm_state_bytes"])
    state = conv + ssm
    align = BLOCK_TOKENS  # FLASH_ATTN_V100/Triton kernel block alignment 16, cache.py:46
    block = align * -(-state // (align * attn_token))
    full, linear = lin["full_attention_layers"] + drafter_layers, lin["linear_layers"]
    group = min(full, linear)
    if max(full, linear) < group * 1.5:
        group = max(full, linear)
    linear_groups = -(-linear // group)
    state_blocks = linear_groups * (MAMBA_ALIGN_BLOCKS_PER_REQUEST + spec_tokens)
    return {"attention_bytes_per_token": attn_token, "conv_state_bytes": conv,
            "ssm_state_bytes": ssm, "state_bytes": state, "block_size": block,
            "page_bytes": block * attn_token, "group_size": group,
            "full_groups": -(-full // group), "linear_groups": linear_groups,
            "attention_layers": full, "speculative_tokens": spec_tokens,
            # One copy of every linear layer's state ...
            "state_bytes_per_sequence": state * linear,
            # ... and what a request holds in align mode: 2 + n blocks per linear group, each
            # block a page in every layer of the group (padding included).
            "state_bytes_held_per_sequence": state_blocks * block * attn_token * group,
            "state_blocks_per_sequence": state_blocks}


def rotary_cache_bytes(dims: dict[str, Any]) -> int:
    """The rotary cos_sin_cache on every GPU (checkpoint.rope_cache_dims): resident from model
    load, one per distinct rope (get_rope caches them, rotary_embedding/__init__.py:74-84)."""
    rope = dims.get("rope")
    return int(rope["bytes"]) if isinstance(rope, dict) else 0


def loaded_weight_bytes(ctx: dict[str, Any], tp: int) -> dict[str, int]:
    """weight_bytes of the tensors the engine loads at this TP; an MTP drafter that does not
    share the target's embedding and lm_head (VLLM_QWEN35_MTP_SHARE_IO_WEIGHTS=0,
    qwen3_5_mtp.py:483-485, 515-528) loads them a second time."""
    weights = weight_bytes(ctx["tensors"], tp, ctx["dims"]["num_key_value_heads"],
                           ctx["resident"]["block_scale_factor"])
    spec = ctx.get("speculation")
    if spec and spec["drafter_weights"] and not spec["share_io"]:
        extra = weights["embeddings_per_gpu"]
        weights.update(per_gpu=weights["per_gpu"] + extra,
                       embeddings_per_gpu=weights["embeddings_per_gpu"] + extra,
                       total=weights["total"] + extra * tp)
    return weights


def memory_budget(ctx: dict[str, Any], tp: int | None = None, util: float | None = None,
                  element: int | None = None, weights: int | None = None,
                  max_num_seqs: int | None = None,
                  batched_tokens: int | None = None) -> dict[str, Any]:
    """Every term of the per-GPU budget for this plan (or a variant: another TP, utilization,
    KV element size, weight figure, --max-num-seqs or --max-num-batched-tokens), as vLLM's
    worker computes it."""
    tp = ctx["tp"] if tp is None else tp
    util = ctx["util"] if util is None else util
    element = ctx["element"] if element is None else element
    seqs = ctx["max_num_seqs"] if max_num_seqs is None else max_num_seqs
    opts, dims = ctx["opts"], ctx["dims"]
    batched = int(opts["max_num_batched_tokens"]) if batched_tokens is None else batched_tokens
    spec = ctx.get("speculation")
    spec_tokens = spec["num_speculative_tokens"] if spec else 0
    drafter_layers = spec["drafter_attention_layers"] if spec else 0
    if weights is None:
        weights = (ctx["weights"] if tp == ctx["tp"] else loaded_weight_bytes(ctx, tp))["per_gpu"]
    total = ctx["card_bytes"]
    requested = math.ceil(total * util)
    act = activation_peak(dims, tp, batched, seqs, ctx["workspace"],
                          spec_tokens if dims.get("linear") else 0)
    rotary = rotary_cache_bytes(dims)
    non_torch = float(opts["non_torch_gib"]) * GIB
    graphs = float(opts["cuda_graph_gib"]) * GIB
    graphs_inside = not ctx["graphs_outside"]
    budget = (requested - weights - rotary - act["peak"] - non_torch
              - (graphs if graphs_inside else 0))
    outside = float(opts["cuda_context_gib"]) * GIB + (0 if graphs_inside else graphs)
    kv_total, kv_gpu = kv_bytes_per_token(dims, element, tp, drafter_layers)
    result = {"total": total, "requested": requested, "weights": weights, "rotary": rotary,
              "activation": act, "non_torch": non_torch, "graphs": graphs,
              "graphs_inside": graphs_inside, "budget": budget, "outside": outside,
              "headroom": total - requested, "kv_total": kv_total, "kv_gpu": kv_gpu,
              "hybrid": None}
    length = ctx["length"]
    if dims.get("linear"):
        layout = hybrid_layout_bytes(dims, tp, element, spec_tokens, drafter_layers)
        blocks = int(budget // layout["page_bytes"] // layout["group_size"]) if budget > 0 else 0
        per_request = (layout["full_groups"] * -(-length // layout["block_size"])
                       + layout["state_blocks_per_sequence"])
        slots = blocks // (layout["full_groups"] + layout["state_blocks_per_sequence"])
        # The engine's own figures: max concurrency = blocks / blocks per full-length request,
        # "GPU KV cache size" = concurrency x max_model_len (kv_cache_utils.py:877-895,
        # 1719-1737).
        result["hybrid"] = {**layout, "num_blocks": blocks, "blocks_per_request": per_request,
                            "state_slots": slots}
        result["tokens"] = int(blocks / per_request * length)
        result["concurrency"] = blocks // per_request
    else:
        result["tokens"] = kv_tokens(budget, kv_gpu)
        result["concurrency"] = result["tokens"] // length
    return result


def workload_seqs(ctx: dict[str, Any], memory: dict[str, Any],
                  chosen: int | None = None) -> tuple[int, str]:
    """--max-num-seqs for the typical request (not only the full-length worst case): as many
    typical requests as the KV cache (and, for hybrids, the state blocks) holds at once, capped
    by the engine's default (256 on cards under 70 GiB) and by --max-num-batched-tokens (vLLM
    requires max_num_batched_tokens >= max_num_seqs)."""
    opts = ctx["opts"]
    typical = int(opts["typical_input_tokens"]) + int(opts["typical_output_tokens"])
    cap = min(ENGINE_MAX_NUM_SEQS, int(opts["max_num_batched_tokens"]))
    hybrid = memory["hybrid"]
    if hybrid:
        per = (hybrid["full_groups"] * -(-typical // hybrid["block_size"])
               + hybrid["state_blocks_per_sequence"])
        fit = hybrid["num_blocks"] // per
        what = (f"{hybrid['num_blocks']:,} blocks / ({per} per {typical}-token request: "
                f"attention + {hybrid['state_blocks_per_sequence']} state) = {fit}; state slots "
                f"{hybrid['state_slots']}")
    else:
        fit = memory["tokens"] // typical
        what = f"{memory['tokens']:,} KV tokens / {typical}-token requests = {fit}"
    seqs = max(1, min(cap, fit)) if chosen is None else chosen
    return seqs, (f"{what}; engine cap {cap}: --max-num-seqs {seqs} (full-length "
                  f"{ctx['length']}: {memory['concurrency']})")


def size_max_num_seqs(ctx: dict[str, Any]) -> str:
    """Set ctx["max_num_seqs"] to the largest value whose own plan still holds that many typical
    requests (the sampler pass it profiles shrinks the KV cache as it grows, so the figure is a
    fixed point; the typical requests that fit only fall as it rises: a bisection finds it).
    Returns the reason the plan prints."""
    cap = min(ENGINE_MAX_NUM_SEQS, int(ctx["opts"]["max_num_batched_tokens"]))

    def holds(seqs: int) -> bool:
        ctx["max_num_seqs"] = seqs
        return workload_seqs(ctx, memory_budget(ctx))[0] >= seqs

    low, high = 1, cap
    while low < high:
        middle = (low + high + 1) // 2
        if holds(middle):
            low = middle
        else:
            high = middle - 1
    ctx["max_num_seqs"] = low
    return workload_seqs(ctx, memory_budget(ctx), chosen=low)[1]


def _hybrid_limit_problems(ctx: dict[str, Any], memory: dict[str, Any]) -> list[str]:
    """What the fork refuses at startup for this hybrid plan (hybrid_limits.py): a block above
    --max-num-batched-tokens, --max-num-seqs above the pool's Mamba cache blocks."""
    hybrid = memory["hybrid"]
    if not hybrid or ctx["opts"]["engine"] != "1cat-vllm":
        return []
    auto_block = None
    if ctx["element"] != KV_CACHE_DTYPE_BYTES["auto"]:
        spec = ctx["speculation"]
        auto_block = hybrid_layout_bytes(
            ctx["dims"], ctx["tp"], KV_CACHE_DTYPE_BYTES["auto"],
            spec["num_speculative_tokens"] if spec else 0,
            spec["drafter_attention_layers"] if spec else 0)["block_size"]
    found = [block_problem(hybrid["block_size"], int(ctx["opts"]["max_num_batched_tokens"]),
                           ctx["opts"]["kv_cache_dtype"], auto_block),
             mamba_blocks_problem(ctx["max_num_seqs"], hybrid["num_blocks"])]
    return [problem for problem in found if problem]


def _speculation_summary(ctx: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's `speculation` key: what the engine will speculate and what it costs per GPU."""
    spec = ctx["speculation"]
    if not spec:
        return None
    drafter = {name: t for name, t in ctx["tensors"].items() if name.startswith("mtp.")}
    drafter_bytes = weight_bytes(drafter, ctx["tp"], ctx["dims"]["num_key_value_heads"],
                                 ctx["resident"]["block_scale_factor"])["per_gpu"]
    if spec["drafter_weights"] and not spec["share_io"]:
        drafter_bytes += ctx["weights"]["embeddings_per_gpu"] // 2
    return {**spec, "drafter_weight_bytes_per_gpu": drafter_bytes}


def max_utilization(ctx: dict[str, Any]) -> float:
    """The highest utilization whose headroom still holds the CUDA context, NCCL and graphs."""
    outside = float(ctx["opts"]["cuda_context_gib"]) * GIB
    if ctx["graphs_outside"]:
        outside += float(ctx["opts"]["cuda_graph_gib"]) * GIB
    return max(0.0, math.floor((1 - outside / ctx["card_bytes"]) * 100) / 100)


def _check_hybrid(model_dir: str, dims: dict[str, Any]) -> None:
    """Refuse, with the reason, a hybrid the planner cannot lay out as the engine does."""
    lin = dims.get("linear")
    if lin is None:
        raise UnsupportedModelError(
            f"{model_dir}: a hybrid model ({dims['hybrid']}) that is not a Gated DeltaNet model "
            "of the Qwen3-Next/Qwen3.5 family: 1Cat-vLLM's SM70 recurrent-layer kernels are the "
            "GDN ones (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, flash_qla) and "
            "its README validates only Qwen3.5/3.6/3.8 hybrids on V100; Mamba/Mamba2 state "
            "layouts are not modelled here, so the planner refuses rather than give a wrong "
            "number. Use a supported model, or start the server with a small --max-model-len "
            "and read 'Available KV cache memory' in its log")
    if lin["full_attention_layers"] == 0:
        raise UnsupportedModelError(
            f"{model_dir}: every layer is linear attention (no full-attention layer): vLLM "
            "lays out no paged attention cache for it and the planner does not model that")


def loaded_tensors(tensors: dict[str, Tensor], dims: dict[str, Any],
                   language_only: bool, mtp: bool = False) -> dict[str, Tensor]:
    """The checkpoint tensors the engine loads: Qwen3.5's loader skips the MTP head
    (skip_prefixes=["mtp."], models/qwen3_5.py:950-953), which only an MTP drafter loads
    (qwen3_5_mtp.py load_weights maps mtp.* to its own layers), and --language-model-only
    leaves the vision tower out (config/multimodal.py:312-316: every modality limit 0)."""
    if not dims.get("linear"):
        return tensors
    skipped = (() if mtp else ("mtp.",)) + (("model.visual.", "visual.") if language_only
                                           else ())
    return {name: t for name, t in tensors.items() if not name.startswith(skipped)}


def plan_model(model_dir: str, health: Any = None, **options: Any) -> dict[str, Any]:
    """The whole plan as a JSON-ready dict; raises one of INVALID_INPUT on bad input."""
    unknown = set(options) - set(DEFAULTS) - set(WORKLOAD_DEFAULTS)
    if unknown:
        raise PlanInputError(f"unknown planner option(s): {', '.join(sorted(unknown))}")
    opts = {**DEFAULTS, **WORKLOAD_DEFAULTS,
            **{k: v for k, v in options.items() if v is not None}}
    if not opts["engine_version"]:
        opts["engine_version"] = DEFAULT_ENGINE_VERSION if opts["engine"] == DEFAULT_ENGINE else ""
    _validate(opts)
    topology = health_topology(health)
    info = inspect_model(model_dir)
    dims = info["dims"]
    if dims.get("hybrid"):
        _check_hybrid(model_dir, dims)
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
    cap = dims.get("tokenizer_model_max_length")
    if isinstance(cap, int) and cap < length:
        warnings.append(f"tokenizer_config.json model_max_length {cap} is below --max-model-len "
                        f"{length}: vLLM does not enforce it for generative models (it reads "
                        "the tokenizer cap only for pooling models, config/model.py:1728-1740), "
                        "but the model may not have been trained for that length")
    kv_quantized = info["metadata"]["kv_cache_quantized"]
    if opts["kv_cache_dtype"] == "fp8_e5m2" and kv_quantized:
        problems.append("--kv-cache-dtype fp8_e5m2 is rejected for checkpoints that carry a "
                        "kv_cache_scheme (1Cat-vLLM issue #489): use --kv-cache-dtype auto")

    # Speculative decoding from the flags and environment the server gets (mtp.py).
    facts = speculative.model_facts(load_json(os.path.join(model_dir, "config.json"), True) or {})
    spec_info = speculative.resolve(opts["speculative_config"], opts["engine_env"], facts,
                                    opts["engine"], capability, bool(dims.get("linear")))
    problems.extend(spec_info["problems"])
    warnings.extend(spec_info["warnings"])
    speculation = spec_info["speculation"]

    resident = resident_rule(opts["engine"], str(opts["engine_version"]), info["quant_format"])
    language_only = bool(dims.get("linear")) and bool(dims.get("multimodal")) \
        and opts["engine"] == "1cat-vllm"
    drafter = bool(speculation and speculation["drafter_weights"])
    tensors = loaded_tensors(info["tensors"], dims, language_only, mtp=drafter)
    backend = _attention_backend(opts["engine"], dims["head_dim"], capability)
    ctx: dict[str, Any] = {
        "opts": opts, "dims": dims, "info": info, "tp": tp, "length": length, "util": util,
        "card_bytes": card_bytes, "resident": resident, "speculation": speculation,
        "element": KV_CACHE_DTYPE_BYTES[opts["kv_cache_dtype"]], "kv_quantized": kv_quantized,
        # 1Cat turns the CUDA-graph estimate off for FLASH_ATTN_V100 (config/vllm.py:1451-1456):
        # graphs are captured after the KV cache is allocated, outside the requested share.
        "graphs_outside": opts["engine"] == "1cat-vllm" and backend == "FLASH_ATTN_V100",
        "max_num_seqs": int(opts["max_num_seqs"] or MAX_NUM_SEQS_CAP),
        "tensors": tensors, "language_only": language_only,
        # 1Cat's SM70 TurboMind NVFP4 GEMMs allocate a per-stream workspace (calibration.py).
        "workspace": TURBOMIND_WORKSPACE_BYTES if resident["block_scale_factor"] == 2 else 0,
    }
    weights = ctx["weights"] = loaded_weight_bytes(ctx, tp)
    seqs_reason = f"--max-num-seqs {ctx['max_num_seqs']} (given)"
    if opts["max_num_seqs"] is None:
        seqs_reason = size_max_num_seqs(ctx)
    memory = memory_budget(ctx)
    problems.extend(_hybrid_limit_problems(ctx, memory))
    hybrid = memory["hybrid"]
    if hybrid and max(1, hybrid["state_slots"]) < ctx["max_num_seqs"] <= hybrid["num_blocks"]:
        warnings.append(f"--max-num-seqs {ctx['max_num_seqs']} exceeds the "
                        f"{hybrid['state_slots']} requests whose state blocks fit: "
                        "the scheduler will queue the rest")
    ctx.update(memory=memory, budget=memory["budget"], max_tokens=memory["tokens"],
               concurrency=memory["concurrency"], kv_gpu=memory["kv_gpu"])
    fits = memory["concurrency"] >= 1
    ctx["fits"] = fits
    if memory["headroom"] < memory["outside"]:
        problems.append(_headroom_problem(ctx))
    fit_reason = _fit_reason(ctx)
    suggestions, nothing_fits = _suggestions(ctx)
    caching = prefix_caching(opts["engine"], backend, bool(dims.get("linear")))
    args, env, notes = _serve_args(ctx, topology, capability, backend, warnings, caching["note"])
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
        "max_num_seqs_reason": seqs_reason,
        "hybrid": memory["hybrid"],
        "speculation": _speculation_summary(ctx),
        "calibration": calibration_table(),
        "fits": fits,
        "fit_reason": fit_reason,
        "nothing_fits": nothing_fits,
        "ok": fits and not problems,
        "suggestions": suggestions,
        "serve_args": args,
        "serve_env": env,
        "serve_notes": notes,
        "prefix_caching": caching["enabled"],
        "inputs": {**{k: opts[k] for k in (*DEFAULTS, *WORKLOAD_DEFAULTS)},
                   "max_num_seqs": ctx["max_num_seqs"],
                   # Only the variables the plan reads: the rest of the server's environment
                   # is none of the plan's business (and is not echoed into play output).
                   "engine_env": spec_info["env_read"],
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
            "activation_workspace_bytes": act["workspace"],
            "rotary_cache_bytes": memory["rotary"],
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
    lin = dims.get("linear")
    if lin:
        conv_dim = (2 * lin["linear_num_key_heads"] * lin["linear_key_head_dim"]
                    + lin["linear_num_value_heads"] * lin["linear_value_head_dim"])
        for name, value in (("linear_num_value_heads", lin["linear_num_value_heads"]),
                            ("linear_num_key_heads", lin["linear_num_key_heads"]),
                            ("the GDN conv dimension", conv_dim)):
            if value % tp:
                problems.append(f"{name} {value} is not divisible by --tensor-parallel-size "
                                f"{tp}: vLLM's divide() refuses this split (mamba_utils.py:"
                                "219-241)")
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
    used = (f"{gib(memory['weights'] + memory['rotary'])} weights and buffers + "
            f"{gib(memory['activation']['peak'])} activation "
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
    length = ctx["length"]
    concurrency, max_tokens = ctx["concurrency"], ctx["max_tokens"]
    if ctx["fits"] and concurrency >= FEW_SEQUENCES:
        return tips, False
    fp8_allowed = ctx["element"] == 2 and not ctx["kv_quantized"]
    # A hybrid's fp8 block is twice as many tokens: above --max-num-batched-tokens the fork
    # refuses it (hybrid_limits.py), so fp8 comes with the step that holds the block.
    fp8_batched = _fp8_batched_tokens(ctx) if fp8_allowed else None
    best_util = max(ctx["util"], max_utilization(ctx))
    best = memory_budget(ctx, util=best_util, element=1 if fp8_allowed else ctx["element"],
                         batched_tokens=fp8_batched)
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
        doubled = memory_budget(ctx, element=1, batched_tokens=fp8_batched)["tokens"]
        step = "" if fp8_batched is None else (
            f" with --max-num-batched-tokens {fp8_batched} (the fp8 hybrid block is "
            f"{fp8_batched:,} tokens and align mode needs the step to hold it)")
        tips.append(f"--kv-cache-dtype fp8_e5m2{step} halves the KV cache per token: "
                    f"{doubled // length} sequence(s) of {length} tokens ({doubled} tokens)")
    elif ctx["kv_quantized"]:
        tips.append("--kv-cache-dtype fp8_e5m2 is not an option: the checkpoint carries a "
                    "kv_cache_scheme (1Cat-vLLM issue #489)")
    if not ctx["fits"]:
        tips.extend(_nvfp4_tip(ctx))
    return tips, False


def _fp8_batched_tokens(ctx: dict[str, Any]) -> int | None:
    """For a hybrid on the fork, the --max-num-batched-tokens an fp8_e5m2 KV cache needs when its
    block (twice the tokens of a float16 one) exceeds the current step; None when it fits."""
    if not ctx["dims"].get("linear") or ctx["opts"]["engine"] != "1cat-vllm":
        return None
    spec = ctx["speculation"]
    block = hybrid_layout_bytes(ctx["dims"], ctx["tp"], KV_CACHE_DTYPE_BYTES["fp8_e5m2"],
                                spec["num_speculative_tokens"] if spec else 0,
                                spec["drafter_attention_layers"] if spec else 0)["block_size"]
    return block if block > int(ctx["opts"]["max_num_batched_tokens"]) else None


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
        if wide["hybrid"] and ctx["opts"]["engine"] == "1cat-vllm" and \
                wide["hybrid"]["block_size"] > int(opts["max_num_batched_tokens"]):
            continue  # the fork would refuse that block (hybrid_limits.py)
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
                backend: str | None, warnings: list[str],
                caching_note: str) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Engine flags (flag -> value; True means a bare flag), environment, and why (the prefix
    caching note is prefix_caching()'s, computed once by the caller)."""
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
    if opts["speculative_config"]:
        args["--speculative-config"] = json.dumps(opts["speculative_config"],
                                                  separators=(",", ":"))
    if ctx["language_only"]:
        args["--language-model-only"] = True
        notes.append("--language-model-only: a text-only server of a multimodal Qwen3.5 "
                     "checkpoint; the vision tower is neither loaded nor profiled (1Cat-vLLM "
                     "README: 'For text-only serving ... use --language-model-only')")
    if dims.get("linear"):
        hybrid = ctx["memory"]["hybrid"]
        notes.append(
            f"hybrid (Gated DeltaNet) layout: 1Cat on sm_70 turns prefix caching on with "
            f"mamba_cache_mode align for it (engine/arg_utils.py:1769-1778); attention blocks "
            f"grow to {hybrid['block_size']} tokens so one page holds a layer's state "
            "(platforms/interface.py:641-690): no flag needed")
    spec = ctx["speculation"]
    if spec and dims.get("linear"):
        hybrid = ctx["memory"]["hybrid"]
        n = spec["num_speculative_tokens"]
        drafter = (f"; the MTP drafter adds {spec['drafter_attention_layers']} full-attention "
                   f"layer(s) to the KV cache and loads the checkpoint's mtp.* weights "
                   "(qwen3_5_mtp.py:155-172)" if spec["drafter_weights"] else "")
        notes.append(
            f"speculative decoding: {spec['method'] or 'method unset'} with {n} tokens from "
            f"{spec['source']}: the conv state keeps kernel - 1 + {n} positions "
            f"(mamba_utils.py:220-241) and each request holds 2 + {n} = "
            f"{hybrid['state_blocks_per_sequence'] // hybrid['linear_groups']} state blocks per "
            f"linear group (kv_cache_interface.py:588-590){drafter}")
    env: dict[str, str] = {}
    if opts["engine"] == "1cat-vllm":
        # The switches the plan read go to the server too, so the printed command is the one
        # planned (the role's vllm_serve_env carries the same values).
        env.update(speculative.check_env({k: v for k, v in opts["engine_env"].items()
                                          if k in (*speculative.ENABLE_ENV,
                                                   *speculative.DISABLE_ENV,
                                                   speculative.SHARE_IO_ENV)}))
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
    if caching_note:
        notes.append(caching_note)
    return args, env, notes


def prefix_caching(engine: str, backend: str | None, hybrid: bool) -> dict[str, Any]:
    """Whether the engine keeps a prompt's KV blocks for the next request that shares the prefix
    (what the gateway's affinity routing pays off on), and why: no flag is ever passed."""
    if engine == "1cat-vllm" and not hybrid and backend == "FLASH_ATTN_V100":
        return {"enabled": True, "note": (
            "prefix caching: on, no flag: 1Cat-vLLM turns it on for every model that supports "
            "it (engine/arg_utils.py:2593, 2623-2624) and FLASH_ATTN_V100 attends over a cached "
            "prefix (v1/attention/backends/flash_attn_v100.py:1598 _has_prefix_context); "
            "onecat_gateway_balance: affinity keeps a conversation on the node that holds it")}
    if engine == "1cat-vllm":
        # Hybrids: the hybrid note says it (on, mamba_cache_mode align); other backends: the
        # fork's default still applies, its V100 path is what was read.
        return {"enabled": True, "note": "" if hybrid else (
            f"prefix caching: on by the fork's default (engine/arg_utils.py:2623-2624), with "
            f"{backend or 'the default attention backend'}: only FLASH_ATTN_V100's cached-prefix "
            "path was read")}
    return {"enabled": True, "note": (
        "prefix caching: upstream vLLM turns it on by default, but on sm_70 it is an open bug "
        "(vllm #13738, 'V100 may can not support enable-prefix-caching'): if answers go wrong, "
        "add --no-enable-prefix-caching through vllm_serve_extra_args")}


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
