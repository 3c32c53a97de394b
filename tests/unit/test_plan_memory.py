"""Memory planning: the seed's table as acceptance, the TP sharding rule, KV math, advice, flags."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model.engines import check_engine
from onecat.model.plan import (
    GIB,
    PlanInputError,
    UnsupportedModelError,
    health_topology,
    plan_model,
    tensor_bytes_per_gpu,
)
from onecat.model.safetensors import Tensor

PCIE_HEALTH = {"gpu_health": {"pairs": [{"gpus": [0, 1], "topology": "PHB",
                                          "p2p_read": "CHIPSET_NOT_SUPPORTED",
                                          "p2p_write": "CHIPSET_NOT_SUPPORTED"}],
                              "recommendations": {"nccl_p2p_disable": False}}}
NVLINK_HEALTH = {"pairs": [{"gpus": [0, 1], "topology": "NV2", "p2p_read": "OK"}],
                 "recommendations": {}}
# What NVML reports for a pair of "16 GB" V100s (the serve role passes these facts).
V100_16GB = {"gpu_health": {**PCIE_HEALTH["gpu_health"],
                            "gpus": [{"index": 0, "memory_total_mib": 16160},
                                     {"index": 1, "memory_total_mib": 16160}]}}
MIB = 1024**2


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "7b": mf.build_model(root, mf.QWEN25_7B, "nvfp4-ct", shards=2),
        "14b": mf.build_model(root, mf.QWEN25_14B, "nvfp4-ct", shards=3),
        "14b-modelopt": mf.build_model(root, mf.QWEN25_14B, "nvfp4-modelopt", shards=3),
        "32b": mf.build_model(root, mf.QWEN25_32B, "nvfp4-ct", shards=5),
        "14b-fp16": mf.build_model(root, mf.QWEN25_14B, "fp16", shards=6),
        "70b": mf.build_model(root, mf.LLAMA31_70B, "nvfp4-ct", shards=9),
        "qwen3-4b": mf.build_model(root, mf.QWEN3_4B, "nvfp4-ct"),
    }


# --- the seed's table (2x V100-16GB as NVML reports them, TP2, 8192 context, 0.9) ----------

def test_seed_7b_nvfp4_fits_with_dozens_of_full_length_sequences(models):
    plan = plan_model(str(models["7b"]), health=V100_16GB)
    assert plan["fits"] and plan["ok"]
    assert plan["max_concurrency_at_max_model_len"] == 47
    assert plan["max_kv_tokens"] == 385712
    # Sized for the typical 500+256-token request, capped by the engine's default 256.
    assert plan["serve_args"]["--max-num-seqs"] == 256


def test_seed_14b_nvfp4_fits_with_about_eleven(models):
    plan = plan_model(str(models["14b"]), health=V100_16GB)
    assert plan["fits"] and plan["ok"]
    assert plan["max_concurrency_at_max_model_len"] == 11
    assert plan["max_kv_tokens"] == 91104
    assert plan["serve_args"]["--max-num-seqs"] == 120 == 91104 // 756
    assert plan["suggestions"] == []


def test_seed_32b_nvfp4_fits_only_with_a_few(models):
    plan = plan_model(str(models["32b"]), health=V100_16GB)
    assert plan["fits"]
    assert plan["max_concurrency_at_max_model_len"] == 3
    assert plan["suggestions"] == [
        "only 3 full-length sequence(s) fit: --max-model-len 4096 gives room for 6",
        "--kv-cache-dtype fp8_e5m2 halves the KV cache per token: 6 sequence(s) of 8192 tokens "
        "(52240 tokens)",
    ]


def test_seed_14b_fp16_does_not_fit_at_8192(models):
    plan = plan_model(str(models["14b-fp16"]), health=V100_16GB)
    assert not plan["fits"] and not plan["ok"]
    assert plan["max_kv_tokens"] == 1152
    assert plan["nothing_fits"] is False  # 1024 tokens do fit: vLLM's own formula says so
    assert plan["fit_reason"] == ("does not fit: the KV cache left per GPU (0.11 GiB) holds 1152 "
                                  "tokens, less than one 8192-token sequence")
    assert plan["suggestions"][0] == "--max-model-len 1024: room for 1 sequence at that length"
    assert plan["suggestions"][-1] == ("an NVFP4 checkpoint of this model would take about "
                                       "5.30 GiB per GPU on 1cat-vllm and leave room for 11 "
                                       "sequence(s) of 8192")


def test_seed_70b_nvfp4_does_not_fit_and_says_so(models):
    plan = plan_model(str(models["70b"]), health=V100_16GB)
    assert not plan["fits"] and plan["nothing_fits"]
    assert plan["checkpoint_bytes_per_gpu"] / GIB == pytest.approx(19.89, abs=0.01)
    assert plan["weight_bytes_per_gpu"] / GIB == pytest.approx(21.88, abs=0.01)
    first = plan["suggestions"][0]
    assert first.startswith("nothing fits on 2x15.78 GiB: the weights alone take 21.88 GiB per "
                            "GPU")
    assert "not recommended on this hardware" in first
    assert "26.4 GiB per GPU at TP2" in first
    assert plan["suggestions"][1] == ("--tensor-parallel-size 4 over 4 such GPUs: 10.94 GiB "
                                      "weights per GPU, room for 4 sequence(s) of 8192")


# --- rule 1: resident bytes are not checkpoint bytes ---------------------------------------

def test_1cat_turbomind_keeps_fp16_block_scales_resident(models):
    """0.625 bytes per NVFP4 parameter on the GPU (FP16 scales), 0.5625 on disk (FP8 scales)."""
    plan = plan_model(str(models["14b"]))
    hidden, inter, layers, kv_dim = 5120, 13824, 48, 8 * 128
    params_per_gpu = layers * (2 * hidden * hidden + 2 * kv_dim * hidden
                               + 3 * inter * hidden) // 2
    fp8_scales = params_per_gpu // 16
    assert plan["weight_bytes_per_gpu"] - plan["checkpoint_bytes_per_gpu"] == fp8_scales
    linear = plan["memory_per_gpu"]["linear_bytes"]
    scalars = layers * 7 * 2 * 4  # weight_global_scale + input_global_scale, replicated
    biases = layers * (hidden + 2 * kv_dim) * 2 // 2
    assert (linear - scalars - biases) / params_per_gpu == pytest.approx(0.625)
    assert "0.625 bytes/parameter" in plan["resident_rule"]


def test_resident_bytes_depend_on_engine_and_version(models):
    onecat = plan_model(str(models["14b-modelopt"]))
    upstream = plan_model(str(models["14b-modelopt"]), engine="vllm", compute_capability="8.0")
    before_turbomind = plan_model(str(models["14b"]), engine_version="1.2.0")
    assert upstream["weight_bytes_per_gpu"] == upstream["checkpoint_bytes_per_gpu"]
    assert before_turbomind["weight_bytes_per_gpu"] == before_turbomind["checkpoint_bytes_per_gpu"]
    assert onecat["weight_bytes_per_gpu"] > onecat["checkpoint_bytes_per_gpu"]
    fp16 = plan_model(str(models["14b-fp16"]))
    assert fp16["weight_bytes_per_gpu"] == fp16["checkpoint_bytes_per_gpu"]


# --- rule 2: the budget as vLLM computes it ------------------------------------------------

def test_kv_budget_follows_vllm_term_by_term(models):
    plan = plan_model(str(models["14b"]), health=V100_16GB)
    mem = plan["memory_per_gpu"]
    total = 16160 * MIB
    assert mem["requested_bytes"] == math.ceil(total * 0.9)
    assert mem["kv_budget_bytes"] == int(mem["requested_bytes"] - plan["weight_bytes_per_gpu"]
                                         - mem["rotary_cache_bytes"]
                                         - mem["activation_bytes"] - 0.15 * GIB)
    # Qwen2.5-14B's cos_sin_cache: 32768 positions x 128 rotary dims x 2 B = 8 MiB.
    assert mem["rotary_cache_bytes"] == 8 * MIB
    # TurboMind's per-stream GEMM workspace (barriers 1 MiB + partials 32 MiB + tensormaps
    # 1 MiB + one int32 flag) sits in the profiled peak.
    assert mem["activation_workspace_bytes"] == 34 * MIB + 4
    assert mem["activation_bytes"] == max(mem["activation_forward_bytes"],
                                          mem["activation_sampler_bytes"]) + 34 * MIB + 4
    # FLASH_ATTN_V100: 1Cat captures graphs outside the budget; they and the CUDA context
    # must fit in what utilization leaves.
    assert mem["cuda_graphs_in_budget"] is False
    assert mem["outside_bytes"] == mem["cuda_context_bytes"] + mem["cuda_graph_bytes"]
    assert mem["headroom_bytes"] == total - mem["requested_bytes"]
    tokens = plan["max_kv_tokens"]
    assert tokens == mem["kv_budget_bytes"] // (16 * 98304) * 16


def test_activation_peak_grows_with_max_num_batched_tokens(models):
    small = plan_model(str(models["14b"]), max_num_batched_tokens=2048)
    large = plan_model(str(models["14b"]), max_num_batched_tokens=16384)
    assert large["memory_per_gpu"]["activation_forward_bytes"] == \
        8 * small["memory_per_gpu"]["activation_forward_bytes"]
    assert large["max_kv_tokens"] < small["max_kv_tokens"]
    assert large["serve_args"]["--max-num-batched-tokens"] == 16384
    assert "--max-num-batched-tokens" not in small["serve_args"]  # vLLM's V100 default


def test_sampler_pass_is_sized_by_the_max_num_seqs_passed(models):
    plan = plan_model(str(models["14b"]), max_num_seqs=256)
    mem = plan["memory_per_gpu"]
    assert mem["activation_sampler_bytes"] == 256 * 152064 * 22
    assert plan["serve_args"]["--max-num-seqs"] == 256
    assert mem["activation_bytes"] == mem["activation_sampler_bytes"] + 34 * MIB + 4


def test_utilization_that_leaves_no_room_for_context_and_graphs_is_a_problem(models):
    plan = plan_model(str(models["14b"]), health=V100_16GB, gpu_memory_utilization=0.95)
    assert plan["fits"] and not plan["ok"]
    assert plan["memory_per_gpu"]["max_utilization"] == 0.94
    assert plan["problems"] == [
        "--gpu-memory-utilization 0.95 leaves 0.79 GiB of the 15.78 GiB card outside vLLM's "
        "share, less than the 0.60 GiB CUDA context + NCCL + 0.30 GiB CUDA graphs that live "
        "there (vLLM refuses to start when free memory is below its share, or the graph "
        "capture runs out of memory): use --gpu-memory-utilization 0.94 or less"]


def test_utilization_advice_never_exceeds_what_the_headroom_allows(models):
    plan = plan_model(str(models["32b"]), health=V100_16GB, max_model_len=28672)
    tips = [tip for tip in plan["suggestions"] if tip.startswith("--gpu-memory-utilization")]
    assert tips == ["--gpu-memory-utilization 0.92: room for 1 sequence of 28672 tokens (only "
                    "if nothing else uses the GPUs; the rest of the card still holds the CUDA "
                    "context, NCCL and graphs)"]
    # 0.95 would hold 32768 tokens, but leaves too little for the context and graphs.
    hopeless = plan_model(str(models["32b"]), health=V100_16GB, max_model_len=32768)
    assert not any(t.startswith("--gpu-memory-utilization") for t in hopeless["suggestions"])


# --- rule 3: the card's real size ----------------------------------------------------------

def test_card_size_comes_from_nvml_when_the_health_facts_have_it(models):
    nominal = plan_model(str(models["14b"]))
    real = plan_model(str(models["14b"]), health=V100_16GB)
    assert nominal["memory_per_gpu"]["total_bytes"] == 16 * GIB
    assert nominal["memory_per_gpu"]["total_source"].startswith("nominal 16 GiB")
    assert real["memory_per_gpu"]["total_bytes"] == 16160 * MIB
    assert real["memory_per_gpu"]["total_source"] == "NVML memory_total_mib 16160 (15.78 GiB)"
    assert real["max_kv_tokens"] < nominal["max_kv_tokens"]
    # The nominal option does not override what NVML measured; the smallest card bounds TP.
    mixed = {"pairs": [], "gpus": [{"memory_total_mib": 32510}, {"memory_total_mib": 16160}]}
    assert plan_model(str(models["14b"]), health=mixed, gpu_memory_gib=32)[
        "memory_per_gpu"]["total_bytes"] == 16160 * MIB


# --- rule 4: RoPE scaling ------------------------------------------------------------------

def test_yarn_extended_qwen25_at_65536_is_not_refused(tmp_path):
    yarn = {"rope_scaling": {"type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 32768}}
    model = mf.build_model(tmp_path, mf.QWEN25_7B, "nvfp4-ct", config_changes=yarn)
    plan = plan_model(str(model), max_model_len=65536)
    assert not any("max-model-len" in problem for problem in plan["problems"])
    assert plan["dims"]["max_model_len_limit"] == 131072
    beyond = plan_model(str(model), max_model_len=262144)
    assert beyond["problems"] == [
        "--max-model-len 262144 exceeds the model's limit 131072 (original_max_position_"
        "embeddings 32768 x rope_scaling factor 4 (yarn)): vLLM refuses it; use --max-model-len "
        "131072 or less"]


def test_llama3_rope_does_not_scale_the_limit_and_tokenizer_does_not_cap_it(tmp_path):
    """vLLM reads tokenizer_config's model_max_length only for pooling models
    (config/model.py:1728-1740): for a generative model it is a warning, not a limit."""
    llama = mf.build_model(tmp_path, mf.LLAMA31_8B, "nvfp4-ct", name="llama")
    assert plan_model(str(llama), max_model_len=8192)["dims"]["max_model_len_limit"] == 131072
    (llama / "tokenizer_config.json").write_text('{"model_max_length": 65536}')
    plan = plan_model(str(llama), max_model_len=131072)
    assert plan["dims"]["max_model_len_limit"] == 131072
    assert not any("exceeds the model's limit" in p for p in plan["problems"])
    assert any(w.startswith("tokenizer_config.json model_max_length 65536 is below "
                            "--max-model-len 131072") for w in plan["warnings"])


# --- rule 6: hybrids other than Gated DeltaNet are refused ----------------------------------

@pytest.mark.parametrize("changes", [
    {"layer_types": ["linear_attention"] * 3 + ["full_attention"]},
    {"hybrid_override_pattern": "M-M-M*-M-"},
    {"model_type": "nemotron_h"},
])
def test_hybrids_the_engine_does_not_run_on_sm70_are_refused(tmp_path, changes):
    config = {**mf.QWEN3_4B, "num_hidden_layers": 4}
    model = mf.build_model(tmp_path, config, "nvfp4-ct", config_changes=changes)
    with pytest.raises(UnsupportedModelError, match=r"hybrid model .* not a Gated DeltaNet model "
                                                    r".* refuses rather than give a wrong number"):
        plan_model(str(model))


# --- exact bytes --------------------------------------------------------------------------

def test_14b_nvfp4_per_gpu_weights_match_a_hand_count(models):
    """Qwen2.5-14B at TP2, counted by hand from the published dimensions."""
    hidden, inter, layers, vocab, kv_dim = 5120, 13824, 48, 152064, 8 * 128

    def nvfp4_linear(out: int, inp: int) -> int:  # packed + FP8 scales halved, 2 fp32 scalars
        return (out * inp // 2 + out * inp // 16) // 2 + 8

    per_layer = (nvfp4_linear(hidden, hidden) + 2 * nvfp4_linear(kv_dim, hidden)
                 + nvfp4_linear(hidden, hidden) + 2 * nvfp4_linear(inter, hidden)
                 + nvfp4_linear(hidden, inter)
                 + (hidden + 2 * kv_dim) * 2 // 2  # q/k/v bias, column-parallel
                 + 2 * hidden * 2)  # two RMSNorm weights, replicated
    expected = layers * per_layer + 2 * (vocab * hidden * 2 // 2) + hidden * 2
    plan = plan_model(str(models["14b"]))
    assert plan["checkpoint_bytes_per_gpu"] == expected
    assert plan["checkpoint_bytes"] == mf.expected_weight_bytes(mf.QWEN25_14B, "nvfp4-ct")
    assert plan["memory_per_gpu"]["embeddings_bytes"] == vocab * hidden * 2


def test_modelopt_and_compressed_tensors_weigh_the_same(models):
    ct = plan_model(str(models["14b"]))
    modelopt = plan_model(str(models["14b-modelopt"]))
    assert ct["weight_bytes_per_gpu"] == modelopt["weight_bytes_per_gpu"]
    assert modelopt["quant_format"] == "nvfp4-modelopt"


def test_kv_bytes_per_token_from_config(models):
    plan = plan_model(str(models["14b"]))
    assert plan["kv_cache_bytes_per_token"] == 2 * 48 * 8 * 128 * 2
    assert plan["kv_cache_bytes_per_token_per_gpu"] == 2 * 48 * 4 * 128 * 2
    # Qwen3 sets head_dim 128 while hidden/heads is 80.
    qwen3 = plan_model(str(models["qwen3-4b"]))
    assert qwen3["kv_cache_bytes_per_token"] == 2 * 36 * 8 * 128 * 2


def test_fp8_kv_cache_halves_bytes_and_doubles_tokens(models):
    auto = plan_model(str(models["14b"]))
    fp8 = plan_model(str(models["14b"]), kv_cache_dtype="fp8_e5m2")
    assert fp8["kv_cache_bytes_per_token"] * 2 == auto["kv_cache_bytes_per_token"]
    assert fp8["max_concurrency_at_max_model_len"] == 21
    assert fp8["serve_args"]["--kv-cache-dtype"] == "fp8_e5m2"


def test_halving_max_model_len_doubles_full_length_sequences(models):
    plan = plan_model(str(models["14b"]), max_model_len=4096, max_num_seqs=44)
    assert plan["max_concurrency_at_max_model_len"] == 23
    assert plan["max_kv_tokens"] == plan_model(str(models["14b"]), max_num_seqs=44)[
        "max_kv_tokens"] == 95328


@pytest.mark.parametrize(
    ("name", "shape", "dtype", "expected"),
    [
        ("model.layers.0.self_attn.q_proj.weight_packed", (5120, 2560), "U8", 5120 * 2560 // 2),
        ("model.layers.0.self_attn.q_proj.bias", (5120,), "BF16", 5120),  # column: sharded
        ("model.layers.0.self_attn.o_proj.bias", (5120,), "BF16", 10240),  # row: replicated
        ("model.layers.0.mlp.down_proj.weight_scale", (5120, 864), "F8_E4M3", 5120 * 432),
        ("model.layers.0.mlp.down_proj.weight_global_scale", (1,), "F32", 4),  # scalar
        ("model.layers.0.mlp.down_proj.weight_scale_2", (), "F32", 4),
        ("model.layers.0.input_layernorm.weight", (5120,), "BF16", 10240),  # replicated
        ("model.layers.0.self_attn.q_proj.g_idx", (5120,), "I32", 20480),  # column g_idx
        ("model.layers.0.mlp.down_proj.g_idx", (13824,), "I32", 27648),  # row g_idx: sharded
        ("model.layers.0.mlp.gate.weight", (64, 2048), "BF16", 64 * 2048 * 2),  # MoE router
        ("model.layers.0.mlp.experts.3.up_proj.weight", (768, 2048), "BF16", 768 * 2048),
        # vocab 151937 pads to 152000 rows, 76000 per rank
        ("lm_head.weight", (151937, 16), "BF16", 76000 * 32),
    ],
)
def test_tensor_parallel_sharding_rule(name, shape, dtype, expected):
    bits = {"U8": 8, "F8_E4M3": 8, "BF16": 16, "F32": 32, "I32": 32}[dtype]
    count = 1
    for dim in shape:
        count *= dim
    tensor = Tensor(dtype, shape, count * bits // 8, "model.safetensors")
    assert tensor_bytes_per_gpu(name, tensor, tp=2, kv_heads=8) == expected


def test_kv_heads_fewer_than_tp_ranks_are_replicated():
    k_proj = Tensor("BF16", (512, 3584), 512 * 3584 * 2, "m")  # 4 kv heads x 128
    assert tensor_bytes_per_gpu("model.layers.0.self_attn.k_proj.weight", k_proj, tp=8,
                                kv_heads=4) == 512 * 3584 * 2 // 4


def test_kv_heads_fewer_than_tp_keep_one_head_per_rank(tmp_path):
    model = mf.build_model(tmp_path, mf.QWEN3_4B, "nvfp4-ct")  # 32 heads, 8 kv heads
    plan = plan_model(str(model), gpus=16, tensor_parallel_size=16, max_model_len=4096)
    assert plan["kv_cache_bytes_per_token_per_gpu"] == 2 * 36 * 1 * 128 * 2
    assert plan["problems"] == []


# --- advice ---------------------------------------------------------------------------------

def test_too_long_context_gets_computed_fixes(models):
    plan = plan_model(str(models["32b"]), max_model_len=32768)
    assert not plan["fits"] and not plan["nothing_fits"]
    assert plan["max_kv_tokens"] == 27728
    assert plan["suggestions"] == [
        "--max-model-len 27648: room for 1 sequence at that length",
        "--max-model-len 6912: room for 4 sequences at that length",
        "--gpu-memory-utilization 0.94: room for 1 sequence of 32768 tokens (only if nothing "
        "else uses the GPUs; the rest of the card still holds the CUDA context, NCCL and "
        "graphs)",
        "--kv-cache-dtype fp8_e5m2 halves the KV cache per token: 1 sequence(s) of 32768 tokens "
        "(55472 tokens)",
    ]


def test_fp8_kv_is_refused_for_checkpoints_with_a_kv_cache_scheme(tmp_path):
    qcfg = {**mf.COMPRESSED_TENSORS_NVFP4, "kv_cache_scheme": {
        "num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
        "symmetric": True}}
    model = mf.build_model(tmp_path, mf.QWEN25_32B, "nvfp4-ct", quantization_config=qcfg)
    plan = plan_model(str(model), kv_cache_dtype="fp8_e5m2")
    assert "1Cat-vLLM issue #489" in plan["problems"][0]
    assert not plan["ok"]
    auto = plan_model(str(model))
    assert "--kv-cache-dtype fp8_e5m2 is not an option: the checkpoint carries a " \
           "kv_cache_scheme (1Cat-vLLM issue #489)" in auto["suggestions"]


def test_context_beyond_max_position_embeddings_is_a_problem(models):
    plan = plan_model(str(models["7b"]), max_model_len=65536)
    assert plan["problems"] == [
        "--max-model-len 65536 exceeds the model's limit 32768 (max_position_embeddings 32768): "
        "vLLM refuses it; use --max-model-len 32768 or less"
    ]
    assert not plan["ok"]


def test_tp_that_does_not_divide_heads_is_a_problem(models):
    plan = plan_model(str(models["7b"]), gpus=3, tensor_parallel_size=3)
    assert plan["problems"][0].startswith("num_attention_heads 28 is not divisible by "
                                          "--tensor-parallel-size 3")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tensor_parallel_size": 4}, "--tensor-parallel-size 4: must be between 1 and --gpus 2"),
        ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization 1.5: must be in (0, 1]"),
        ({"kv_cache_dtype": "fp8"}, "--kv-cache-dtype fp8: use one of auto, fp8_e5m2"),
        ({"engine": "sglang"}, "--engine sglang: use one of 1cat-vllm, vllm"),
        ({"engine_version": "latest"}, "engine version 'latest' is not a version like 1.5.0"),
        ({"compute_capability": "volta"}, "compute capability 'volta' is not like 7.0"),
        ({"cuda_graph_gib": -1}, "--cuda-graph-gib -1: must not be negative"),
        ({"max_num_batched_tokens": 0}, "--max-num-batched-tokens 0: must be between 1 and"),
        ({"overhead_gib": 1.5}, "unknown planner option(s): overhead_gib"),
    ],
)
def test_bad_options_are_invalid_input(models, options, message):
    with pytest.raises(PlanInputError) as caught:
        plan_model(str(models["7b"]), **options)
    assert str(caught.value).startswith(message)


# --- serve args, health ---------------------------------------------------------------------

def test_serve_args_for_1cat_on_v100(models):
    plan = plan_model(str(models["14b"]))
    assert plan["serve_args"] == {
        "--dtype": "half", "--tensor-parallel-size": 2, "--max-model-len": 8192,
        "--gpu-memory-utilization": 0.9, "--max-num-seqs": 123,
        "--attention-backend": "FLASH_ATTN_V100", "--disable-custom-all-reduce": True,
    }
    assert plan["serve_env"] == {}


def test_tensor_parallel_on_sm70_disables_custom_all_reduce_whatever_the_topology(models):
    """1Cat's maintainers report custom all-reduce failures on NVLink SXM2 V100s too."""
    without_health = plan_model(str(models["14b"]))
    nvlink = plan_model(str(models["14b"]), health=NVLINK_HEALTH)
    pcie = plan_model(str(models["14b"]), health=PCIE_HEALTH)
    for plan in (without_health, nvlink, pcie):
        assert plan["serve_args"]["--disable-custom-all-reduce"] is True
        assert "1Cat-vLLM #652/#430" in plan["serve_notes"][0]
    bare = plan_model(str(models["14b"]), health=PCIE_HEALTH["gpu_health"])
    assert bare["serve_args"] == pcie["serve_args"]
    single = plan_model(str(models["7b"]), health=PCIE_HEALTH, tensor_parallel_size=1)
    assert "--disable-custom-all-reduce" not in single["serve_args"]
    ampere = plan_model(str(models["14b"]), health=NVLINK_HEALTH, engine="vllm",
                        compute_capability="8.0")
    assert "--disable-custom-all-reduce" not in ampere["serve_args"]


