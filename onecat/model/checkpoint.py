"""Inspect a model directory: architecture, dimensions and the real quantization format.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.checkpoint``.

The format is read twice, from the metadata (config.json ``quantization_config``,
hf_quant_config.json, ``torch_dtype``) and from the tensors themselves (names and
dtypes in the safetensors headers). The tensors decide ``quant_format``; any
disagreement is a problem, because the engine trusts the metadata and a wrong
one loads packed integers as the wrong thing (garbage output or a load failure).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from typing import Any

from .safetensors import CheckpointError, Tensor, read_checkpoint, read_json

QUANT_FORMATS = (
    "nvfp4-compressed-tensors", "nvfp4-modelopt", "awq", "gptq", "fp8", "fp16", "bf16", "unknown",
)
NVFP4_FORMATS = ("nvfp4-compressed-tensors", "nvfp4-modelopt")
FLOAT_FORMATS = {"F16": "fp16", "BF16": "bf16"}

# Linear layers vLLM splits along their output dimension under tensor parallel.
COLUMN_PARALLEL = frozenset({
    "q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "W_pack",
    "gate_proj", "up_proj", "gate_up_proj", "w1", "w3", "fc1", "c_fc", "dense_h_to_4h",
    "in_proj", "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
})
# Linear layers vLLM splits along their input dimension (their bias stays whole on every rank).
ROW_PARALLEL = frozenset({
    "o_proj", "down_proj", "dense", "out_proj", "w2", "fc2", "c_proj", "dense_4h_to_h", "wo",
})
# Embedding and output head: VocabParallelEmbedding / ParallelLMHead split them by vocab rows.
VOCAB_PARALLEL = frozenset({
    "embed_tokens", "lm_head", "wte", "word_embeddings", "embed_in", "embed_out", "tok_embeddings",
})
LINEAR_LEAVES = COLUMN_PARALLEL | ROW_PARALLEL

SEED_NVFP4_PROBLEM = (
    "config.json quantization_config says quant_method 'nvfp4' (the seed article's example with "
    "block_shape/group_size 128): that is not a real checkpoint format and vLLM refuses it "
    "('Unknown quantization method: nvfp4'). A real NVFP4 checkpoint says either quant_method "
    "'compressed-tensors' with format 'nvfp4-pack-quantized' (weights num_bits 4, type float, "
    "strategy tensor_group, group_size 16; tensors weight_packed/weight_scale/"
    "weight_global_scale) or comes from ModelOpt with hf_quant_config.json "
    "{\"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16}} (tensors weight/"
    "weight_scale/weight_scale_2/input_scale): fetch the checkpoint's real config"
)


def load_json(path: str, required: bool) -> dict[str, Any] | None:
    """A JSON object from disk; None when optional and absent; CheckpointError otherwise."""
    if not os.path.lexists(path):
        if required:
            raise CheckpointError(
                f"{os.path.dirname(path) or '.'}: no {os.path.basename(path)} "
                "(is this a Hugging Face model directory?)"
            )
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return data


# No real model dimension (layers, heads, hidden size) comes near this; larger values are
# corrupt configs, and would overflow the planner's float arithmetic.
MAX_DIMENSION = 2**31 - 1


def _dimension(value: Any) -> bool:
    return type(value) is int and 0 < value <= MAX_DIMENSION


def _object(value: Any) -> dict[str, Any]:
    """A nested config object, or {} when it is absent or not an object (then: unknown)."""
    return value if isinstance(value, dict) else {}


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def model_dims(config: dict[str, Any], path: str) -> dict[str, Any]:
    """The dimensions that size the KV cache, from the text part of the config."""
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(cfg, "num_attention_heads", "n_head")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    missing = [
        key for key, value in
        (("num_hidden_layers", layers), ("num_attention_heads", heads), ("hidden_size", hidden))
        if value is None
    ]
    if missing:
        raise CheckpointError(f"{path}: lacks {', '.join(missing)}: cannot size the KV cache")
    for key, value in (("num_hidden_layers", layers), ("num_attention_heads", heads),
                       ("hidden_size", hidden)):
        if not _dimension(value):
            raise CheckpointError(f"{path}: {key} {value!r} is not a positive integer (at most "
                                  f"{MAX_DIMENSION}): fix config.json")
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    if not _dimension(kv_heads):
        raise CheckpointError(f"{path}: num_key_value_heads {kv_heads!r} is not a positive "
                              f"integer (at most {MAX_DIMENSION}): fix config.json")
    # head_dim: the config's own value when it sets one (Qwen3, Gemma: not hidden/heads).
    explicit = _dimension(cfg.get("head_dim"))
    head_dim = cfg["head_dim"] if explicit else hidden // heads
    layer_types = _layer_types(config, cfg, layers, path)
    if layer_types is not None:
        # Linear-attention (Gated DeltaNet, Mamba) layers hold a fixed state, not a KV cache.
        kv_layers = sum(1 for kind in layer_types if not _is_recurrent(kind))
    else:
        kv_layers = layers
    limit, limit_source = max_len_limit(config, cfg)
    hybrid = hybrid_layout(config, cfg, layer_types)
    return {
        "num_hidden_layers": layers,
        "kv_layers": kv_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads),
        "head_dim": int(head_dim),
        "head_dim_explicit": explicit,
        "hidden_size": hidden,
        "intermediate_size": cfg.get("intermediate_size"),
        "vocab_size": cfg.get("vocab_size") or config.get("vocab_size"),
        "max_position_embeddings": _first(cfg, "max_position_embeddings", "n_positions"),
        "max_model_len_limit": limit,
        "max_model_len_limit_source": limit_source,
        "hybrid": hybrid,
        "multimodal": isinstance(config.get("vision_config"), dict),
        "linear": gdn_dims(config, cfg, layer_types, path) if hybrid else None,
        "rope": rope_cache_dims(cfg, int(head_dim)),
        "tie_word_embeddings": bool(
            _first(cfg, "tie_word_embeddings") or config.get("tie_word_embeddings")
        ),
    }


# Model types whose layers keep a per-request recurrent state (Mamba, Gated DeltaNet, linear
# attention) outside vLLM's paged KV cache.
RECURRENT_MODEL_TYPES = frozenset({
    "mamba", "mamba2", "falcon_mamba", "jamba", "zamba2", "bamba", "nemotron_h",
    "granitemoehybrid", "falcon_h1", "qwen3_next", "minimax_text_01", "lfm2",
})


def _is_recurrent(kind: Any) -> bool:
    text = str(kind).lower()
    return "linear" in text or "mamba" in text or "recurrent" in text or "deltanet" in text


def hybrid_layout(config: dict[str, Any], cfg: dict[str, Any],
                  layer_types: list[str] | None = None) -> str | None:
    """Why this model keeps per-request state outside the paged KV cache, or None."""
    if layer_types is None:
        layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        recurrent = [kind for kind in layer_types if _is_recurrent(kind)]
        if recurrent:
            return (f"layer_types has {len(recurrent)} of {len(layer_types)} layers of type "
                    f"{sorted({str(kind) for kind in recurrent})[0]!r}")
    block_types = cfg.get("layers_block_type")
    if isinstance(block_types, list) and any(_is_recurrent(kind) for kind in block_types):
        return "layers_block_type lists mamba layers"
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        return f"hybrid_override_pattern {pattern[:24]!r} has mamba (M) layers"
    if isinstance(cfg.get("linear_attn_config"), dict):
        return "config has a linear_attn_config"
    for source in (config, cfg):
        model_type = str(source.get("model_type") or "").lower()
        if model_type in RECURRENT_MODEL_TYPES:
            return f"model_type {model_type!r} is a hybrid/recurrent architecture"
    return None


# Gated DeltaNet hybrids the engine plans as hybrid KV-cache groups: Qwen3-Next and the
# Qwen3.5 family (Qwen3.5/3.6/3.8 share model_type qwen3_5). Their config classes:
# vllm/transformers_utils/configs/qwen3_5.py:42-116, qwen3_next.py:186-270 (1Cat-vLLM ae13773a).
GDN_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                             "qwen3_5_moe_text"})
# The config classes' defaults (configs/qwen3_5.py:60-64, qwen3_next.py:204-208).
GDN_DEFAULTS: dict[str, int] = {"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                                "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                                "linear_num_value_heads": 32}
STATE_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "half": 2, "float": 4}


def _model_type(config: dict[str, Any], cfg: dict[str, Any]) -> str:
    return str(cfg.get("model_type") or config.get("model_type") or "").lower()


def _layer_types(config: dict[str, Any], cfg: dict[str, Any], layers: int,
                 path: str) -> list[str] | None:
    """Each layer's type: the config's layer_types, or for Qwen3.5/Qwen3-Next the list their
    config classes derive from full_attention_interval (default 4: every 4th layer is full
    attention, configs/qwen3_5.py:86-93, qwen3_next.py:249-255)."""
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        return [str(kind) for kind in layer_types] if len(layer_types) == layers else None
    if _model_type(config, cfg) not in GDN_MODEL_TYPES:
        return None
    interval = cfg.get("full_attention_interval", 4)
    if not _dimension(interval):
        raise CheckpointError(f"{path}: full_attention_interval {interval!r} is not a positive "
                              "integer: fix config.json (Qwen3.5 uses 4)")
    return ["linear_attention" if (i + 1) % interval else "full_attention"
            for i in range(layers)]


def gdn_dims(config: dict[str, Any], cfg: dict[str, Any], layer_types: list[str] | None,
             path: str) -> dict[str, Any] | None:
    """The Gated DeltaNet state dimensions of a Qwen3.5/Qwen3-Next hybrid, or None when the
    hybrid is of another kind (Mamba, Mamba2, other linear attention)."""
    if _model_type(config, cfg) not in GDN_MODEL_TYPES or layer_types is None:
        return None
    dims: dict[str, Any] = {}
    defaulted = []
    for key, default in GDN_DEFAULTS.items():
        value = cfg.get(key)
        if value is None:
            value = default
            defaulted.append(key)
        if not _dimension(value):
            raise CheckpointError(f"{path}: {key} {value!r} is not a positive integer (at most "
                                  f"{MAX_DIMENSION}): fix config.json")
        dims[key] = value
    ssm_dtype = cfg.get("mamba_ssm_dtype")
    # Unset: 1Cat keeps the GDN recurrent state in float32 under "auto"
    # (model_executor/layers/mamba/mamba_utils.py:108-123); set: Qwen3.5's config hook takes
    # the config's mamba_ssm_dtype (model_executor/models/config.py:546-571).
    ssm_name = "float32" if ssm_dtype is None else str(ssm_dtype).replace("torch.", "")
    if ssm_name not in STATE_DTYPE_BYTES:
        raise CheckpointError(f"{path}: mamba_ssm_dtype {ssm_dtype!r} is not a dtype vLLM knows "
                              "(float32, float16, bfloat16): fix config.json")
    linear = sum(1 for kind in layer_types if _is_recurrent(kind))
    return {**dims, "linear_layers": linear, "full_attention_layers": len(layer_types) - linear,
            "ssm_state_dtype": ssm_name, "ssm_state_bytes": STATE_DTYPE_BYTES[ssm_name],
            "defaulted": defaulted}


def rope_cache_dims(cfg: dict[str, Any], head_dim: int) -> dict[str, Any] | None:
    """The rotary cos_sin_cache the engine keeps on every GPU: positions x rotary_dim float16
    values (rotary_embedding/base.py:58-63, 94-103; get_rope: rotary_dim = head_dim x
    partial_rotary_factor, rotary_embedding/__init__.py:66-72). YaRN caches original x factor
    positions (yarn_scaling_rope.py:75-83); MRoPE enlarges the cache 4x (mrope.py:236-245)."""
    base = cfg.get("max_position_embeddings")
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not _dimension(base) or not isinstance(rope, dict):
        return None
    partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if not isinstance(partial, (int, float)) or isinstance(partial, bool) or \
            not 0 < partial <= 1:
        partial = 1.0
    rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
    factor = rope.get("factor")
    factor = float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) \
        and math.isfinite(factor) and 0 < factor <= 1024 else 1.0
    positions = base
    original = rope.get("original_max_position_embeddings")
    if rope_type == "yarn" and _dimension(original):
        positions = int(original * factor)
    elif rope_type in ("linear", "dynamic"):
        positions = int(base * factor)
    mrope = "mrope_section" in rope
    if mrope:
        positions *= 4
    rotary_dim = int(head_dim * partial)
    return {"positions": positions, "rotary_dim": rotary_dim, "mrope": mrope,
            "rope_type": rope_type, "bytes": positions * rotary_dim * 2}


def max_len_limit(config: dict[str, Any], cfg: dict[str, Any], tokenizer_cap: Any = None,
                  pooling: bool = False) -> tuple[int | None, str]:
    """The longest --max-model-len vLLM accepts for this config, and how it was derived.

    vLLM's ``_get_and_verify_max_len`` (vllm/config/model.py:2118-2250 in 1Cat-vLLM at
    ae13773a, same in upstream), in its order: the tokenizer_config ``model_max_length`` cap
    comes first (2143-2148) and only for pooling models with absolute position embeddings
    (the caller passes no tokenizer config otherwise, 1728-1740), BEFORE the rope scaling: every
    rope type except su/longrope/llama3 multiplies the limit by ``factor``; YaRN restarts from
    ``original_max_position_embeddings`` (2186-2203), dropping any tokenizer cap. Gemma3's limit
    is already scaled (2176).
    """
    base = _first(cfg, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                  "max_sequence_length", "max_seq_length", "seq_len")
    if not isinstance(base, int) or base <= 0:
        return None, "no max_position_embeddings in config.json"
    start, start_text = base, f"max_position_embeddings {base}"
    if pooling and isinstance(tokenizer_cap, int) and not isinstance(tokenizer_cap, bool) \
            and 0 < tokenizer_cap < start:
        start, start_text = tokenizer_cap, f"tokenizer_config.json model_max_length {tokenizer_cap}"
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    model_type = str(config.get("model_type") or cfg.get("model_type") or "")
    if not isinstance(rope, dict) or "gemma3" in model_type:
        return start, start_text
    rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
    if rope_type in ("su", "longrope", "llama3", "default"):
        return start, f"{start_text} (rope {rope_type}: no scaling of the limit)"
    factor = rope.get("factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or \
            not math.isfinite(factor) or not 0 < factor <= 1024:
        factor = 1.0
    factor = float(factor)
    original = rope.get("original_max_position_embeddings")
    if rope_type == "yarn" and isinstance(original, int) and original > 0:
        start, start_text = original, f"original_max_position_embeddings {original}"
    limit = int(start * factor)
    return limit, f"{start_text} x rope_scaling factor {factor:g} ({rope_type})"


SHARD_NAME = re.compile(r"^(?P<stem>.+)-(?P<number>\d{5})-of-(?P<total>\d{5})\.safetensors$")


def check_shard_set(model_dir: str) -> None:
    """CheckpointError when the shard files named NAME-0000K-of-0000N.safetensors do not form
    one complete set with its index (the engine loads what the index names, and a partial
    download planned silently would print a plan for a model that cannot load)."""
    try:
        names = sorted(os.listdir(model_dir))
    except OSError as error:
        raise CheckpointError(f"{model_dir}: cannot list: {error.strerror or error}") from error
    sets: dict[str, dict[int, set[int]]] = {}
    for name in names:
        match = SHARD_NAME.match(name)
        if match:
            sets.setdefault(match["stem"], {}).setdefault(int(match["total"]), set()).add(
                int(match["number"]))
    if not sets:
        return
    index = os.path.join(model_dir, "model.safetensors.index.json")
    stem, totals = next(iter(sets.items()))
    if not os.path.lexists(index):
        total = max(totals)
        raise CheckpointError(
            f"{model_dir}: shard files named {stem}-0000K-of-{total:05d}.safetensors but no "
            "model.safetensors.index.json: the download is incomplete; fetch the index (or the "
            "whole checkpoint) again")
    for stem, totals in sets.items():
        if len(totals) > 1:
            counts = " and ".join(f"-of-{total:05d}" for total in sorted(totals))
            raise CheckpointError(
                f"{model_dir}: shard files {stem}-*{counts}.safetensors come from different "
                "downloads: delete the directory and fetch the checkpoint again")
        total, numbers = next(iter(totals.items()))
        missing = sorted(set(range(1, total + 1)) - numbers)
        extra = sorted(number for number in numbers if not 1 <= number <= total)
        if missing or extra:
            first = missing[0] if missing else extra[0]
            what = (f"{len(missing)} of {total} missing" if missing
                    else f"numbered beyond {total}")
            raise CheckpointError(
                f"{model_dir}: shard {stem}-{first:05d}-of-{total:05d}.safetensors: {what} "
                f"(the names say {total} shards, {len(numbers)} present): finish the download")


def metadata_format(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> dict[str, Any]:
    """What the metadata claims: format (or None), where it says so, and KV-cache quantization."""
    qcfg = config.get("quantization_config")
    if not isinstance(qcfg, dict) and isinstance(config.get("text_config"), dict):
        qcfg = config["text_config"].get("quantization_config")
    result: dict[str, Any] = {"format": None, "source": None, "claim": None,
                              "seed_nvfp4": False, "kv_cache_quantized": False}
    if isinstance(qcfg, dict):
        method = str(qcfg.get("quant_method", "")).lower()
        result["source"] = "config.json quantization_config"
        result["claim"] = f"quant_method {method!r}"
        if method == "compressed-tensors":
            result["format"] = _compressed_tensors_format(qcfg)
            result["claim"] += f", format {qcfg.get('format')!r}"
            result["kv_cache_quantized"] = qcfg.get("kv_cache_scheme") is not None
        elif method in ("modelopt", "modelopt_fp4"):
            algo = str(_first(qcfg, "quant_algo") or
                       _object(qcfg.get("quantization")).get("quant_algo") or "").upper()
            if method == "modelopt_fp4" or algo == "NVFP4":
                result["format"] = "nvfp4-modelopt"
            elif algo.startswith("FP8"):
                result["format"] = "fp8"
            else:
                result["format"] = "unknown"
            result["kv_cache_quantized"] = qcfg.get("kv_cache_quant_algo") is not None
        elif method in ("awq", "awq_marlin"):
            result["format"] = "awq"
        elif method in ("gptq", "gptq_marlin"):
            result["format"] = "gptq"
        elif method == "fp8":
            result["format"] = "fp8"
        elif method == "nvfp4":
            result["seed_nvfp4"] = True
        else:
            result["format"] = "unknown"
    if hf_quant is not None:
        quant = hf_quant.get("quantization")
        quant = quant if isinstance(quant, dict) else {}
        algo = str(quant.get("quant_algo") or "").upper()
        # vLLM reads hf_quant_config.json only when config.json has no quantization_config.
        if result["source"] is None:
            result["source"] = "hf_quant_config.json"
            result["claim"] = f"quant_algo {algo!r}"
            result["format"] = ("nvfp4-modelopt" if algo == "NVFP4"
                                else "fp8" if algo.startswith("FP8") else "unknown")
        result["kv_cache_quantized"] = (result["kv_cache_quantized"]
                                        or quant.get("kv_cache_quant_algo") is not None)
    if result["source"] is None:
        dtype = str(_first(config, "torch_dtype", "dtype") or "").replace("torch.", "")
        result["source"] = "config.json torch_dtype"
        result["claim"] = f"unquantized {dtype or 'dtype not set'}"
        result["format"] = {"float16": "fp16", "bfloat16": "bf16"}.get(dtype)
    return result


def _compressed_tensors_format(qcfg: dict[str, Any]) -> str:
    if qcfg.get("format") == "nvfp4-pack-quantized":
        return "nvfp4-compressed-tensors"
    for group in _object(qcfg.get("config_groups")).values():
        weights = _object(_object(group).get("weights"))
        if weights.get("type") == "float" and weights.get("num_bits") == 4:
            return "nvfp4-compressed-tensors"
        if weights.get("type") == "float" and weights.get("num_bits") == 8:
            return "fp8"
    return "unknown"


def tensor_format(tensors: dict[str, Tensor]) -> tuple[str, str | None, Counter[str]]:
    """The format the tensors show: (format, an example tensor name, per-module format counts)."""
    modules: dict[str, dict[str, Tensor]] = {}
    for name, tensor in tensors.items():
        module, _, param = name.rpartition(".")
        modules.setdefault(module, {})[param] = tensor
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for module, params in modules.items():
        kind = _module_format(module, params)
        if kind is not None:
            counts[kind] += 1
            examples.setdefault(kind, module)
    quantized = [kind for kind, _ in counts.most_common() if kind not in ("fp16", "bf16", "fp32")]
    if quantized:
        kind = quantized[0]
    elif counts:
        kind = counts.most_common(1)[0][0]
    else:
        return "unknown", None, counts
    return (kind if kind in QUANT_FORMATS else "unknown"), examples[kind], counts


def _module_format(module: str, params: dict[str, Tensor]) -> str | None:
    """One module's layout, or None for modules that are not linear layers (norms, embeddings)."""
    if "weight_packed" in params:
        packed, scale = params["weight_packed"], params.get("weight_scale")
        if packed.dtype == "U8" and scale is not None and scale.dtype == "F8_E4M3":
            return "nvfp4-compressed-tensors"
        return "compressed-tensors-int"
    if "qweight" in params:
        if "g_idx" in params:
            return "gptq"
        qweight, scales = params["qweight"], params.get("scales")
        if scales is not None and len(qweight.shape) == 2 and len(scales.shape) == 2:
            # AWQ packs 8 int4 along the output dim, GPTQ along the input dim.
            return "gptq" if qweight.shape[1] == scales.shape[1] else "awq"
        return "awq"
    weight = params.get("weight")
    if weight is None:
        return None
    scale = params.get("weight_scale")
    if weight.dtype in ("U8", "F4") and scale is not None and scale.dtype == "F8_E4M3":
        return "nvfp4-modelopt"
    if weight.dtype in ("F8_E4M3", "F8_E5M2"):
        return "fp8"
    leaf = module.rpartition(".")[2]
    if leaf in LINEAR_LEAVES and len(weight.shape) == 2:
        return FLOAT_FORMATS.get(weight.dtype, "fp32" if weight.dtype == "F32" else "unknown")
    return None


