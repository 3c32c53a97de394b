"""Speculative decoding (MTP) as 1Cat-vLLM runs it on a Gated DeltaNet hybrid: detected, planned.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.mtp``.
Line numbers are 1CatAI/1Cat-vLLM at ae13773a (see docs/plan.md).

Where speculation comes from:

- ``--speculative-config`` (a JSON object): ``method`` and ``num_speculative_tokens``; for an MTP
  method an unset count is the checkpoint's ``mtp_num_hidden_layers`` (n_predict,
  config/speculative.py:828-834), and a count above it must be a multiple of it (836-842);
- the fork's opt-in: ``VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1`` (or the older
  ``VLLM_1CAT_ENABLE_QWEN35_MTP_DEFAULTS=1``) makes ``vllm serve`` on compute capability 7.x
  add ``{"method": "mtp", "num_speculative_tokens": 4}`` for a dense checkpoint with native MTP
  layers and no speculative config of its own (engine/arg_utils.py:1740-1799); either
  ``VLLM_1CAT_DISABLE_*_MTP_DEFAULTS=1`` skips that whole function (1746-1750), the hybrid
  prefix-caching/align defaults included.

What n speculative tokens cost a hybrid (what plan.hybrid_layout_bytes applies):

- the conv state keeps kernel - 1 + n positions (gated_delta_net_state_shape,
  model_executor/layers/mamba/mamba_utils.py:220-241; qwen3_5.py:968-986);
- each request holds 2 + n state blocks per linear-layer group in align mode
  (MambaSpec.num_speculative_blocks, layers/mamba/abstract.py:55-58;
  max_memory_usage_bytes, v1/kv_cache_interface.py:588-590; the first prefill allocates
  1 + n, v1/core/single_type_kv_cache_manager.py:1027-1029);
- an MTP drafter adds its ``mtp_num_hidden_layers`` decoder layers, full attention
  (qwen3_5_mtp.py:165-172), to the paged KV cache's attention layers, and loads the
  checkpoint's ``mtp.*`` tensors that the target skips (qwen3_5.py:950-953); its embedding and
  lm_head are the target's unless ``VLLM_QWEN35_MTP_SHARE_IO_WEIGHTS=0`` (qwen3_5_mtp.py:483-485,
  515-528);
- the profile run's rejection-sampler pass covers (1 + n) logits rows per sequence
  (v1/worker/gpu_model_runner.py:10791-10822).
"""

from __future__ import annotations

import json
from typing import Any

# The fork's MTP model types for the Qwen hybrids ("mtp" is resolved to them,
# config/speculative.py:484-524).
MTP_METHODS = ("mtp", "qwen3_5_mtp", "qwen3_next_mtp")
ENABLE_ENV = ("VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS", "VLLM_1CAT_ENABLE_QWEN35_MTP_DEFAULTS")
DISABLE_ENV = ("VLLM_1CAT_DISABLE_SM70_MTP_DEFAULTS", "VLLM_1CAT_DISABLE_QWEN35_MTP_DEFAULTS")
SHARE_IO_ENV = "VLLM_QWEN35_MTP_SHARE_IO_WEIGHTS"
# What the fork's opt-in sets (engine/arg_utils.py:1791-1795).
AUTO_MTP_TOKENS = 4
# No drafter proposes more; beyond it the plan's arithmetic is a lie, not a plan.
MAX_SPECULATIVE_TOKENS = 64
# Config keys whose positive value makes the model a mixture of experts to the engine
# (ModelArchConfigConvertor.get_num_experts, transformers_utils/model_arch_config_convertor.py:
# 113-130): the fork's opt-in MTP skips MoE models (arg_utils.py:1789).
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")


