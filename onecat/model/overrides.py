"""The planner's inputs as the server will really get them: the user's engine flags applied.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.overrides``.
The serve role starts `vllm serve` with the plan's flags merged with ``vllm_serve_args``
(overrides win; null or false removes a flag) and ``vllm_serve_extra_args`` appended (vLLM's
parser keeps the last occurrence), see onecat/serve/flags.py. A plan made without them plans a
server nobody starts: a recipe's ``max_num_seqs: 256`` or ``kv_cache_dtype: fp8_e5m2`` must be
planned, and refused when the engine would refuse it.
"""

from __future__ import annotations

from typing import Any

from ..serve.flags import argv_pairs, flag_name

# Engine flag -> planner option, for every flag the plan's arithmetic depends on.
PLANNED_FLAGS: dict[str, str] = {
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--speculative-config": "speculative_config",
    "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--tensor-parallel-size": "tensor_parallel_size",
}
# What the engine uses when the flag is removed (an override of null/false). The other planned
# flags (context length, utilization, TP) keep the role's own value: the role always passes them.
ENGINE_DEFAULTS: dict[str, Any] = {
    "max_num_seqs": 256,  # on cards under 70 GiB, engine/arg_utils.py:2546-2554
    "max_num_batched_tokens": 2048,  # idem
    "kv_cache_dtype": "auto",
    "speculative_config": "",  # none
}


def effective_options(args: dict[str, Any] | None,
                      extra_args: list[str] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Planner options the user's flags set, and for each where it came from.

    ``args`` is vllm_serve_args ({flag or option name: value}); ``extra_args`` is
    vllm_serve_extra_args (argv strings, applied after ``args`` as vLLM's parser does)."""
    options: dict[str, Any] = {}
    sources: dict[str, str] = {}
    items: list[tuple[str, Any, str]] = []
    for key, value in (args or {}).items():
        items.append((flag_name(key), value, f"vllm_serve_args {key}"))
    # A flag with no value (followed by another flag, or last) is a bare flag: True.
    for name, value in argv_pairs([str(item) for item in (extra_args or [])]):
        items.append((name, True if value is None else value, f"vllm_serve_extra_args {name}"))
    for name, value, source in items:
        option = PLANNED_FLAGS.get(name)
        if option is None:
            continue
        if value is None or value is False:
            if option not in ENGINE_DEFAULTS:
                continue
            value = ENGINE_DEFAULTS[option]
            source += " (removed: the engine's default)"
        options[option] = value
        sources[option] = source
    return options, sources
