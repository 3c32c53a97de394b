"""Every `vllm serve` command the serve role can compose is parsed by upstream vLLM's own parser
(issue 48, item 2): a flag that does not exist, or takes another form, fails here and not in a
node's crash loop.

The commands come from onecat's own code, as the role makes them: the planner
(onecat.model.plan.plan_model, with the user's overrides through
onecat.model.overrides.effective_options, as library/model_plan.py does) over the model shapes
of tests/model_fixtures.py, then onecat.serve.flags merge_args and serve_argv with the role's
--host/--port/--served-model-name and key guard (library/vllm_serve_command.py,
roles/vllm_serve/tasks/command.yml). A flag the planner learns is parsed once a case reaches
it, and test_the_cases_reach_every_flag_the_planner_sets names any flag no case reaches.
The fork-only flags and values (onecat/serve/fork_flags.py) are taken out first; that each one
is still refused upstream is checked too, so the list cannot go stale unseen.

The parser runs in the real engine's venv (tests/real_engine/engine.py venv()), once for all
commands: tests/real_engine/parse_serve_args.py. No server starts.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import engine
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model import plan as plan_module
from onecat.model.overrides import effective_options
from onecat.model.plan import plan_model
from onecat.serve.flags import merge_args, serve_argv
from onecat.serve.fork_flags import FORK_ONLY_FLAGS, FORK_ONLY_VALUES, split_fork_only

pytestmark = pytest.mark.real_engine

PARSER = Path(__file__).resolve().parent / "parse_serve_args.py"
REPO = Path(__file__).resolve().parents[2]
# What the facts of a 2x V100-16GB PCIe pair say (as tests/unit/test_plan_hybrid.py).
V100_16GB = {"gpu_health": {"pairs": [{"gpus": [0, 1], "topology": "PHB"}],
                            "gpus": [{"index": 0, "memory_total_mib": 16160},
                                     {"index": 1, "memory_total_mib": 16160}]}}
# The planner inputs roles/vllm_serve/defaults/main.yml gives (vllm_serve_*).
ROLE_OPTIONS: dict[str, Any] = {
    "gpus": 2, "gpu_memory_gib": 16.0, "gpu_memory_utilization": 0.85, "max_model_len": 8192,
    "tensor_parallel_size": 2, "kv_cache_dtype": "auto", "engine": "1cat-vllm",
    "compute_capability": "7.0", "max_num_batched_tokens": 2048,
    "typical_input_tokens": 500, "typical_output_tokens": 256,
}
MTP = {"method": "mtp", "num_speculative_tokens": 2}
# name -> (model, planner options over ROLE_OPTIONS, vllm_serve_args, vllm_serve_extra_args):
# each reaches a branch of onecat/model/plan.py _serve_args, or an override the docs advise.
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], list[str]]] = {
    "role defaults, 1cat-vllm, FLASH_ATTN_V100, TP2 on sm_70": ("qwen2.5-7b", {}, {}, []),
    "fp8 KV cache, a non-default batched-token budget": (
        "qwen2.5-14b", {"kv_cache_dtype": "fp8_e5m2", "max_num_batched_tokens": 4096}, {}, []),
    "one GPU, no all-reduce": ("llama3.1-8b", {"gpus": 1, "tensor_parallel_size": 1}, {}, []),
    "1cat-vllm, head_dim 80: TRITON_ATTN": ("head-dim-80", {}, {}, []),
    "multimodal hybrid served text-only, MTP": (
        "qwen3.5-tiny", {"speculative_config": MTP}, {}, []),
    "MTP through the fork's switch": (
        "qwen3.5-tiny", {"engine_env": {"VLLM_1CAT_ENABLE_SM70_MTP_DEFAULTS": "1"}}, {}, []),
    # Upstream cannot run NVFP4 below sm_75 (onecat/model/engines.py): an fp16 checkpoint.
    "upstream vllm on sm_70, prefix caching off as its note advises": (
        "qwen3-4b-fp16", {"engine": "vllm"}, {}, ["--no-enable-prefix-caching"]),
    "upstream vllm on sm_80, fp16 checkpoint": (
        "qwen3-4b-fp16", {"engine": "vllm", "compute_capability": "8.0"}, {}, []),
    # library/vllm_serve_command.py EXAMPLES and docs/serve.md: an override and an extra flag.
    "the module's example overrides": (
        "qwen2.5-14b", {}, {"max_num_seqs": 32}, ["--enable-prefix-caching"]),
    "an override removes a planned flag, underscores in a name": (
        "qwen2.5-7b", {}, {"max_num_seqs": None, "kv_cache_dtype": "fp8_e5m2"},
        ["--max_num_batched_tokens=4096"]),
}


def build_models(root: Path) -> dict[str, Path]:
    head80 = {**mf.QWEN3_4B, "head_dim": 80}
    return {
        "qwen2.5-7b": mf.build_model(root, mf.QWEN25_7B, "nvfp4-ct", name="q7"),
        "qwen2.5-14b": mf.build_model(root, mf.QWEN25_14B, "nvfp4-modelopt", name="q14"),
        "llama3.1-8b": mf.build_model(root, mf.LLAMA31_8B, "nvfp4-ct", name="l8"),
        "head-dim-80": mf.build_model(root, head80, "nvfp4-ct", name="h80"),
        "qwen3.5-tiny": mf.build_model(root, mf.QWEN35_TINY, "nvfp4-ct", name="q35"),
        "qwen3-4b-fp16": mf.build_model(root, mf.QWEN3_4B, "fp16", name="q3"),
    }


def planner_flags() -> set[str]:
    """Every flag onecat/model/plan.py _serve_args can set (a dict key or an args[...] store),
    and the one roles/vllm_serve/tasks/plan.yml adds: the cases must reach each."""
    source = inspect.getsource(plan_module._serve_args)
    found = set(re.findall(r"[\"'](--[a-z0-9-]+)[\"']\s*(?:\]\s*=|:)", source))
    role = (REPO / "roles" / "vllm_serve" / "tasks" / "plan.yml").read_text()
    return found | set(re.findall(r"combine\(\{'(--[a-z0-9-]+)'", role))


def role_command(model_dir: Path, options: dict[str, Any], args: dict[str, Any],
                 extra_args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The argv after `vllm` the serve role writes into its unit, and the plan behind it."""
    overrides, _ = effective_options(args, extra_args)
    plan = plan_model(str(model_dir), health=V100_16GB,
                      **{**ROLE_OPTIONS, **options, **overrides})
    merged = merge_args(plan["serve_args"], args)
    return serve_argv("/models/m", "m", "0.0.0.0", 8000, merged, extra_args, guard=True), plan