def compare_formats(meta: dict[str, Any], tensors_fmt: str, example: str | None,
                    counts: Counter[str]) -> tuple[list[str], list[str]]:
    """Problems and warnings from the metadata/tensor comparison."""
    problems: list[str] = []
    warnings: list[str] = []
    claimed = meta["format"]
    seen = f"{tensors_fmt} tensors (e.g. {example})" if example else f"{tensors_fmt} tensors"
    if meta["seed_nvfp4"]:
        problems.append(SEED_NVFP4_PROBLEM)
    nvfp4_claim = meta["seed_nvfp4"] or claimed in NVFP4_FORMATS
    if nvfp4_claim and tensors_fmt in ("awq", "gptq"):
        problems.append(
            f"mismatch: {meta['source']} says NVFP4 but the tensors use `qweight` int32 packing "
            f"({tensors_fmt.upper()} layout, e.g. {example}.qweight): this is an {tensors_fmt} "
            "checkpoint; served as NVFP4 it fails to load or produces garbage. Use the NVFP4 "
            f"checkpoint, or restore the original {tensors_fmt} quantization_config"
        )
    elif claimed in ("fp16", "bf16", None) and tensors_fmt not in ("fp16", "bf16", "unknown") \
            and not meta["seed_nvfp4"]:
        problems.append(
            f"mismatch: {meta['source']} claims {meta['claim']} but the checkpoint has {seen}: "
            "the engine would load packed quantized tensors as plain weights; restore the "
            "checkpoint's quantization_config (or hf_quant_config.json)"
        )
    elif claimed in ("fp16", "bf16") and tensors_fmt in ("fp16", "bf16") and claimed != tensors_fmt:
        warnings.append(
            f"config.json says {meta['claim']} but the weights are {tensors_fmt}; both are served "
            "as float16 on V100"
        )
    elif claimed is not None and claimed != "unknown" and tensors_fmt != "unknown" \
            and claimed != tensors_fmt:
        problems.append(
            f"mismatch: {meta['source']} says {claimed} ({meta['claim']}) but the checkpoint has "
            f"{seen}: re-download the checkpoint or its config so they agree"
        )
    if claimed == "unknown":
        warnings.append(f"{meta['source']} {meta['claim']} is not a format this planner knows")
    mixed = [kind for kind in counts if kind not in ("fp16", "bf16", "fp32", tensors_fmt)]
    if tensors_fmt not in ("fp16", "bf16", "fp32") and mixed:
        problems.append(
            f"mixed quantization layouts in one checkpoint: {tensors_fmt} and {', '.join(mixed)}"
        )
    if "compressed-tensors-int" in counts:
        warnings.append(
            "compressed-tensors integer pack-quantized (W4A16 int) layers found: not NVFP4"
        )
    if "fp32" in counts and tensors_fmt == "fp32":
        warnings.append("float32 linear weights: the engine casts them to float16 (half the bytes)")
    return problems, warnings


