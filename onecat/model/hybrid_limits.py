"""What 1Cat-vLLM refuses at startup for a Gated DeltaNet hybrid, as the plan's problems.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.hybrid_limits``.
Line numbers are 1CatAI/1Cat-vLLM at ae13773a (see docs/plan.md). Both checks run after the
weights are loaded and the memory profiled, so a server that breaks them costs a model load and
then crash-loops; the plan names the two numbers and the fix before anything starts.

1. Block size vs --max-num-batched-tokens. On sm_70 `vllm serve` turns prefix caching on for a
   linear-attention model with mamba_cache_mode "align" (engine/arg_utils.py:1769-1778). The
   attention block then grows until one page holds a layer's state (platforms/interface.py:
   641-690), and VllmConfig.validate_block_size asserts, in align mode, ``block_size <=
   max_num_batched_tokens`` (config/vllm.py:2607-2614), called once the KV cache is sized
   (v1/engine/core.py:289). fp8_e5m2 halves the attention page per token, so the same state
   needs twice the tokens per block: Qwen3-Next at TP2 has a 1,056-token block with float16 KV
   and 2,096 with fp8_e5m2, above the 2048 default.
2. --max-num-seqs vs the pool's blocks. With full CUDA graphs for decode (vLLM's default
   FULL_AND_PIECEWISE, config/vllm.py:275, kept for decode because FLASH_ATTN_V100 and GDN
   support uniform batches, v1/attention/backends/flash_attn_v100.py:2459, gdn_attn.py:617),
   each decode sequence needs one Mamba cache block and the engine raises "max_num_seqs (N)
   exceeds available Mamba cache blocks (M)" when N > M (config/compilation.py:1455-1477, from
   gpu_model_runner.py:11644 after the KV cache is allocated). --enforce-eager avoids the check.
"""

from __future__ import annotations


def block_problem(block: int, batched_tokens: int, kv_cache_dtype: str,
                  auto_block: int | None) -> str | None:
    """The align-mode refusal of a hybrid block above --max-num-batched-tokens, or None.

    ``auto_block`` is the block with float16 KV, offered as the other fix under fp8_e5m2 when it
    fits the step."""
    if block <= batched_tokens:
        return None
    other = ""
    if kv_cache_dtype != "auto" and auto_block is not None and auto_block <= batched_tokens:
        other = (f", or use --kv-cache-dtype auto (float16 KV: a {auto_block:,}-token block; "
                 f"{kv_cache_dtype} halves the attention page per token, so one page needs "
                 "twice the tokens to hold a layer's state)")
    return (f"--max-num-batched-tokens {batched_tokens} is below the {block:,}-token hybrid "
            "block that mamba_cache_mode align needs: the engine asserts block_size <= "
            "max_num_batched_tokens at startup, after loading the weights (1Cat-vLLM "
            "config/vllm.py:2607-2614, v1/engine/core.py:289; block from "
            "platforms/interface.py:641-690): raise --max-num-batched-tokens to "
            f"{block} or more{other}")


def mamba_blocks_problem(max_num_seqs: int, num_blocks: int) -> str | None:
    """The startup refusal of --max-num-seqs above the pool's Mamba cache blocks, or None.

    Lowering --max-num-seqs shrinks the profiled sampler pass, so the pool only grows: the
    block count found with the user's value is a safe ceiling for the fix."""
    if num_blocks < 1 or max_num_seqs <= num_blocks:
        return None
    return (f"--max-num-seqs {max_num_seqs} exceeds the {num_blocks:,} Mamba cache blocks this "
            "plan leaves: the engine raises 'max_num_seqs exceeds available Mamba cache "
            "blocks' when it captures its full decode CUDA graphs, after loading the weights "
            "(1Cat-vLLM config/compilation.py:1455-1477): use --max-num-seqs "
            f"{num_blocks} or less (a smaller sampler pass only adds blocks)")
