"""Model inspection: headers, dimensions, and the quantization format from metadata vs tensors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model.checkpoint import SEED_NVFP4_PROBLEM, inspect_model, model_dims
from onecat.model.safetensors import CheckpointError, read_checkpoint


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("nvfp4-ct", "nvfp4-compressed-tensors"),
        ("nvfp4-modelopt", "nvfp4-modelopt"),
        ("awq", "awq"),
        ("gptq", "gptq"),
        ("fp8", "fp8"),
        ("fp16", "fp16"),
        ("bf16", "bf16"),
    ],
)
def test_each_real_layout_is_detected_from_metadata_and_tensors(tmp_path, fmt, expected):
    info = inspect_model(str(mf.build_model(tmp_path, mf.LLAMA31_8B, fmt)))
    assert info["quant_format"] == expected
    assert info["tensor_format"] == expected
    assert info["metadata"]["format"] == expected
    assert info["problems"] == []


def test_modelopt_claim_comes_from_hf_quant_config_when_config_has_none(tmp_path):
    info = inspect_model(str(mf.build_model(tmp_path, mf.QWEN25_7B, "nvfp4-modelopt")))
    assert info["metadata"]["source"] == "hf_quant_config.json"
    assert info["metadata"]["claim"] == "quant_algo 'NVFP4'"


def test_modelopt_claim_in_config_json_is_read_too(tmp_path):
    qcfg = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    model = mf.build_model(tmp_path, mf.QWEN25_7B, "nvfp4-modelopt", quantization_config=qcfg,
                           hf_quant_config=None)
    info = inspect_model(str(model))
    assert info["metadata"]["format"] == "nvfp4-modelopt"
    assert info["metadata"]["source"] == "config.json quantization_config"
    assert info["problems"] == []


def test_header_bytes_are_exact_for_every_layout(tmp_path):
    for fmt in ("nvfp4-ct", "nvfp4-modelopt", "awq", "gptq", "fp16"):
        model = mf.build_model(tmp_path, mf.QWEN25_7B, fmt, shards=3)
        tensors = read_checkpoint(str(model))
        assert sum(t.nbytes for t in tensors.values()) == mf.expected_weight_bytes(
            mf.QWEN25_7B, fmt)
        assert len(tensors) == len(mf.tensor_layout(mf.QWEN25_7B, fmt))


def test_nvfp4_tensor_shapes_and_dtypes_as_written(tmp_path):
    tensors = read_checkpoint(str(mf.build_model(tmp_path, mf.QWEN25_7B, "nvfp4-ct")))
    packed = tensors["model.layers.0.mlp.down_proj.weight_packed"]
    assert (packed.dtype, packed.shape, packed.nbytes) == ("U8", (3584, 9472), 3584 * 9472)
    scale = tensors["model.layers.0.mlp.down_proj.weight_scale"]
    assert (scale.dtype, scale.shape) == ("F8_E4M3", (3584, 1184))
    assert tensors["model.layers.0.mlp.down_proj.weight_global_scale"].nbytes == 4
    assert tensors["model.embed_tokens.weight"].dtype == "BF16"


def test_seed_fake_nvfp4_config_is_called_out_with_what_a_real_one_looks_like(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN25_14B, "nvfp4-ct",
                           quantization_config=mf.SEED_FAKE_NVFP4)
    info = inspect_model(str(model))
    assert info["quant_format"] == "nvfp4-compressed-tensors"  # the tensors decide
    assert info["problems"] == [SEED_NVFP4_PROBLEM]
    assert "not a real checkpoint format" in SEED_NVFP4_PROBLEM
    assert "'nvfp4-pack-quantized'" in SEED_NVFP4_PROBLEM
    assert "Unknown quantization method: nvfp4" in SEED_NVFP4_PROBLEM


def test_seed_fake_nvfp4_config_over_qweight_tensors_is_a_mismatch(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN25_7B, "awq", quantization_config=mf.SEED_FAKE_NVFP4)
    info = inspect_model(str(model))
    assert info["quant_format"] == "awq"
    assert info["problems"][0] == SEED_NVFP4_PROBLEM
    mismatch = info["problems"][1]
    assert mismatch.startswith("mismatch: config.json quantization_config says NVFP4 but the "
                               "tensors use `qweight` int32 packing (AWQ layout")
    assert ".qweight" in mismatch


def test_real_nvfp4_config_over_gptq_tensors_is_a_mismatch(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN25_7B, "gptq",
                           quantization_config=mf.COMPRESSED_TENSORS_NVFP4)
    info = inspect_model(str(model))
    assert info["quant_format"] == "gptq"
    assert len(info["problems"]) == 1
    assert "says NVFP4 but the tensors use `qweight` int32 packing (GPTQ layout" in \
        info["problems"][0]


def test_nvfp4_tensors_without_any_quantization_config_are_a_problem(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN25_7B, "nvfp4-ct", quantization_config=None)
    info = inspect_model(str(model))
    assert info["quant_format"] == "nvfp4-compressed-tensors"
    assert info["problems"] == [
        "mismatch: config.json torch_dtype claims unquantized bfloat16 but the checkpoint has "
        "nvfp4-compressed-tensors tensors (e.g. model.layers.0.self_attn.q_proj): the engine "
        "would load packed quantized tensors as plain weights; restore the checkpoint's "
        "quantization_config (or hf_quant_config.json)"
    ]


def test_awq_config_over_gptq_tensors_is_a_mismatch(tmp_path):
    model = mf.build_model(tmp_path, mf.LLAMA31_8B, "gptq", quantization_config=mf.AWQ_CONFIG)
    info = inspect_model(str(model))
    assert info["problems"] == [
        "mismatch: config.json quantization_config says awq (quant_method 'awq') but the "
        "checkpoint has gptq tensors (e.g. model.layers.0.self_attn.q_proj): re-download the "
        "checkpoint or its config so they agree"
    ]


def test_gptq_without_g_idx_is_told_from_awq_by_packing_axis(tmp_path):
    rows = [r for r in mf.tensor_layout(mf.LLAMA31_8B, "gptq") if not r[0].endswith("g_idx")]
    model = tmp_path / "gptq-no-gidx"
    model.mkdir()
    (model / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, '
        '"num_attention_heads": 32, '
        '"num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, '
        '"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}')
    mf.write_safetensors(model / "model.safetensors", rows)
    assert inspect_model(str(model))["tensor_format"] == "gptq"


def test_bf16_checkpoint_warns_it_is_served_as_float16(tmp_path):
    info = inspect_model(str(mf.build_model(tmp_path, mf.QWEN3_4B, "bf16")))
    assert any(w.startswith("bfloat16 checkpoint parts: V100 has no BF16, so they are served as "
                            "float16 (--dtype half)") for w in info["warnings"])
    fp16 = inspect_model(str(mf.build_model(tmp_path, mf.LLAMA31_8B, "fp16")))
    assert not any("bfloat16" in w for w in fp16["warnings"])


def test_explicit_head_dim_wins_over_hidden_by_heads(tmp_path):
    dims = inspect_model(str(mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct")))["dims"]
    assert (dims["head_dim"], dims["head_dim_explicit"]) == (128, True)  # not 2560 / 32 = 80
    assert dims["tie_word_embeddings"] is True
    llama = model_dims(mf.LLAMA31_8B, "config.json")
    assert (llama["head_dim"], llama["head_dim_explicit"]) == (128, False)
    assert llama["num_key_value_heads"] == 8


def test_text_config_and_linear_attention_layers():
    nested = {"architectures": ["X"], "text_config": {
        "hidden_size": 5120, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
        "num_hidden_layers": 4, "vocab_size": 248320,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                        "full_attention"]}}
    dims = model_dims(nested, "config.json")
    assert (dims["kv_layers"], dims["num_hidden_layers"], dims["head_dim"]) == (1, 4, 256)
    assert dims["vocab_size"] == 248320


def test_config_without_dimensions_is_invalid_input():
    with pytest.raises(CheckpointError, match="lacks num_hidden_layers, hidden_size"):
        model_dims({"num_attention_heads": 8}, "/m/config.json")


def test_non_positive_kv_heads_is_invalid_input():
    with pytest.raises(CheckpointError, match="num_key_value_heads 0 is not a positive integer"):
        model_dims({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 8,
                    "num_key_value_heads": 0}, "/m/config.json")


def test_modelopt_fp8_kv_cache_algo_marks_the_kv_cache_quantized(tmp_path):
    hfq = {"quantization": {**mf.MODELOPT_HF_QUANT["quantization"], "kv_cache_quant_algo": "FP8"}}
    model = mf.build_model(tmp_path, mf.QWEN25_7B, "nvfp4-modelopt", hf_quant_config=hfq)
    assert inspect_model(str(model))["metadata"]["kv_cache_quantized"] is True