def parse_speculative_config(value: Any) -> dict[str, Any] | None:
    """The engine's --speculative-config (a JSON object, as text or already parsed), checked;
    ValueError with the flag's name when it is not one."""
    if value is None or value == "":
        return None
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise ValueError(f"--speculative-config {value[:80]!r}: not JSON; use e.g. "
                             "'{\"method\": \"mtp\", \"num_speculative_tokens\": 4}'") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"--speculative-config {str(value)[:80]!r}: not a JSON object; use e.g. "
                         "'{\"method\": \"mtp\", \"num_speculative_tokens\": 4}'")
    method = parsed.get("method")
    if method is not None and not isinstance(method, str):
        raise ValueError(f"--speculative-config method {method!r}: not a name such as mtp")
    tokens = parsed.get("num_speculative_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or not 1 <= tokens <= MAX_SPECULATIVE_TOKENS):
        raise ValueError(f"--speculative-config num_speculative_tokens {tokens!r}: must be an "
                         f"integer between 1 and {MAX_SPECULATIVE_TOKENS} (the engine requires "
                         "> 0, config/speculative.py:87)")
    try:
        json.dumps(parsed)
    except (TypeError, ValueError):
        raise ValueError("--speculative-config: values must be JSON (strings, numbers, "
                         "booleans, lists, objects)") from None
    return parsed


def check_env(value: Any) -> dict[str, str]:
    """The engine's environment as {name: text}; ValueError when it is not such a mapping."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("engine environment: expected a mapping of variable names to values "
                         "(NAME=VALUE)")
    env: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or "=" in key or not key.isprintable():
            raise ValueError(f"engine environment: {key!r} is not a variable name")
        if isinstance(item, (dict, list)) or item is None:
            raise ValueError(f"engine environment: {key}={item!r} is not a scalar value")
        # As the role writes it into the unit (Jinja's `key ~ '=' ~ value`): True is "True".
        env[key] = str(item)
    return env


def _int_switch(env: dict[str, str], name: str, problems: list[str]) -> bool:
    """An envs.py switch read as the fork reads it: bool(int(value)) (envs.py:1482-1496)."""
    if name not in env:
        return False
    try:
        return bool(int(env[name].strip()))
    except ValueError:
        problems.append(f"{name}={env[name]!r}: the engine reads it as bool(int(value)) "
                        "(vllm/envs.py:1482-1496) and refuses to start on anything but an "
                        f"integer: use {name}=1 or {name}=0")
        return False


def model_facts(config: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's native MTP layers and whether the engine sees a mixture of experts."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = text.get("mtp_num_hidden_layers")
    if layers is None:
        layers = config.get("mtp_num_hidden_layers")
    mtp_layers = layers if type(layers) is int and 0 < layers <= 64 else 0
    experts = next((text[key] for key in EXPERT_KEYS if text.get(key)), 0)
    if isinstance(experts, list):
        experts = experts[0] if experts else 0
    moe = type(experts) is int and experts > 0
    return {"mtp_layers": mtp_layers, "moe": moe}


def resolve(spec: dict[str, Any] | None, env: dict[str, str], facts: dict[str, Any],
            engine: str, capability: int, hybrid: bool) -> dict[str, Any]:
    """The speculation the engine will run, from the flags and environment the server gets.

    Returns {"speculation": dict or None, "problems": [...], "warnings": [...],
    "env_read": {name: value}}. ``speculation`` has method, num_speculative_tokens,
    drafter_attention_layers, drafter_weights ("mtp.*" or None), share_io, source, modelled.
    """
    problems: list[str] = []
    warnings: list[str] = []
    onecat = engine == "1cat-vllm"
    read = {name: env[name] for name in (*ENABLE_ENV, *DISABLE_ENV, SHARE_IO_ENV)
            if name in env} if onecat else {}
    enabled = any([_int_switch(env, name, problems) for name in ENABLE_ENV]) if onecat else False
    disabled = any([_int_switch(env, name, problems) for name in DISABLE_ENV]) if onecat \
        else False
    if not onecat and any(name in env for name in (*ENABLE_ENV, *DISABLE_ENV)):
        warnings.append("VLLM_1CAT_*_MTP_DEFAULTS are 1Cat-vLLM's switches: upstream vLLM "
                        "ignores them")
    if disabled and hybrid:
        warnings.append(
            "VLLM_1CAT_DISABLE_*_MTP_DEFAULTS=1 also skips the fork's hybrid serving defaults "
            "(prefix caching with mamba_cache_mode align, engine/arg_utils.py:1746-1750, "
            "1769-1778): the plan still lays the state out for align mode, which holds more")
    mtp_layers = int(facts["mtp_layers"])
    source = ""
    if spec is None:
        # The fork's opt-in adds MTP4 only on cc 7.x, for a dense checkpoint with native MTP
        # layers (engine/arg_utils.py:1757-1761, 1780-1799).
        if not (enabled and not disabled and capability // 10 == 7):
            return {"speculation": None, "problems": problems, "warnings": warnings,
                    "env_read": read}
        if not mtp_layers or facts["moe"]:
            why = "has no MTP layers (mtp_num_hidden_layers)" if not mtp_layers else \
                "is a mixture of experts"
            warnings.append(f"the MTP opt-in is set but the checkpoint {why}: the fork adds no "
                            "speculative decoding for it (engine/arg_utils.py:1786-1790)")
            return {"speculation": None, "problems": problems, "warnings": warnings,
                    "env_read": read}
        spec = {"method": "mtp", "num_speculative_tokens": AUTO_MTP_TOKENS}
        name = next(name for name in ENABLE_ENV if name in env and _int_switch(env, name, []))
        source = f"{name}={env[name]} (the fork's opt-in MTP4, engine/arg_utils.py:1780-1799)"
    else:
        source = "--speculative-config"
    method = str(spec.get("method") or "")
    tokens = spec.get("num_speculative_tokens")
    mtp = method in MTP_METHODS
    if mtp:
        if not mtp_layers:
            problems.append(f"--speculative-config method {method}: the checkpoint has no MTP "
                            "layers (config.json mtp_num_hidden_layers), so the engine has no "
                            "drafter to load: drop the speculative config or use a checkpoint "
                            "with its MTP head")
            return {"speculation": None, "problems": problems, "warnings": warnings,
                    "env_read": read}
        if tokens is None:
            tokens = mtp_layers  # n_predict (config/speculative.py:828-834)
        elif tokens > mtp_layers and tokens % mtp_layers:
            problems.append(f"--speculative-config num_speculative_tokens {tokens} must be "
                            f"divisible by the checkpoint's {mtp_layers} MTP layers "
                            "(config/speculative.py:836-842)")
    elif tokens is None:
        problems.append(f"--speculative-config method {method or '(none)'}: set "
                        "num_speculative_tokens (the engine needs the count for this method)")
        return {"speculation": None, "problems": problems, "warnings": warnings,
                "env_read": read}
    modelled = hybrid and (mtp or method in ("ngram", "suffix"))
    if not hybrid:
        warnings.append(f"speculative decoding ({method or 'method unset'}, "
                        f"{tokens} tokens) is planned only for Gated DeltaNet hybrids: the "
                        "drafter's weights, KV cache and verification batch are not counted "
                        "for this model")
    elif not modelled:
        warnings.append(f"speculative method {method or '(unset)'}: its state widening and "
                        f"{tokens} speculative state blocks are planned, but the drafter "
                        "model's own weights and KV cache are not counted")
    share_io = not (mtp and read.get(SHARE_IO_ENV, "1").strip() == "0")
    speculation = {
        "method": method, "num_speculative_tokens": int(tokens), "source": source,
        "drafter_attention_layers": mtp_layers if (mtp and hybrid) else 0,
        "drafter_weights": "mtp.*" if (mtp and hybrid) else None,
        "share_io": share_io, "modelled": modelled,
    }
    return {"speculation": speculation, "problems": problems, "warnings": warnings,
            "env_read": read}
