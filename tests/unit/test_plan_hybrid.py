"""Hybrid (Gated DeltaNet) planning, workload-sized --max-num-seqs, shard sets, RoPE order."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model.checkpoint import max_len_limit
from onecat.model.plan import GIB, UnsupportedModelError, plan_model
from onecat.model.safetensors import CheckpointError

MIB = 1024**2
V100_16GB = {"gpu_health": {"pairs": [{"gpus": [0, 1], "topology": "PHB"}],
                            "gpus": [{"index": 0, "memory_total_mib": 16160},
                                     {"index": 1, "memory_total_mib": 16160}]}}


@pytest.fixture(scope="module")
def hybrids(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrids")
    return {"3.5": mf.build_model(root, mf.QWEN35_27B, "nvfp4-ct", shards=4, name="q35"),
            "3.8": mf.build_model(root, mf.QWEN38_27B, "nvfp4-ct", shards=4, name="q38")}


def test_qwen38_27b_plans_as_vllms_hybrid_kv_cache_manager_lays_it_out(hybrids):
    plan = plan_model(str(hybrids["3.8"]), health=V100_16GB)
    hybrid, mem = plan["hybrid"], plan["memory_per_gpu"]
    # KV per token over the 16 full-attention layers only: 2 x 16 x 4 kv heads x 256 x 2 B.
    assert plan["kv_cache_bytes_per_token"] == 2 * 16 * 4 * 256 * 2 == 64 * 1024
    assert plan["kv_cache_bytes_per_token_per_gpu"] == 32 * 1024
    # State per linear layer per sequence per GPU: conv (2x16x128 + 48x128)/2 x 3 x 2 B
    # + recurrent 48/2 x 128 x 128 x 4 B (float32).
    assert hybrid["conv_state_bytes"] == 5120 * 3 * 2 == 30720
    assert hybrid["ssm_state_bytes"] == 24 * 128 * 128 * 4 == 1572864
    assert hybrid["state_bytes_per_sequence"] == 48 * (30720 + 1572864)
    # Attention blocks enlarged to 16 x ceil(state / (16 x 2048)) tokens; one page size.
    assert hybrid["block_size"] == 16 * math.ceil(1603584 / (16 * 2048)) == 784
    assert hybrid["page_bytes"] == 784 * 2048
    assert (hybrid["group_size"], hybrid["full_groups"], hybrid["linear_groups"]) == (16, 1, 3)
    assert hybrid["num_blocks"] == mem["kv_budget_bytes"] // (784 * 2048) // 16
    # Full-length request: ceil(8192 / 784) attention blocks + 3 groups x 2 state blocks.
    assert hybrid["blocks_per_request"] == 11 + 6
    assert plan["max_concurrency_at_max_model_len"] == hybrid["num_blocks"] // 17 >= 1
    assert plan["max_kv_tokens"] == int(hybrid["num_blocks"] / 17 * 8192)
    # The typical 756-token request: 1 attention block + 6 state blocks; bounded by slots.
    assert plan["serve_args"]["--max-num-seqs"] == min(256, hybrid["num_blocks"] // 7)
    assert plan["serve_args"]["--max-num-seqs"] <= hybrid["state_slots"]
    assert plan["serve_args"]["--attention-backend"] == "FLASH_ATTN_V100"
    assert plan["serve_args"]["--language-model-only"] is True
    assert plan["fits"] and plan["ok"]


def test_qwen35_27b_derives_layer_types_from_full_attention_interval(hybrids):
    plan = plan_model(str(hybrids["3.5"]), health=V100_16GB)
    assert plan["dims"]["kv_layers"] == 16
    assert plan["dims"]["linear"]["linear_layers"] == 48
    assert plan["hybrid"]["block_size"] == 784
    # MRoPE: cos_sin_cache for 4 x 262144 positions x 64 rotary dims (256 x 0.25) x 2 B.
    assert plan["memory_per_gpu"]["rotary_cache_bytes"] == 4 * 262144 * 64 * 2 == 128 * MIB
    three_eight = plan_model(str(hybrids["3.8"]), health=V100_16GB)
    assert three_eight["memory_per_gpu"]["rotary_cache_bytes"] == 262144 * 64 * 2


def test_mtp_head_is_not_counted_as_loaded(hybrids):
    plan = plan_model(str(hybrids["3.8"]))
    every = sum(mf.nbytes(d, s) for _, d, s in mf.tensor_layout(mf.QWEN38_27B, "nvfp4-ct"))
    mtp = sum(mf.nbytes(d, s) for n, d, s in mf.tensor_layout(mf.QWEN38_27B, "nvfp4-ct")
              if n.startswith("mtp."))
    assert mtp > 0
    assert plan["checkpoint_bytes"] == every - mtp


def test_gdn_value_heads_must_split_over_tp(tmp_path):
    text = {**mf.QWEN38_27B["text_config"], "linear_num_value_heads": 47,
            "linear_num_key_heads": 15}
    config = {**mf.QWEN38_27B, "text_config": text}
    model = mf.build_model(tmp_path, config, "nvfp4-ct", name="odd")
    plan = plan_model(str(model))
    assert any(p.startswith("linear_num_value_heads 47 is not divisible by "
                            "--tensor-parallel-size 2") for p in plan["problems"])
    assert not plan["ok"]


def test_qwen3_next_without_linear_fields_uses_the_config_class_defaults(tmp_path):
    config = {**mf.QWEN3_4B, "num_hidden_layers": 4}
    model = mf.build_model(tmp_path, config, "nvfp4-ct", config_changes={"model_type":
                                                                          "qwen3_next"})
    plan = plan_model(str(model))
    lin = plan["dims"]["linear"]
    assert (lin["linear_num_key_heads"], lin["linear_num_value_heads"]) == (16, 32)
    assert (lin["linear_layers"], lin["full_attention_layers"]) == (3, 1)


def test_all_linear_layers_are_refused(tmp_path):
    text = {**mf.QWEN38_27B["text_config"], "num_hidden_layers": 4,
            "layer_types": ["linear_attention"] * 4}
    model = mf.build_model(tmp_path, {**mf.QWEN38_27B, "text_config": text}, "nvfp4-ct")
    with pytest.raises(UnsupportedModelError, match="every layer is linear attention"):
        plan_model(str(model))


@pytest.mark.parametrize("bad", ["float64x", 7])
def test_unknown_mamba_ssm_dtype_is_invalid_input(tmp_path, bad):
    text = {**mf.QWEN38_27B["text_config"], "num_hidden_layers": 4, "mamba_ssm_dtype": bad,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    model = mf.build_model(tmp_path, {**mf.QWEN38_27B, "text_config": text}, "nvfp4-ct")
    with pytest.raises(CheckpointError, match=r"config.json: mamba_ssm_dtype .* fix config.json"):
        plan_model(str(model))


# --- --max-num-seqs for the workload --------------------------------------------------------

def test_max_num_seqs_is_sized_for_the_typical_request(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN25_14B, "nvfp4-ct", shards=3)
    plan = plan_model(str(model), health=V100_16GB)
    assert plan["serve_args"]["--max-num-seqs"] == plan["max_kv_tokens"] // 756 == 120
    assert "full-length 8192: 11" in plan["max_num_seqs_reason"]
    longer = plan_model(str(model), health=V100_16GB, typical_input_tokens=3000,
                        typical_output_tokens=1000)
    assert longer["serve_args"]["--max-num-seqs"] == longer["max_kv_tokens"] // 4000
    capped = plan_model(str(model), health=V100_16GB, max_num_batched_tokens=64)
    assert capped["serve_args"]["--max-num-seqs"] == 64  # vLLM: batched tokens >= seqs


def test_typical_request_must_be_positive(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct")
    from onecat.model.plan import PlanInputError
    with pytest.raises(PlanInputError, match="--typical-input-tokens 0: must be between 1"):
        plan_model(str(model), typical_input_tokens=0)


# --- incomplete shard sets and architectures ------------------------------------------------

def test_shards_without_an_index_are_refused(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct", shards=2)
    (model / "model.safetensors.index.json").unlink()
    with pytest.raises(CheckpointError, match=r"named model-0000K-of-00002.safetensors but no "
                                              r"model.safetensors.index.json: .* fetch the index"):
        plan_model(str(model))


def test_shard_count_in_the_names_must_match_the_files(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct", shards=2)
    (model / "model-00002-of-00002.safetensors").rename(model / "model-00002-of-00003.safetensors")
    with pytest.raises(CheckpointError, match="come from different downloads"):
        plan_model(str(model))


def test_a_shard_listed_in_the_index_but_missing_is_refused(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct", shards=3)
    (model / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"shard model-00002-of-00003.safetensors: 1 of 3 "
                                              r"missing .* finish the download"):
        plan_model(str(model))


@pytest.mark.parametrize("architectures", [None, [], [""], "Qwen2ForCausalLM", [3]])
def test_architectures_must_be_a_non_empty_list_of_names(tmp_path, architectures):
    changes = {"architectures": architectures}
    model = mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct", config_changes=changes)
    if architectures is None:
        config = json.loads((model / "config.json").read_text())
        del config["architectures"]
        (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config.json: architectures is .* not a non-empty "
                                              r"list of class names .* restore"):
        plan_model(str(model))


# --- RoPE: vLLM's order (config/model.py:2143-2203) ------------------------------------------

def test_tokenizer_cap_comes_before_rope_scaling():
    """Pooling models: min(max_position, model_max_length) first, then x factor."""
    cfg = {"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "linear",
                                                              "factor": 2.0}}
    limit, source = max_len_limit(cfg, cfg, tokenizer_cap=16384, pooling=True)
    assert limit == 32768  # 16384 x 2, not min(65536, 16384)
    assert source.startswith("tokenizer_config.json model_max_length 16384 x rope_scaling")
    # Generative models: the caller passes no tokenizer config (model.py:1728-1740).
    assert max_len_limit(cfg, cfg, tokenizer_cap=16384)[0] == 65536
    # YaRN restarts from original_max_position_embeddings, dropping the cap.
    yarn = {"max_position_embeddings": 32768, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert max_len_limit(yarn, yarn, tokenizer_cap=16384, pooling=True)[0] == 131072


def test_yarn_rotary_cache_covers_the_scaled_positions(tmp_path):
    yarn = {**mf.QWEN25_7B, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 32768}}
    plan = plan_model(str(mf.build_model(tmp_path, yarn, "nvfp4-ct")))
    assert plan["memory_per_gpu"]["rotary_cache_bytes"] == 131072 * 128 * 2 == 32 * MIB
    assert plan["memory_per_gpu"]["kv_budget_bytes"] < 14 * GIB


def test_onecat_plan_prints_the_hybrid_plan(hybrids, tmp_path, capsys):
    import argparse

    from onecat.model import cli as plan_cli
    health = tmp_path / "health.json"
    health.write_text(json.dumps(V100_16GB))
    parser = argparse.ArgumentParser(prog="onecat")
    plan_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", str(hybrids["3.8"]), "--health", str(health),
                              "--typical-input-tokens", "500", "--typical-output-tokens", "256"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "KV cache    64 KiB/token (32 KiB per GPU, auto)" in out
    assert "state       1.53 MiB per linear layer and sequence per GPU" in out
    assert "784-token attention blocks" in out
    assert "--language-model-only" in out
    assert "verdict     FITS" in out
