"""Synthetic model directories with real safetensors headers and sparse data regions.

Each file is a real safetensors file as far as any header reader can tell: 8-byte
little-endian header length, the JSON header (dtype, shape, data_offsets, padded to
8 bytes like the reference writer), then a data region of the exact size, created by
truncate() so it is sparse (a 40 GB model costs a few KiB of disk). Tensor layouts
follow the real writers:

- ``nvfp4-ct`` (llm-compressor, compressed-tensors ``nvfp4-pack-quantized``): per linear
  ``weight_packed`` U8 [out, in/2], ``weight_scale`` F8_E4M3 [out, in/16],
  ``weight_global_scale`` F32 [1], ``input_global_scale`` F32 [1];
- ``nvfp4-modelopt`` (TensorRT Model Optimizer): ``weight`` U8 [out, in/2],
  ``weight_scale`` F8_E4M3 [out, in/16], ``weight_scale_2`` F32 [], ``input_scale``
  F32 [], plus hf_quant_config.json;
- ``awq`` (AutoAWQ GEMM): ``qweight`` I32 [in, out/8], ``qzeros`` I32 [in/128, out/8],
  ``scales`` F16 [in/128, out];
- ``gptq`` (AutoGPTQ): ``qweight`` I32 [in/8, out], ``qzeros`` I32 [in/128, out/8],
  ``scales`` F16 [in/128, out], ``g_idx`` I32 [in];
- ``fp8``: ``weight`` F8_E4M3 [out, in], ``weight_scale`` F32 [1], ``input_scale`` F32 [1];
- ``fp16`` / ``bf16``: ``weight`` [out, in].
Embeddings, lm_head, norms and biases stay 16-bit in every layout, as real recipes do.

The configs copy the numbers of the published config.json files.
"""

from __future__ import annotations

import copy
import itertools
import json
import struct
from pathlib import Path
from typing import Any

QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
    "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 152064,
}
QWEN25_14B: dict[str, Any] = {
    **QWEN25_7B, "hidden_size": 5120, "intermediate_size": 13824, "max_window_layers": 70,
    "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8,
}
QWEN25_32B: dict[str, Any] = {
    **QWEN25_7B, "hidden_size": 5120, "intermediate_size": 27648, "max_window_layers": 70,
    "num_attention_heads": 40, "num_hidden_layers": 64, "num_key_value_heads": 8,
}
LLAMA31_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 128256,
}
LLAMA31_70B: dict[str, Any] = {
    **LLAMA31_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
    "num_hidden_layers": 80, "num_key_value_heads": 8,
}
# Qwen3 sets head_dim explicitly: 128, while hidden_size / heads = 2560 / 32 = 80.
QWEN3_4B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2560, "initializer_range": 0.02, "intermediate_size": 9728,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
# Qwen3.5-27B (Gated DeltaNet hybrid, multimodal wrapper): the published text_config
# (64 layers, every 4th full attention via full_attention_interval, 24 heads / 4 kv heads of 256,
# GDN 16 key heads / 48 value heads of 128, conv kernel 4, mamba_ssm_dtype float32, MRoPE with
# partial_rotary_factor 0.25). Field names from the engine's config class
# (1Cat-vLLM vllm/transformers_utils/configs/qwen3_5.py:42-116).
QWEN35_27B_TEXT: dict[str, Any] = {
    "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
    "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu",
    "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 17408,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 48, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 262144, "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
    "num_attention_heads": 24, "num_hidden_layers": 64, "num_key_value_heads": 4,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                        "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                        "rope_type": "default"},
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": 248320,
}
QWEN35_27B: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "image_token_id": 248056, "video_token_id": 248057, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "text_config": QWEN35_27B_TEXT,
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                      "model_type": "qwen3_5", "num_heads": 16, "out_hidden_size": 5120,
                      "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
}
# Qwen3.8-27B: the same text dimensions, layer_types spelled out (3 linear + 1 full, x16),
# swish output gate, plain RoPE (no mrope_section).
QWEN38_27B: dict[str, Any] = {
    **QWEN35_27B,
    "text_config": {
        **{k: v for k, v in QWEN35_27B_TEXT.items() if k != "full_attention_interval"},
        "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                        "full_attention"] * 16,
        "output_gate_type": "swish",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": 0.25},
    },
}
# A small Qwen3.5-shaped hybrid (the same fields, tiny dimensions: a few MB of sparse data) for
# what must move a real checkpoint through the Hub, the nodes and the stand-in engine.
QWEN35_TINY: dict[str, Any] = {
    **QWEN35_27B,
    "text_config": {**QWEN35_27B_TEXT, "hidden_size": 512, "intermediate_size": 1024,
                    "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "head_dim": 128, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                    "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                    "max_position_embeddings": 32768, "vocab_size": 4096},
    "vision_config": {**QWEN35_27B["vision_config"], "depth": 2, "out_hidden_size": 512},
}
QWEN_GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
    "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
    "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0",
}

