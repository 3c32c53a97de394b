"""`onecat plan`: exit status, JSON keys, the table, every invalid input; the Ansible module."""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model import cli as plan_cli
from onecat.model.plan import DEFAULTS, WORKLOAD_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
STABLE_KEYS = {
    "model_type": str, "architecture": str, "quant_format": str, "problems": list,
    "warnings": list, "engine": dict, "weight_bytes": int, "weight_bytes_per_gpu": int,
    "kv_cache_bytes_per_token": int, "kv_cache_bytes_per_gpu": int, "max_kv_tokens": int,
    "max_concurrency_at_max_model_len": int, "fits": bool, "suggestions": list,
    "serve_args": dict,
}


def run_plan(*argv: str) -> int:
    """Parse with a parser holding only `plan`, as onecat.cli does, and run it."""
    parser = argparse.ArgumentParser(prog="onecat")
    plan_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-models")
    return {
        "14b": mf.build_model(root, mf.QWEN25_14B, "nvfp4-ct", shards=3),
        "70b": mf.build_model(root, mf.LLAMA31_70B, "nvfp4-ct", shards=4),
    }


def test_json_output_has_the_stable_keys_and_exit_0_when_it_fits(models, capsys):
    assert run_plan(str(models["14b"]), "--json") == 0
    plan = json.loads(capsys.readouterr().out)
    for key, kind in STABLE_KEYS.items():
        assert isinstance(plan[key], kind), key
    assert set(plan["engine"]) == {"name", "version", "compatible", "reason"}
    assert plan["quant_format"] == "nvfp4-compressed-tensors"
    assert plan["max_concurrency_at_max_model_len"] == 11


def test_exit_1_when_it_does_not_fit_and_the_plan_is_still_printed(models, capsys):
    assert run_plan(str(models["70b"]), "--json") == 1
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] is False
    assert plan["suggestions"][0].startswith("nothing fits on 2x16 GiB")


def test_human_table(models, capsys):
    assert run_plan(str(models["14b"]), "--max-model-len", "4096") == 0
    out = capsys.readouterr().out
    assert "capacity    93,152 tokens = 22 sequence(s) of 4096" in out
    assert "verdict     FITS" in out
    assert ("serve args  --dtype half --tensor-parallel-size 2 --max-model-len 4096 "
            "--gpu-memory-utilization 0.9 --max-num-seqs 123 --attention-backend "
            "FLASH_ATTN_V100 --disable-custom-all-reduce") in out
    assert "card        2 x nominal 16 GiB (no NVML figure: pass --health for it)" in out
    assert "requested   ceil(16.00 GiB x 0.90) = 14.40 GiB per GPU" in out


def test_health_file_adds_the_pcie_flag(models, tmp_path, capsys):
    health = tmp_path / "health.json"
    health.write_text(json.dumps({"gpu_health": {"pairs": [
        {"gpus": [0, 1], "topology": "PHB", "p2p_read": "CHIPSET_NOT_SUPPORTED"}]}}))
    assert run_plan(str(models["14b"]), "--health", str(health)) == 0
    assert "--disable-custom-all-reduce" in capsys.readouterr().out


def test_upstream_engine_on_v100_exits_1_with_the_reason(models, capsys):
    assert run_plan(str(models["14b"]), "--engine", "vllm") == 1
    out = capsys.readouterr().out
    assert "engine      vllm (any version): NOT compatible" in out
    assert "Current capability: 70." in out


# --- invalid input: exit 2, one line on stderr, no traceback ---------------------------------

def _shard(model: Path, number: int = 1) -> Path:
    return sorted(model.glob("*.safetensors"))[number - 1]


def corrupt_length(model: Path) -> str:
    with open(_shard(model), "r+b") as handle:
        handle.write(struct.pack("<Q", 2**40))
    return "corrupt or truncated safetensors header (says 1099511627776 bytes"


def corrupt_json(model: Path) -> str:
    with open(_shard(model), "r+b") as handle:
        handle.seek(8)
        handle.write(b"\x00garbage")
    return "corrupt safetensors header (not JSON"


def truncate_data(model: Path) -> str:
    path = _shard(model, 2)
    os.truncate(path, path.stat().st_size - 4096)
    return "truncated safetensors file: tensor"


def truncate_to_nothing(model: Path) -> str:
    os.truncate(_shard(model), 3)
    return "truncated safetensors file (3 bytes, no header length)"


def drop_shard(model: Path) -> str:
    name = _shard(model, 3).name
    _shard(model, 3).unlink()
    return f"shard {name}: 1 of 3 missing (the names say 3 shards, 2 present): finish the download"


