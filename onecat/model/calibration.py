"""The planner's constants that are estimates or read from engine code, with their source.

Stdlib only: ships to nodes as ``ansible.module_utils.onecat.model.calibration``.

Status "estimated": nobody has fitted the value to a real V100 log yet. Run
benchmarks/calibrate_from_log.py on a VLLM_LOGGING_LEVEL=DEBUG start-up log of the pinned
engine to get measured values; only then change the status to "calibrated" (and commit the
log next to the change). Status "from code": the value is read from the engine's source.
"""

from __future__ import annotations

from typing import Any, NamedTuple

MIB = 1024**2


class Constant(NamedTuple):
    value: float
    unit: str
    status: str  # "estimated" or "from code" ("calibrated" once a real V100 log backs it)
    source: str


TABLE: dict[str, Constant] = {
    # One forward of --max-num-batched-tokens tokens, float16 elements per token.
    "activation_hidden_copies": Constant(
        4, "x hidden_size", "estimated",
        "hidden states, residual, normed copy, layer output (tensor-by-tensor estimate)"),
    "activation_intermediate_copies": Constant(
        4, "x intermediate_size / TP", "estimated",
        "MLP gate_up output (2x), its activation (1x), one allocator spare (1x)"),
    # The profile's sampler pass (_dummy_sampler_run with top-k/top-p).
    "sampler_bytes_per_logit": Constant(
        22, "bytes per logit", "estimated",
        "float16 logits 2 + float32 logits 4 + sorted values 4 + int64 indices 8 + probs 4"),
    # CUDA context + cuBLAS handles + NCCL communicators (TP2), before vLLM's init snapshot.
    "cuda_context_nccl_gib": Constant(
        0.6, "GiB per GPU", "estimated",
        "no V100 log yet; calibrate from 'worker init memory snapshot: ... non_torch_memory'"),
    # Workspaces created during the profile run (1Cat's Flash-V100 shared workspace is
    # 85 MiB: docs/design/sm70_fp8_long_prefill_exact_dense.md:92; cuBLAS workspaces).
    "non_torch_increase_gib": Constant(
        0.15, "GiB per GPU", "estimated",
        "calibrate from 'non-torch forward increase memory' (utils/mem_utils.py:177-187)"),
    # FLASH_ATTN_V100 decode graphs: 0.18-0.26 GiB per rank in 1Cat's own logs
    # (docs/design/sm70_v100_migration_control.md:14048).
    "cuda_graph_gib": Constant(
        0.3, "GiB per GPU", "estimated",
        "calibrate from 'Graph capturing finished in N secs, took X GiB'"),
    # TurboMind's per-stream GEMM workspace (csrc/sm70_turbomind/ops/awq_sm70_gemm.cu:1365-1415,
    # get_workspace): barriers kBarriersSize = 1 << 20 and partials kPartialsSize = 32 << 20
    # (lmdeploy/src/turbomind/kernels/gemm/gemm.h:16-17), tensormaps 8192 x 128 bytes, flags one
    # int32. torch tensors created at the first GEMM on a stream: inside the profiled peak.
    "turbomind_workspace_bytes": Constant(
        (1 << 20) + (32 << 20) + 8192 * 128 + 4, "bytes per GPU per stream", "from code",
        "awq_sm70_gemm.cu:1365-1415 + gemm.h:16-17 at 1Cat-vLLM ae13773a"),
}


def value(name: str) -> float:
    return TABLE[name].value


def as_dict() -> dict[str, dict[str, Any]]:
    """The table as JSON-ready data (for plans and for the calibration script)."""
    return {name: constant._asdict() for name, constant in TABLE.items()}