_NVFP4_ARGS = {"actorder": None, "block_structure": None, "group_size": 16, "num_bits": 4,
               "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor_group",
               "symmetric": True, "type": "float"}
COMPRESSED_TENSORS_NVFP4: dict[str, Any] = {
    "config_groups": {"group_0": {
        "format": "nvfp4-pack-quantized",
        "input_activations": {**_NVFP4_ARGS, "dynamic": "local"},
        "output_activations": None,
        "targets": ["Linear"],
        "weights": {**_NVFP4_ARGS, "dynamic": False},
    }},
    "format": "nvfp4-pack-quantized", "global_compression_ratio": None, "ignore": ["lm_head"],
    "kv_cache_scheme": None, "quant_method": "compressed-tensors",
    "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
    "version": "0.10.2",
}
MODELOPT_HF_QUANT: dict[str, Any] = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                     "exclude_modules": ["lm_head"]},
}
AWQ_CONFIG: dict[str, Any] = {"bits": 4, "group_size": 128, "modules_to_not_convert": None,
                              "quant_method": "awq", "version": "gemm", "zero_point": True}
GPTQ_CONFIG: dict[str, Any] = {"bits": 4, "group_size": 128, "damp_percent": 0.01,
                               "desc_act": False, "sym": True, "true_sequential": True,
                               "quant_method": "gptq"}
FP8_CONFIG: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": "static"}
# The seed article's example: matches no real format.
SEED_FAKE_NVFP4: dict[str, Any] = {"quant_method": "nvfp4", "block_shape": [1, 16, 16, 16],
                                   "group_size": 128}

DEFAULT_QUANT_CONFIG: dict[str, dict[str, Any] | None] = {
    "nvfp4-ct": COMPRESSED_TENSORS_NVFP4, "nvfp4-modelopt": None, "awq": AWQ_CONFIG,
    "gptq": GPTQ_CONFIG, "fp8": FP8_CONFIG, "fp16": None, "bf16": None,
}
DTYPE_BYTES = {"U8": 1, "F8_E4M3": 1, "F16": 2, "BF16": 2, "F32": 4, "I32": 4}
GROUP = 128  # AWQ/GPTQ group size