def drop_config(model: Path) -> str:
    (model / "config.json").unlink()
    return "no config.json (is this a Hugging Face model directory?)"


def drop_all_shards(model: Path) -> str:
    (model / "model.safetensors.index.json").unlink()
    for path in model.glob("*.safetensors"):
        path.unlink()
    return "no *.safetensors files"


def index_names_absent_tensor(model: Path) -> str:
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.99.mlp.up_proj.weight_packed"] = _shard(model).name
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return "puts tensor 'model.layers.99.mlp.up_proj.weight_packed' in"


def broken_config(model: Path) -> str:
    (model / "config.json").write_text("{not json")
    return "config.json: unreadable JSON"


@pytest.mark.parametrize(
    "breaker",
    [corrupt_length, corrupt_json, truncate_data, truncate_to_nothing, drop_shard, drop_config,
     drop_all_shards, index_names_absent_tensor, broken_config],
)
def test_invalid_model_directories_exit_2_with_one_clear_line(tmp_path, capsys, breaker):
    # A fresh sparse directory each time: copying one would materialise its data.
    model = mf.build_model(tmp_path, mf.QWEN25_14B, "nvfp4-ct", shards=3)
    expected = breaker(model)
    assert run_plan(str(model)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("onecat plan: ")
    assert expected in lines[0]
    assert "Traceback" not in captured.err


def test_missing_directory_exits_2(tmp_path, capsys):
    assert run_plan(str(tmp_path / "nope")) == 2
    assert capsys.readouterr().err == f"onecat plan: {tmp_path / 'nope'}: no such model directory\n"


def test_bad_health_file_exits_2(models, tmp_path, capsys):
    assert run_plan(str(models["14b"]), "--health", str(tmp_path / "absent.json")) == 2
    assert "--health" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu_health": {"pairs": 3}}')
    assert run_plan(str(models["14b"]), "--health", str(bad)) == 2
    assert capsys.readouterr().err.startswith("onecat plan: health: expected")


def test_tp_larger_than_gpus_exits_2(models, capsys):
    assert run_plan(str(models["14b"]), "--tensor-parallel-size", "4") == 2
    assert capsys.readouterr().err == ("onecat plan: --tensor-parallel-size 4: must be between 1 "
                                       "and --gpus 2\n")


# --- the Ansible module ----------------------------------------------------------------------

def _module_doc() -> dict:
    source = (REPO / "library" / "model_plan.py").read_text()
    start = source.index('DOCUMENTATION = r"""') + len('DOCUMENTATION = r"""')
    return yaml.safe_load(source[start:source.index('"""', start)])


def test_module_documents_the_planner_defaults():
    options = _module_doc()["options"]
    for name, default in {**DEFAULTS, **WORKLOAD_DEFAULTS}.items():
        assert options[name].get("default") == default, name


def _ansible(*module_args: str) -> tuple[int, dict]:
    env = {**os.environ, "ANSIBLE_LIBRARY": str(REPO / "library"),
           "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "ANSIBLE_STDOUT_CALLBACK": "minimal"}
    ansible = Path(sys.executable).parent / "ansible"
    done = subprocess.run(
        [str(ansible), "localhost", "-c", "local", "-i", "localhost,", "-m", "model_plan",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-a", json.dumps(dict(arg.split("=", 1) for arg in module_args))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    text = done.stdout
    return done.returncode, json.loads(text[text.index("=> {") + 3:])


@pytest.mark.skipif(not (Path(sys.executable).parent / "ansible").exists(),
                    reason="ansible is not installed next to this Python")
def test_module_runs_through_ansible(models):
    rc, result = _ansible(f"model_dir={models['14b']}")
    assert rc == 0, result
    assert result["changed"] is False
    assert result["plan"]["max_concurrency_at_max_model_len"] == 11
    assert result["plan"]["serve_args"]["--max-num-seqs"] == 123  # 93k KV tokens / 756


@pytest.mark.skipif(not (Path(sys.executable).parent / "ansible").exists(),
                    reason="ansible is not installed next to this Python")
def test_module_fails_on_misfit_naming_host_and_model(models):
    rc, result = _ansible(f"model_dir={models['70b']}")
    assert rc != 0
    assert f"{models['70b']} (nvfp4-compressed-tensors) cannot be served" in result["msg"]
    assert "Suggestions: nothing fits on 2x16 GiB" in result["msg"]
    assert result["plan"]["fits"] is False
