"""Speculative decoding (MTP) detected and planned on a Gated DeltaNet hybrid (issue 50, item 7).

The fork's opt-in (VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1, engine/arg_utils.py:1780-1799) or a
--speculative-config widens the conv state by n positions (mamba_utils.py:220-241), holds 2 + n
state blocks per linear group and request in align mode (kv_cache_interface.py:588-590), and
its drafter adds the MTP decoder layer (full attention, qwen3_5_mtp.py:165-172) and the mtp.*
weights the target skips. Line numbers: 1CatAI/1Cat-vLLM at ae13773a.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model import cli as plan_cli
from onecat.model.plan import PlanInputError, plan_model

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
V100_16GB = {"gpu_health": {"pairs": [{"gpus": [0, 1], "topology": "PHB"}],
                            "gpus": [{"index": 0, "memory_total_mib": 16160},
                                     {"index": 1, "memory_total_mib": 16160}]}}
MTP4_ENV = {"VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS": "1"}
MTP4_FLAG = '{"method": "mtp", "num_speculative_tokens": 4}'


def mtp_layer_rows(text: dict[str, Any], fmt: str) -> list[tuple[str, str, list[int]]]:
    """The MTP decoder layer a Qwen3.5 checkpoint carries next to mtp.fc / mtp.norm (the
    fixture's): gated full attention and MLP, their linears in the checkpoint's format (only fc
    stays 16-bit, qwen3_5_mtp.py:146-154), and the two pre-fc norms (qwen3_5_mtp.py:178-184)."""
    hidden, inter = text["hidden_size"], text["intermediate_size"]
    heads, kv, head_dim = text["num_attention_heads"], text["num_key_value_heads"], \
        text["head_dim"]
    p = "mtp.layers.0"
    rows = [(f"{p}.input_layernorm.weight", "BF16", [hidden]),
            (f"{p}.post_attention_layernorm.weight", "BF16", [hidden])]
    rows += mf._linear(f"{p}.self_attn.q_proj", 2 * heads * head_dim, hidden, fmt, False)
    rows += mf._linear(f"{p}.self_attn.k_proj", kv * head_dim, hidden, fmt, False)
    rows += mf._linear(f"{p}.self_attn.v_proj", kv * head_dim, hidden, fmt, False)
    rows += mf._linear(f"{p}.self_attn.o_proj", hidden, heads * head_dim, fmt, False)
    rows += [(f"{p}.self_attn.q_norm.weight", "BF16", [head_dim]),
             (f"{p}.self_attn.k_norm.weight", "BF16", [head_dim])]
    rows += mf._linear(f"{p}.mlp.gate_proj", inter, hidden, fmt, False)
    rows += mf._linear(f"{p}.mlp.up_proj", inter, hidden, fmt, False)
    rows += mf._linear(f"{p}.mlp.down_proj", hidden, inter, fmt, False)
    rows += [("mtp.pre_fc_norm_embedding.weight", "BF16", [hidden]),
             ("mtp.pre_fc_norm_hidden.weight", "BF16", [hidden])]
    return rows


def build_with_mtp(root: Path, config: dict[str, Any], name: str) -> Path:
    model = mf.build_model(root, config, "nvfp4-ct", name=name)
    rows = mf.tensor_layout(config, "nvfp4-ct") + mtp_layer_rows(config["text_config"],
                                                                  "nvfp4-ct")
    mf.write_safetensors(model / "model.safetensors", rows)
    return model


@pytest.fixture(scope="module")
def q35(tmp_path_factory) -> Path:
    return build_with_mtp(tmp_path_factory.mktemp("mtp"), mf.QWEN35_27B, "q35-mtp")


@pytest.fixture(scope="module")
def plans(q35) -> dict[str, dict[str, Any]]:
    return {"plain": plan_model(str(q35), health=V100_16GB),
            "env": plan_model(str(q35), health=V100_16GB, engine_env=MTP4_ENV),
            "flag": plan_model(str(q35), health=V100_16GB, speculative_config=MTP4_FLAG)}


def forks_allocator(kv_budget: int, spec_tokens: int, mtp_layers: int,
                    length: int = 8192) -> dict[str, int]:
    """1Cat-vLLM's allocator for a Qwen3.5-27B-shaped config at TP2 given the profiled KV budget,
    computed from the fork's formulas and the config, not from the planner."""
    tp, element = 2, 2
    attn_token = 2 * (4 // tp) * 256 * element  # FullAttentionSpec, kv_cache_interface.py
    conv = (2 * 16 * 128 + 48 * 128) // tp * (4 - 1 + spec_tokens) * 2  # mamba_utils.py:220-241
    ssm = 48 // tp * 128 * 128 * 4  # float32 recurrent state
    block = 16 * math.ceil((conv + ssm) / (16 * attn_token))  # platforms/interface.py:641-690
    page = block * attn_token
    full, linear = 16 + mtp_layers, 48
    group = min(full, linear) if max(full, linear) >= 1.5 * min(full, linear) \
        else max(full, linear)  # kv_cache_utils.py:1142-1176
    blocks = kv_budget // page // group  # get_num_blocks, kv_cache_utils.py:935-952
    per_request = (math.ceil(full / group) * math.ceil(length / block)
                   + math.ceil(linear / group) * (2 + spec_tokens))  # 877-895, interface 588
    return {"block": block, "page": page, "group": group, "blocks": blocks,
            "per_request": per_request, "tokens": int(blocks / per_request * length)}


def test_the_forks_mtp4_switch_is_detected_and_planned(plans):
    plan = plans["env"]
    spec = plan["speculation"]
    assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == 4
    assert spec["source"].startswith("VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1")
    assert spec["drafter_attention_layers"] == 1 and spec["drafter_weights"] == "mtp.*"
    assert plans["plain"]["speculation"] is None
    hybrid = plan["hybrid"]
    # conv state: 10240/2 x (4 - 1 + 4) x 2 B; recurrent unchanged.
    assert hybrid["conv_state_bytes"] == 5120 * 7 * 2 == 71680
    assert hybrid["block_size"] == 816 and hybrid["group_size"] == 17
    # 2 + 4 state blocks per linear group: 3 groups x 6 = 18; a full-length request 11 + 18.
    assert hybrid["state_blocks_per_sequence"] == 18
    assert hybrid["blocks_per_request"] == 29
    # What a request holds in align mode, not one copy of the state.
    assert hybrid["state_bytes_held_per_sequence"] == 18 * 816 * 2048 * 17
    assert plan["serve_env"] == MTP4_ENV
    assert plan["ok"], plan["problems"]


def test_mtp4_kv_tokens_match_the_forks_allocator_within_1_percent(plans):
    for name, spec_tokens, mtp_layers in (("plain", 0, 0), ("env", 4, 1), ("flag", 4, 1)):
        plan = plans[name]
        fork = forks_allocator(plan["memory_per_gpu"]["kv_budget_bytes"], spec_tokens,
                               mtp_layers)
        assert abs(plan["max_kv_tokens"] - fork["tokens"]) <= 0.01 * fork["tokens"], name
        assert plan["hybrid"]["num_blocks"] == fork["blocks"]
    # MTP4 costs about half the KV tokens (the state per request triples, the drafter's
    # weights and attention layer come out of the same budget) and 8 typical requests fit.
    ratio = plans["env"]["max_kv_tokens"] / plans["plain"]["max_kv_tokens"]
    assert 0.45 < ratio < 0.55
    assert plans["env"]["serve_args"]["--max-num-seqs"] == 8
    assert plans["plain"]["serve_args"]["--max-num-seqs"] == 25


def test_the_speculative_config_flag_plans_like_the_switch(plans):
    flag, env = plans["flag"], plans["env"]
    assert flag["max_kv_tokens"] == env["max_kv_tokens"]
    assert flag["hybrid"] == env["hybrid"]
    assert json.loads(flag["serve_args"]["--speculative-config"]) == json.loads(MTP4_FLAG)
    assert flag["speculation"]["source"] == "--speculative-config"


def test_the_drafter_weights_and_attention_layer_are_counted(q35, plans):
    plain, env = plans["plain"], plans["env"]
    # The mtp.* tensors at TP2: NVFP4 linears split as the target's (TurboMind: FP8 block
    # scales kept as FP16), fc column-parallel (qwen3_5_mtp.py:155-163), norms whole.
    rows = [r for r in mf.tensor_layout(mf.QWEN35_27B, "nvfp4-ct")
            + mtp_layer_rows(mf.QWEN35_27B_TEXT, "nvfp4-ct") if r[0].startswith("mtp.")]
    expected = 0
    for name, dtype, shape in rows:
        size = mf.nbytes(dtype, shape) * (2 if dtype == "F8_E4M3" and len(shape) == 2 else 1)
        leaf = name.rsplit(".", 2)[-2]
        expected += size if len(shape) <= 1 or leaf.endswith("norm") else size // 2
    assert env["weight_bytes_per_gpu"] - plain["weight_bytes_per_gpu"] == expected
    assert env["speculation"]["drafter_weight_bytes_per_gpu"] == expected
    # KV per token: 17 attention layers (16 + the MTP layer).
    assert env["kv_cache_bytes_per_token_per_gpu"] == 2 * 17 * 2 * 256 * 2


def test_n_predict_is_the_default_count_and_a_count_must_divide(q35):
    plan = plan_model(str(q35), health=V100_16GB, speculative_config={"method": "mtp"})
    assert plan["speculation"]["num_speculative_tokens"] == 1
    assert plan["hybrid"]["state_blocks_per_sequence"] == 3 * 3


def test_the_switch_is_read_as_the_engine_reads_it(q35):
    plan = plan_model(str(q35), health=V100_16GB,
                      engine_env={"VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS": "true"})
    assert plan["speculation"] is None
    assert any(p.startswith("VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS='true': the engine reads it "
                            "as bool(int(value))") for p in plan["problems"])
    off = plan_model(str(q35), health=V100_16GB,
                     engine_env={**MTP4_ENV, "VLLM_1CAT_DISABLE_SM70_MTP_DEFAULTS": "1"})
    assert off["speculation"] is None
    # Upstream vLLM has no such switch.
    upstream = plan_model(str(q35), health=V100_16GB, engine="vllm", engine_env=MTP4_ENV)
    assert upstream["speculation"] is None


def test_a_checkpoint_without_an_mtp_head_gets_no_mtp(tmp_path):
    text = {**mf.QWEN35_27B_TEXT, "mtp_num_hidden_layers": 0}
    model = mf.build_model(tmp_path, {**mf.QWEN35_27B, "text_config": text}, "nvfp4-ct")
    switched = plan_model(str(model), health=V100_16GB, engine_env=MTP4_ENV)
    assert switched["speculation"] is None
    assert any("has no MTP layers" in w for w in switched["warnings"])
    flagged = plan_model(str(model), health=V100_16GB, speculative_config=MTP4_FLAG)
    assert any(p.startswith("--speculative-config method mtp: the checkpoint has no MTP layers")
               for p in flagged["problems"])


@pytest.mark.parametrize("bad", ["{not json", "[4]", '{"num_speculative_tokens": 0}',
                                 '{"method": 4}'])
def test_a_malformed_speculative_config_is_invalid_input(q35, bad):
    with pytest.raises(PlanInputError, match="--speculative-config"):
        plan_model(str(q35), speculative_config=bad)


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="onecat")
    plan_cli.register(parser.add_subparsers(dest="command"))
    return (args := parser.parse_args(["plan", *argv])).func(args)


def test_onecat_plan_takes_the_switch_and_the_flag(q35, tmp_path, capsys):
    health = tmp_path / "health.json"
    health.write_text(json.dumps(V100_16GB))
    assert _cli(str(q35), "--health", str(health), "--env",
                "VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1") == 0
    out = capsys.readouterr().out
    assert "speculate   mtp 4 tokens from VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1" in out
    assert "align mode holds 18 state blocks" in out
    assert "serve env   VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS=1" in out
    assert _cli(str(q35), "--health", str(health), "--speculative-config", MTP4_FLAG,
                "--json") == 0
    assert json.loads(capsys.readouterr().out)["speculation"]["num_speculative_tokens"] == 4
    assert _cli(str(q35), "--env", "NOEQUALS") == 2
    assert "--env 'NOEQUALS': expected NAME=VALUE" in capsys.readouterr().err
    assert _cli(str(q35), "--speculative-config", "{") == 2


def test_docs_carry_the_mtp4_figures(plans):
    """docs/plan.md derives the MTP4 figures by hand; they must be the planner's."""
    text = (REPO / "docs" / "plan.md").read_text()
    section = text[text.index("#### Speculative decoding (MTP)"):]
    plain, env = plans["plain"], plans["env"]
    for figure in (f"{plain['max_kv_tokens']:,}", f"{env['max_kv_tokens']:,}",
                   f"{env['hybrid']['num_blocks']} blocks", f"{plain['hybrid']['num_blocks']} "
                   "blocks", f"{env['memory_per_gpu']['kv_budget_bytes']:,}",
                   f"{plain['memory_per_gpu']['kv_budget_bytes']:,}",
                   f"{env['speculation']['drafter_weight_bytes_per_gpu']:,}"):
        assert figure in section, figure