def _linear(prefix: str, out: int, inp: int, fmt: str, bias: bool) -> list[tuple]:
    if fmt == "nvfp4-ct":
        rows = [(f"{prefix}.weight_packed", "U8", [out, inp // 2]),
                (f"{prefix}.weight_scale", "F8_E4M3", [out, inp // 16]),
                (f"{prefix}.weight_global_scale", "F32", [1]),
                (f"{prefix}.input_global_scale", "F32", [1])]
    elif fmt == "nvfp4-modelopt":
        rows = [(f"{prefix}.weight", "U8", [out, inp // 2]),
                (f"{prefix}.weight_scale", "F8_E4M3", [out, inp // 16]),
                (f"{prefix}.weight_scale_2", "F32", []),
                (f"{prefix}.input_scale", "F32", [])]
    elif fmt == "awq":
        rows = [(f"{prefix}.qweight", "I32", [inp, out // 8]),
                (f"{prefix}.qzeros", "I32", [inp // GROUP, out // 8]),
                (f"{prefix}.scales", "F16", [inp // GROUP, out])]
    elif fmt == "gptq":
        rows = [(f"{prefix}.qweight", "I32", [inp // 8, out]),
                (f"{prefix}.qzeros", "I32", [inp // GROUP, out // 8]),
                (f"{prefix}.scales", "F16", [inp // GROUP, out]),
                (f"{prefix}.g_idx", "I32", [inp])]
    elif fmt == "fp8":
        rows = [(f"{prefix}.weight", "F8_E4M3", [out, inp]),
                (f"{prefix}.weight_scale", "F32", [1]),
                (f"{prefix}.input_scale", "F32", [1])]
    else:
        rows = [(f"{prefix}.weight", "F16" if fmt == "fp16" else "BF16", [out, inp])]
    if bias:
        rows.append((f"{prefix}.bias", "F16" if fmt == "fp16" else "BF16", [out]))
    return rows


def _is_full(text: dict[str, Any], layer: int) -> bool:
    types = text.get("layer_types")
    if types:
        return types[layer] == "full_attention"
    return (layer + 1) % text.get("full_attention_interval", 4) == 0


def hybrid_tensor_layout(config: dict[str, Any], fmt: str) -> list[tuple[str, str, list[int]]]:
    """A Qwen3.5-style checkpoint: model.language_model.* (GDN linear_attn / gated self_attn /
    MLP), lm_head and the MTP head (mtp.*, which vLLM's loader skips). The small GDN
    projections (in_proj_b/in_proj_a), conv1d, A_log, dt_bias and norms stay 16-bit."""
    text = config["text_config"]
    hidden, inter = text["hidden_size"], text["intermediate_size"]
    heads, kv, head_dim = text["num_attention_heads"], text["num_key_value_heads"], \
        text["head_dim"]
    kh, vh = text["linear_num_key_heads"], text["linear_num_value_heads"]
    kd, vd = text["linear_key_head_dim"], text["linear_value_head_dim"]
    conv_dim, kernel, vocab = 2 * kh * kd + vh * vd, text["linear_conv_kernel_dim"], \
        text["vocab_size"]
    half = "F16" if fmt == "fp16" else "BF16"
    root = "model.language_model"
    rows: list[tuple[str, str, list[int]]] = [(f"{root}.embed_tokens.weight", half,
                                               [vocab, hidden])]
    for i in range(text["num_hidden_layers"]):
        p = f"{root}.layers.{i}"
        rows += [(f"{p}.input_layernorm.weight", half, [hidden]),
                 (f"{p}.post_attention_layernorm.weight", half, [hidden])]
        if _is_full(text, i):
            rows += _linear(f"{p}.self_attn.q_proj", 2 * heads * head_dim, hidden, fmt, False)
            rows += _linear(f"{p}.self_attn.k_proj", kv * head_dim, hidden, fmt, False)
            rows += _linear(f"{p}.self_attn.v_proj", kv * head_dim, hidden, fmt, False)
            rows += _linear(f"{p}.self_attn.o_proj", hidden, heads * head_dim, fmt, False)
            rows += [(f"{p}.self_attn.q_norm.weight", half, [head_dim]),
                     (f"{p}.self_attn.k_norm.weight", half, [head_dim])]
        else:
            a = f"{p}.linear_attn"
            rows += _linear(f"{a}.in_proj_qkv", conv_dim, hidden, fmt, False)
            rows += _linear(f"{a}.in_proj_z", vh * vd, hidden, fmt, False)
            rows += [(f"{a}.in_proj_b.weight", half, [vh, hidden]),
                     (f"{a}.in_proj_a.weight", half, [vh, hidden]),
                     (f"{a}.conv1d.weight", half, [conv_dim, 1, kernel]),
                     (f"{a}.A_log", "F32", [vh]), (f"{a}.dt_bias", half, [vh]),
                     (f"{a}.norm.weight", half, [vd])]
            rows += _linear(f"{a}.out_proj", hidden, vh * vd, fmt, False)
        rows += _linear(f"{p}.mlp.gate_proj", inter, hidden, fmt, False)
        rows += _linear(f"{p}.mlp.up_proj", inter, hidden, fmt, False)
        rows += _linear(f"{p}.mlp.down_proj", hidden, inter, fmt, False)
    rows += [(f"{root}.norm.weight", half, [hidden]), ("lm_head.weight", half, [vocab, hidden]),
             ("mtp.fc.weight", half, [hidden, 2 * hidden]), ("mtp.norm.weight", half, [hidden])]
    return rows


def tensor_layout(config: dict[str, Any], fmt: str) -> list[tuple[str, str, list[int]]]:
    """(name, dtype, shape) of every tensor a real checkpoint of this config and format has."""
    if "text_config" in config:
        return hybrid_tensor_layout(config, fmt)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    vocab = config["vocab_size"]
    half = "F16" if fmt == "fp16" else "BF16"
    qkv_bias = config["model_type"] == "qwen2"
    rows: list[tuple[str, str, list[int]]] = [("model.embed_tokens.weight", half, [vocab, hidden])]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        rows += [(f"{p}.input_layernorm.weight", half, [hidden]),
                 (f"{p}.post_attention_layernorm.weight", half, [hidden])]
        rows += _linear(f"{p}.self_attn.q_proj", heads * head_dim, hidden, fmt, qkv_bias)
        rows += _linear(f"{p}.self_attn.k_proj", kv * head_dim, hidden, fmt, qkv_bias)
        rows += _linear(f"{p}.self_attn.v_proj", kv * head_dim, hidden, fmt, qkv_bias)
        rows += _linear(f"{p}.self_attn.o_proj", hidden, heads * head_dim, fmt, False)
        if config["model_type"] == "qwen3":
            rows += [(f"{p}.self_attn.q_norm.weight", half, [head_dim]),
                     (f"{p}.self_attn.k_norm.weight", half, [head_dim])]
        rows += _linear(f"{p}.mlp.gate_proj", inter, hidden, fmt, False)
        rows += _linear(f"{p}.mlp.up_proj", inter, hidden, fmt, False)
        rows += _linear(f"{p}.mlp.down_proj", hidden, inter, fmt, False)
    rows.append(("model.norm.weight", half, [hidden]))
    if not config.get("tie_word_embeddings"):
        rows.append(("lm_head.weight", half, [vocab, hidden]))
    return rows


def nbytes(dtype: str, shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_BYTES[dtype]


def write_safetensors(path: Path, rows: list[tuple[str, str, list[int]]]) -> int:
    """Write a real header and a sparse data region; return the data size in bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in rows:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)
    return offset


def build_model(root: Path, config: dict[str, Any], fmt: str, *, name: str | None = None,
                shards: int = 1, quantization_config: Any = "default",
                hf_quant_config: Any = "default", config_changes: dict[str, Any] | None = None,
                generation_config: bool = True) -> Path:
    """A model directory for `config` in layout `fmt`; `quantization_config=None` drops it."""
    text = config.get("text_config", config)
    model_dir = root / (name or f"{config['model_type']}-{text['num_hidden_layers']}l-{fmt}")
    model_dir.mkdir(parents=True)
    cfg = copy.deepcopy(config)
    if fmt == "fp16":
        cfg["torch_dtype"] = "float16"
    qcfg = DEFAULT_QUANT_CONFIG[fmt] if quantization_config == "default" else quantization_config
    if qcfg is not None:
        cfg["quantization_config"] = copy.deepcopy(qcfg)
    cfg.update(config_changes or {})
    (model_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    hfq = (MODELOPT_HF_QUANT if fmt == "nvfp4-modelopt" else None) \
        if hf_quant_config == "default" else hf_quant_config
    if hfq is not None:
        (model_dir / "hf_quant_config.json").write_text(json.dumps(hfq, indent=2))
    if generation_config:
        (model_dir / "generation_config.json").write_text(json.dumps(QWEN_GENERATION_CONFIG))
    rows = tensor_layout(config, fmt)
    if shards == 1:
        write_safetensors(model_dir / "model.safetensors", rows)
        return model_dir
    total = sum(nbytes(dtype, shape) for _, dtype, shape in rows)
    # Cut where the running size crosses k/shards of the total; every shard gets >= 1 tensor.
    cuts, filled = [0], 0
    for index, row in enumerate(rows):
        left = shards - len(cuts)
        if left and index > cuts[-1] and (filled >= total * len(cuts) / shards
                                          or len(rows) - index == left):
            cuts.append(index)
        filled += nbytes(row[1], row[2])
    cuts.append(len(rows))
    groups = [rows[start:end] for start, end in itertools.pairwise(cuts)]
    weight_map: dict[str, str] = {}
    for number, group in enumerate(groups, start=1):
        shard = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(model_dir / shard, group)
        weight_map.update({row[0]: shard for row in group})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return model_dir


def expected_weight_bytes(config: dict[str, Any], fmt: str) -> int:
    """The checkpoint's total tensor bytes, computed independently of the planner."""
    return sum(nbytes(dtype, shape) for _, dtype, shape in tensor_layout(config, fmt))