def test_cross_socket_pair_also_disables_nccl_p2p(models):
    health = {"pairs": [{"gpus": [0, 1], "topology": "SYS", "p2p_read": "NOT_SUPPORTED"}]}
    plan = plan_model(str(models["14b"]), health=health)
    assert plan["serve_env"] == {"NCCL_P2P_DISABLE": "1"}
    assert plan["serve_args"]["--disable-custom-all-reduce"] is True


def test_health_recommendations_are_honoured_even_on_nvlink():
    topo = health_topology({"pairs": [{"gpus": [0, 1], "topology": "NV2"}],
                            "recommendations": {"disable_custom_all_reduce": True,
                                                "nccl_p2p_disable": True}})
    assert topo["pcie_only"] is False
    assert topo["disable_custom_all_reduce"] and topo["nccl_p2p_disable"]


def test_health_of_the_wrong_shape_is_invalid_input():
    with pytest.raises(PlanInputError, match="expected"):
        health_topology({"gpu_health": {"pairs": "PHB"}})
    with pytest.raises(PlanInputError):
        health_topology(["PHB"])


# --- engines --------------------------------------------------------------------------------

def test_upstream_vllm_refuses_modelopt_nvfp4_on_v100_with_its_own_words():
    engine, _ = check_engine("vllm", "", "nvfp4-modelopt", 70)
    assert engine["compatible"] is False
    assert ('"The quantization method modelopt_fp4 is not supported for the current GPU. '
            'Minimum capability: 75. Current capability: 70."') in engine["reason"]
    assert "--engine 1cat-vllm (>= 1.5.0 for this format)" in engine["reason"]