def inspect_model(model_dir: str) -> dict[str, Any]:
    """Everything the planner needs from a model directory; CheckpointError on invalid input."""
    if not os.path.isdir(model_dir):
        raise CheckpointError(f"{model_dir}: no such model directory")
    config_path = os.path.join(model_dir, "config.json")
    config = load_json(config_path, required=True) or {}
    hf_quant = load_json(os.path.join(model_dir, "hf_quant_config.json"), required=False)
    generation = load_json(os.path.join(model_dir, "generation_config.json"), required=False)
    dims = model_dims(config, config_path)
    qcfg = config.get("quantization_config")
    if qcfg is not None and not isinstance(qcfg, dict):
        raise CheckpointError(f"{config_path}: quantization_config is {qcfg!r}, not an object: "
                              "restore the checkpoint's original config.json")
    tokenizer_config = load_json(os.path.join(model_dir, "tokenizer_config.json"),
                                 required=False)
    cap = (tokenizer_config or {}).get("model_max_length")
    # vLLM reads tokenizer_config's model_max_length only for pooling models (model.py:
    # 1728-1740); for the generative models planned here it is advice, not a limit.
    dims["tokenizer_model_max_length"] = cap if isinstance(cap, int) and \
        not isinstance(cap, bool) and cap > 0 else None
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or \
            not all(isinstance(a, str) and a.strip() for a in architectures):
        raise CheckpointError(f"{config_path}: architectures is {architectures!r}, not a non-empty "
                              "list of class names such as [\"Qwen2ForCausalLM\"] (vLLM picks the "
                              "model class from it): restore the checkpoint's config.json")
    check_shard_set(model_dir)
    tensors = read_checkpoint(model_dir)
    meta = metadata_format(config, hf_quant)
    found, example, counts = tensor_format(tensors)
    problems, warnings = compare_formats(meta, found, example, counts)
    quant_format = found if found != "unknown" else (meta["format"] or "unknown")
    if quant_format == "fp32":
        quant_format = "unknown"
    dtype = str(_first(config, "torch_dtype", "dtype") or "").replace("torch.", "")
    if dtype == "bfloat16" or any(t.dtype == "BF16" for t in tensors.values()):
        warnings.append(
            "bfloat16 checkpoint parts: V100 has no BF16, so they are served as float16 "
            "(--dtype half); values beyond float16's range (65504) would overflow"
        )
    return {
        "model_dir": model_dir,
        "model_type": config.get("model_type"),
        "architecture": architectures[0],
        "torch_dtype": dtype or None,
        "dims": dims,
        "metadata": meta,
        "tensor_format": found,
        "quant_format": quant_format,
        "problems": problems,
        "warnings": warnings,
        "generation_defaults": {
            key: generation[key] for key in
            ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens")
            if generation and key in generation
        },
        "tensors": tensors,
    }
