"""What the fork refuses at startup for a hybrid, refused by the plan first (issue 50, item 6).

1Cat-vLLM (ae13773a) asserts block_size <= max_num_batched_tokens in mamba_cache_mode align
(config/vllm.py:2607-2614) and raises when max_num_seqs exceeds the Mamba cache blocks it
captures full decode CUDA graphs for (config/compilation.py:1455-1477); the serve role plans
with the user's vllm_serve_args / vllm_serve_extra_args / vllm_serve_env, as the server starts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model import cli as plan_cli
from onecat.model.plan import plan_model

REPO = Path(__file__).resolve().parents[2]
V100_16GB = {"gpu_health": {"pairs": [{"gpus": [0, 1], "topology": "PHB"}],
                            "gpus": [{"index": 0, "memory_total_mib": 16160},
                                     {"index": 1, "memory_total_mib": 16160}]}}
# Qwen3-Next-80B-A3B's attention and Gated DeltaNet dimensions (published config.json: 2 kv
# heads of 256, 16 key / 32 value GDN heads of 128, conv kernel 4, every 4th layer full
# attention); a dense MLP stands in for the experts, which the block rule does not read.
QWEN3_NEXT_TEXT: dict[str, Any] = {
    **mf.QWEN35_27B_TEXT, "model_type": "qwen3_next", "hidden_size": 2048,
    "intermediate_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "vocab_size": 151936,
}
QWEN3_NEXT: dict[str, Any] = {"architectures": ["Qwen3NextForCausalLM"],
                              "model_type": "qwen3_next", "torch_dtype": "bfloat16",
                              "text_config": QWEN3_NEXT_TEXT}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("limits")
    return {"next": mf.build_model(root, QWEN3_NEXT, "nvfp4-ct", name="next"),
            "q35": mf.build_model(root, mf.QWEN35_27B, "nvfp4-ct", shards=4, name="q35")}


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="onecat")
    plan_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


def _health(tmp_path: Path) -> str:
    path = tmp_path / "health.json"
    path.write_text(json.dumps(V100_16GB))
    return str(path)


def _block_problems(plan: dict[str, Any]) -> list[str]:
    return [p for p in plan["problems"] if "hybrid block" in p]


# --- the block vs --max-num-batched-tokens ---------------------------------------------------

def test_fp8_kv_on_qwen3_next_at_tp2_is_refused_naming_the_block_and_the_step(models, tmp_path,
                                                                              capsys):
    plan = plan_model(str(models["next"]), health=V100_16GB, kv_cache_dtype="fp8_e5m2")
    # Attention page per token at TP2: 2 x 1 kv head x 256 x 1 B = 512 B; state per GDN layer:
    # conv 8192/2 x 3 x 2 B + recurrent 16 x 128 x 128 x 4 B = 1,073,152 B = 131 x 16 x 512.
    assert plan["hybrid"]["block_size"] == 16 * 131 == 2096
    [problem] = _block_problems(plan)
    assert problem.startswith("--max-num-batched-tokens 2048 is below the 2,096-token hybrid "
                              "block that mamba_cache_mode align needs")
    assert "config/vllm.py:2607-2614" in problem
    assert "raise --max-num-batched-tokens to 2096 or more" in problem
    assert "or use --kv-cache-dtype auto (float16 KV: a 1,056-token block" in problem
    assert not plan["ok"]
    assert _cli(str(models["next"]), "--health", _health(tmp_path),
                "--kv-cache-dtype", "fp8_e5m2") == 1
    assert "2,096-token hybrid block" in capsys.readouterr().out


def test_a_step_below_the_float16_block_is_refused(models):
    plan = plan_model(str(models["next"]), health=V100_16GB, max_num_batched_tokens=1024)
    assert plan["hybrid"]["block_size"] == 1056
    [problem] = _block_problems(plan)
    assert problem.startswith("--max-num-batched-tokens 1024 is below the 1,056-token hybrid "
                              "block")
    assert problem.endswith("raise --max-num-batched-tokens to 1056 or more")
    assert not plan["ok"]


def test_a_step_that_holds_the_block_is_not_refused(models):
    assert _block_problems(plan_model(str(models["next"]), health=V100_16GB)) == []
    fp8 = plan_model(str(models["next"]), health=V100_16GB, kv_cache_dtype="fp8_e5m2",
                     max_num_batched_tokens=2096)
    assert _block_problems(fp8) == [] and fp8["ok"]


def _suggested_options(tip: str) -> dict[str, Any]:
    """The planner options a suggestion sets ('--kv-cache-dtype fp8_e5m2 with
    --max-num-batched-tokens 2096 ...')."""
    options: dict[str, Any] = {}
    for flag, value in re.findall(r"(--[a-z-]+) ([\w.]+)", tip):
        options[flag[2:].replace("-", "_")] = value
    return options


def test_the_fp8_suggestion_comes_with_the_step_its_block_needs(models):
    # At the full context only 3 sequences fit: the plan offers fp8 KV, whose block (2,096
    # tokens) the default step of 2048 would make the engine refuse.
    plan = plan_model(str(models["next"]), health=V100_16GB, max_model_len=262144)
    [tip] = [s for s in plan["suggestions"] if "fp8_e5m2" in s]
    assert tip.startswith("--kv-cache-dtype fp8_e5m2 with --max-num-batched-tokens 2096")
    # Every suggestion, taken as it is written, plans without a startup refusal.
    for suggestion in plan["suggestions"]:
        options = {"max_model_len": 262144, **_suggested_options(suggestion)}
        again = plan_model(str(models["next"]), health=V100_16GB, **options)
        assert again["problems"] == [], (suggestion, again["problems"])


# --- --max-num-seqs vs the Mamba cache blocks ------------------------------------------------

def test_max_num_seqs_256_on_qwen35_27b_on_2x16gb_is_refused_naming_the_blocks(models, tmp_path,
                                                                               capsys):
    plan = plan_model(str(models["q35"]), health=V100_16GB, max_num_seqs=256)
    blocks = plan["hybrid"]["num_blocks"]
    assert 0 < blocks < 256
    [problem] = [p for p in plan["problems"] if "Mamba cache blocks" in p]
    assert problem.startswith(f"--max-num-seqs 256 exceeds the {blocks} Mamba cache blocks")
    assert "config/compilation.py:1455-1477" in problem
    assert f"use --max-num-seqs {blocks} or less" in problem
    assert not plan["ok"]
    assert not any("scheduler will queue" in w for w in plan["warnings"])
    # The fix, as written, starts: a smaller sampler pass only adds blocks.
    fixed = plan_model(str(models["q35"]), health=V100_16GB, max_num_seqs=blocks)
    assert fixed["hybrid"]["num_blocks"] >= blocks and fixed["ok"], fixed["problems"]
    assert _cli(str(models["q35"]), "--health", _health(tmp_path), "--max-num-seqs", "256") == 1
    assert f"exceeds the {blocks} Mamba cache blocks" in capsys.readouterr().out


def test_the_planned_max_num_seqs_is_never_above_the_blocks(models):
    for name in ("q35", "next"):
        plan = plan_model(str(models[name]), health=V100_16GB)
        assert plan["serve_args"]["--max-num-seqs"] <= plan["hybrid"]["num_blocks"]
        assert plan["ok"], plan["problems"]


# --- the role plans the flags the server gets ------------------------------------------------

def test_user_flags_become_planner_options():
    from onecat.model.overrides import effective_options

    options, sources = effective_options(
        {"max_num_seqs": 256, "--kv_cache_dtype": "fp8_e5m2", "enforce-eager": True},
        ["--max-num-batched-tokens=4096", "--speculative-config", '{"method": "mtp"}',
         "--max-num-seqs", "64"])
    assert options == {"max_num_seqs": "64", "kv_cache_dtype": "fp8_e5m2",
                       "max_num_batched_tokens": "4096",
                       "speculative_config": '{"method": "mtp"}'}
    assert sources["max_num_seqs"] == "vllm_serve_extra_args --max-num-seqs"
    assert sources["kv_cache_dtype"] == "vllm_serve_args --kv_cache_dtype"
    # A removed flag (null/false) is the engine's default.
    removed, _ = effective_options({"max_num_seqs": None, "kv_cache_dtype": False}, [])
    assert removed == {"max_num_seqs": 256, "kv_cache_dtype": "auto"}


def test_the_serve_role_plans_with_the_users_flags_and_environment():
    tasks = yaml.safe_load((REPO / "roles" / "vllm_serve" / "tasks" / "plan.yml").read_text())
    [plan] = [task["model_plan"] for task in tasks if "model_plan" in task]
    assert plan["args"] == "{{ vllm_serve_args }}"
    assert plan["extra_args"] == "{{ vllm_serve_extra_args }}"
    assert plan["engine_env"] == "{{ vllm_serve_env }}"


@pytest.mark.skipif(not (Path(sys.executable).parent / "ansible").exists(),
                    reason="ansible is not installed next to this Python")
def test_the_module_refuses_a_recipes_max_num_seqs_256(models):
    env = {**os.environ, "ANSIBLE_LIBRARY": str(REPO / "library"),
           "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "ANSIBLE_STDOUT_CALLBACK": "minimal"}
    module_args = {"model_dir": str(models["q35"]), "health": V100_16GB,
                   "gpu_memory_utilization": 0.9, "args": {"max_num_seqs": 256}}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-i",
         "localhost,", "-m", "model_plan", "-e", f"ansible_python_interpreter={sys.executable}",
         "-a", json.dumps(module_args)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    result = json.loads(done.stdout[done.stdout.index("=> {") + 3:])
    assert done.returncode != 0
    assert "--max-num-seqs 256 exceeds the" in result["msg"]
    assert result["plan"]["overrides"] == {"max_num_seqs": "vllm_serve_args max_num_seqs"}