def test_upstream_vllm_refuses_compressed_tensors_nvfp4_on_v100(models):
    plan = plan_model(str(models["14b"]), engine="vllm")
    assert plan["engine"]["compatible"] is False
    assert ('"Quantization scheme is not supported for the current GPU. Min capability: 75. '
            'Current capability: 70."') in plan["engine"]["reason"]
    assert plan["problems"] == [f"engine: {plan['engine']['reason']}"]
    assert plan["fits"] and not plan["ok"]
    assert plan["serve_args"]["--attention-backend"] == "TRITON_ATTN"


def test_upstream_vllm_accepts_nvfp4_from_turing_up():
    engine, _ = check_engine("vllm", "", "nvfp4-compressed-tensors", 75)
    assert engine["compatible"] is True


@pytest.mark.parametrize(
    ("version", "fmt", "compatible"),
    [
        ("1.2.0", "nvfp4-compressed-tensors", False),
        ("1.3.0", "nvfp4-compressed-tensors", True),
        ("1.3.0", "nvfp4-modelopt", False),
        ("1.4.9", "nvfp4-modelopt", False),
        ("1.5.0", "nvfp4-modelopt", True),
        ("v1.5.1", "nvfp4-modelopt", True),
        ("1.5.0", "fp16", True),
        ("1.5.0", "fp8", False),
        ("1.5.0", "unknown", False),
    ],
)
def test_1cat_vllm_version_rules(version, fmt, compatible):
    engine, _ = check_engine("1cat-vllm", version, fmt, 70)
    assert engine["compatible"] is compatible


def test_1cat_vllm_default_version_is_1_5_0(models):
    plan = plan_model(str(models["14b-modelopt"]))
    assert plan["engine"] == {
        "name": "1cat-vllm", "version": "1.5.0", "compatible": True,
        "reason": "1cat-vllm 1.5.0 runs nvfp4-modelopt on SM70 as W4A16 (no --quantization "
                  "flag: the format is auto-detected)",
    }
    old = plan_model(str(models["14b-modelopt"]), engine_version="1.3.0")
    assert old["engine"]["compatible"] is False
    assert "needs >= 1.5.0" in old["engine"]["reason"]