def upstream_parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Each argv through upstream vLLM's `vllm serve` parser: {"ok": ...[, "error": ...]}."""
    if engine.off():
        pytest.skip(engine.OFF_REASON)
    try:
        python = engine.venv() / "bin" / "python"
    except engine.EngineUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    done = subprocess.run([str(python), str(PARSER)], input=json.dumps(argvs),
                          capture_output=True, text=True, timeout=300, check=False,
                          env=engine.quiet_env({"VLLM_NO_USAGE_STATS": "1"}))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert len(results) == len(argvs)
    return results


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    models = build_models(tmp_path_factory.mktemp("parser-models"))
    made: dict[str, list[str]] = {}
    for name, (model, options, args, extra) in CASES.items():
        made[name], plan = role_command(models[model], options, args, extra)
        # A plan the role would refuse (library/model_plan.py fail_on_misfit) emits nothing.
        assert plan["ok"], (name, plan["problems"], plan["fit_reason"])
    return made


# Deliberately wrong: a flag upstream does not have, and a right flag with a wrong value form.
WRONG: dict[str, tuple[list[str], str]] = {
    "misspelt flag": (["--max-model-length", "4096"],
                      "vllm: error: unrecognized arguments: --max-model-length 4096"),
    "word for a number": (["--tensor-parallel-size", "two"],
                          "vllm serve: error: argument --tensor-parallel-size/-tp: invalid int "
                          "value: 'two'"),
    "dtype not a choice": (["--dtype", "fp16"], "argument --dtype: invalid choice: 'fp16'"),
    "speculative config not JSON": (
        ["--speculative-config", "{method: mtp}"],
        "argument --speculative-config/-sc: Value {method: mtp} cannot be converted"),
}


@pytest.fixture(scope="module")
def parsed(commands: dict[str, list[str]]) -> dict[str, Any]:
    """One run of the parser for everything the tests ask (vllm's import takes ~12 s)."""
    base = commands["role defaults, 1cat-vllm, FLASH_ATTN_V100, TP2 on sm_70"]
    asks: dict[tuple[str, str], list[str]] = {}
    for name, argv in commands.items():
        # Upstream is the engine of an engine: vllm case, so nothing is taken out there.
        fork = {**ROLE_OPTIONS, **CASES[name][1]}["engine"] == "1cat-vllm"
        asks[("emitted", name)] = split_fork_only(argv)[0] if fork else argv
    for name, (wrong, _) in WRONG.items():
        asks[("wrong", name)] = [*split_fork_only(base)[0], *wrong]
    for flag, (value, _) in FORK_ONLY_FLAGS.items():
        asks[("fork flag", flag)] = ["serve", "/models/m", flag, *([value] if value else [])]
    for flag, value in FORK_ONLY_VALUES:
        asks[("fork value", f"{flag} {value}")] = ["serve", "/models/m", flag, value]
    results = upstream_parse(list(asks.values()))
    return {"asks": asks, **dict(zip(asks, results, strict=True))}


def test_every_command_the_serve_role_composes_parses_with_upstream_vllm(commands, parsed):
    refused = {name: parsed[("emitted", name)]["error"] for name in commands
               if not parsed[("emitted", name)]["ok"]}
    assert not refused, ("upstream vLLM's `vllm serve` parser refuses what the serve role "
                         "composes; fix onecat/serve/flags.py or the planner, or list a "
                         f"fork-only flag in onecat/serve/fork_flags.py: {refused}")


def test_the_cases_reach_every_flag_the_planner_sets(commands):
    emitted = {item.partition("=")[0] for argv in commands.values() for item in argv
               if item.startswith("--")}
    expected = planner_flags()
    assert {"--dtype", "--attention-backend", "--speculative-config"} <= expected
    assert expected <= emitted, f"add a case that reaches {sorted(expected - emitted)}"
    # The role's own flags are in every command: they are parsed too.
    assert {"--host", "--port", "--served-model-name", "--middleware"} <= emitted


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_flag_is_refused_with_the_parsers_message(parsed, name):
    """The check can fail: the role's own command plus one wrong flag is refused."""
    result = parsed[("wrong", name)]
    assert result["ok"] is False
    assert WRONG[name][1] in result["error"], result["error"]


def test_the_fork_only_flags_and_values_are_still_refused_upstream(parsed):
    """A fork-only entry upstream takes is stale: it would skip a check for nothing."""
    sources = {**{("fork flag", flag): source for flag, (_, source) in FORK_ONLY_FLAGS.items()},
               **{("fork value", f"{flag} {value}"): source
                  for (flag, value), source in FORK_ONLY_VALUES.items()}}
    stale = [f"{ask[1]} (fork: {source})" for ask, source in sources.items() if parsed[ask]["ok"]]
    assert not stale, f"upstream vLLM now takes these; remove them from fork_flags.py: {stale}"
    refused = parsed[("fork value", "--attention-backend FLASH_ATTN_V100")]["error"]
    assert "Unknown attention backend: 'FLASH_ATTN_V100'" in refused


def test_fork_only_flags_are_taken_out_with_their_values():
    argv = ["serve", "/m", "--dtype", "half", "--attention-backend", "FLASH_ATTN_V100",
            "--calculate-kv-scales", "--max-num-partial-prefills=2",
            "--override-attention-dtype", "float16", "--attention-backend", "TRITON_ATTN"]
    kept, taken = split_fork_only(argv)
    assert kept == ["serve", "/m", "--dtype", "half", "--attention-backend", "TRITON_ATTN"]
    assert taken == [["--attention-backend", "FLASH_ATTN_V100"], ["--calculate-kv-scales"],
                     ["--max-num-partial-prefills=2"], ["--override-attention-dtype", "float16"]]
