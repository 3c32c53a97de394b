"""Fuzz what `onecat plan` and the model_plan module read: safetensors headers, the shard
index, config.json / hf_quant_config.json, and the planner's numeric options.

The contract under test: any input either plans (and then every number in the plan is sane)
or is refused with CheckpointError / PlanInputError, one line naming the file; never another
exception, never a hang.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import pytest
from fuzzkit import JSON, deep_json, dumps, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.model.checkpoint import inspect_model
from onecat.model.plan import INVALID_INPUT, plan_model
from onecat.model.safetensors import DTYPE_BITS, CheckpointError, read_checkpoint, read_header

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_fixtures import COMPRESSED_TENSORS_NVFP4, MODELOPT_HF_QUANT, build_model

TINY = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "max_position_embeddings": 32768, "vocab_size": 1024,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 1000000.0,
}

# Header entries: mostly well-formed tensors, some with a field replaced by anything.
DIMS = st.lists(st.integers(0, 4096) | st.integers(-(2**40), 2**70), max_size=4)
GOOD_ENTRY = st.fixed_dictionaries({
    "dtype": st.sampled_from(sorted(DTYPE_BITS)),
    "shape": st.lists(st.integers(0, 64), max_size=3),
})
ENTRY = st.one_of(
    GOOD_ENTRY,
    st.fixed_dictionaries({"dtype": st.sampled_from(sorted(DTYPE_BITS)) | st.text(max_size=6),
                           "shape": DIMS | JSON}),
    JSON,
)


@st.composite
def safetensors_file(draw: st.DrawFn) -> bytes:
    """A header (consistent offsets, or not), its length prefix (right, or not), a data region."""
    header: dict = {}
    if draw(st.booleans()):
        header["__metadata__"] = draw(JSON)
    offset = 0
    for index in range(draw(st.integers(0, 5))):
        entry = draw(ENTRY)
        if isinstance(entry, dict) and draw(st.integers(0, 3)):
            shape = entry.get("shape")
            size = 0
            if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
                bits = DTYPE_BITS.get(str(entry.get("dtype")), 8)
                count = 1
                for dim in shape:
                    count *= dim
                size = (count * bits + 7) // 8
            entry = {**entry, "data_offsets": [offset, offset + size]}
            offset += max(size, 0)
        elif isinstance(entry, dict):
            entry = {**entry, "data_offsets": draw(JSON | st.lists(st.integers(), max_size=3))}
        header[draw(st.text(min_size=1, max_size=6)) + f".{index}"] = entry
    text = draw(st.sampled_from(("plain", "deep", "garbage")) if draw(st.integers(0, 9)) == 0
                else st.just("plain"))
    if text == "deep":
        raw = ('{"t": ' + deep_json(draw(st.integers(500, 200_000))) + "}").encode()
    elif text == "garbage":
        raw = draw(st.binary(max_size=64))
    else:
        raw = dumps(header).encode()
    prefix = struct.pack("<Q", len(raw)) if draw(st.integers(0, 5)) else draw(st.binary(
        min_size=0, max_size=8))
    data = min(offset, 1 << 16) if draw(st.integers(0, 4)) else draw(st.integers(0, 64))
    return prefix + raw + b"\0" * data


def _check_tensors(tensors: dict, data_size: int) -> None:
    for name, tensor in tensors.items():
        assert tensor.dtype in DTYPE_BITS, name
        assert all(isinstance(d, int) and d >= 0 for d in tensor.shape), (name, tensor.shape)
        count = 1
        for dim in tensor.shape:
            count *= dim
        assert tensor.nbytes == (count * DTYPE_BITS[tensor.dtype] + 7) // 8
        assert 0 <= tensor.nbytes <= data_size


@settings(max_examples=examples(250))
@given(blob=safetensors_file())
@fuzz("model: safetensors header")
def test_fuzz_safetensors_header(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.safetensors")
        with open(path, "wb") as handle:
            handle.write(blob)
        try:
            tensors = read_header(path)
        except CheckpointError as error:
            assert str(error).startswith(path) and "\n" not in str(error)
            return
        header_len = struct.unpack("<Q", blob[:8])[0]
        _check_tensors(tensors, len(blob) - 8 - header_len)


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    root = Path(tempfile.mkdtemp(prefix="onecat-fuzz-"))
    model = build_model(root, TINY, "nvfp4-ct", name="tiny-nvfp4", shards=2)
    yield model
    shutil.rmtree(root)


def _clone(model: Path, into: str) -> Path:
    """The model directory as symlinks (shards are shared; json files are rewritten)."""
    target = Path(into) / model.name
    target.mkdir()
    for item in model.iterdir():
        (target / item.name).symlink_to(item)
    return target


def _write(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    path.write_text(text)


@settings(max_examples=examples(120))
@given(data=st.data())
@fuzz("model: shard index")
def test_fuzz_shard_index(tiny_model: Path, data: st.DataObject) -> None:
    index = json.loads((tiny_model / "model.safetensors.index.json").read_text())
    doc = data.draw(mutated(index) | JSON)
    with tempfile.TemporaryDirectory() as tmp:
        model = _clone(tiny_model, tmp)
        _write(model / "model.safetensors.index.json", dumps(doc))
        try:
            tensors = read_checkpoint(str(model))
        except CheckpointError as error:
            assert "\n" not in str(error)
            return
        assert tensors
        weight_map = doc["weight_map"]
        for name, shard in weight_map.items():
            assert tensors[name].file == shard


def _plan_sane(plan: dict) -> None:
    memory = plan["memory_per_gpu"]
    assert plan["weight_bytes"] > 0
    assert 0 <= plan["weight_bytes_per_gpu"] <= plan["weight_bytes"]
    for key in ("total_bytes", "usable_bytes", "weights_bytes", "activation_bytes",
                "headroom_bytes", "outside_bytes"):
        assert isinstance(memory[key], int) and memory[key] >= 0, key
    assert plan["max_kv_tokens"] >= 0 and plan["max_concurrency_at_max_model_len"] >= 0
    if plan["fits"]:
        assert plan["max_kv_tokens"] >= plan["inputs"]["max_model_len"]
        assert memory["weights_bytes"] < memory["usable_bytes"]
    json.dumps(plan)  # the module returns it as JSON


@settings(max_examples=examples(150))
@given(data=st.data())
@fuzz("model: config.json and quantization configs")
def test_fuzz_config_and_quant_configs(tiny_model: Path, data: st.DataObject) -> None:
    config = {**TINY, "quantization_config": COMPRESSED_TENSORS_NVFP4}
    config = data.draw(mutated(config, max_edits=5), label="config.json")
    hf_quant = data.draw(st.none() | mutated(MODELOPT_HF_QUANT) | JSON, label="hf_quant")
    generation = data.draw(st.none() | JSON, label="generation_config.json")
    with tempfile.TemporaryDirectory() as tmp:
        model = _clone(tiny_model, tmp)
        _write(model / "config.json", dumps(config))
        (model / "generation_config.json").unlink(missing_ok=True)
        if hf_quant is not None:
            _write(model / "hf_quant_config.json", dumps(hf_quant))
        if generation is not None:
            _write(model / "generation_config.json", dumps(generation))
        try:
            info = inspect_model(str(model))
            plan = plan_model(str(model))
        except INVALID_INPUT as error:
            assert "\n" not in str(error)
            return
        assert isinstance(info["architecture"], (str, type(None)))
        _plan_sane(plan)


NUMBER = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**64), 2**64)
# Each option: values a user would pass, and anything at all.
SANE = {
    "gpus": st.integers(2, 8),
    "gpu_memory_gib": st.floats(1, 80),
    "gpu_memory_utilization": st.floats(0.05, 1),
    "max_model_len": st.integers(1, 1 << 17),
    "tensor_parallel_size": st.sampled_from((1, 2)),
    "kv_cache_dtype": st.sampled_from(("auto", "fp8_e5m2")),
    "engine": st.sampled_from(("1cat-vllm", "vllm")),
    "engine_version": st.sampled_from(("1.5.0", "1.3.0", "v1.2", "2.0.0rc1")),
    "compute_capability": st.sampled_from(("7.0", "7.5", "8.0", "70")),
    "cuda_context_gib": st.floats(0, 4),
    "cuda_graph_gib": st.floats(0, 4),
    "max_num_batched_tokens": st.integers(1, 1 << 16),
    "max_num_seqs": st.integers(1, 1024),
}
WILD = {
    "gpus": st.integers(),
    "gpu_memory_gib": NUMBER,
    "gpu_memory_utilization": NUMBER,
    "max_model_len": st.integers(),
    "tensor_parallel_size": st.integers(),
    "kv_cache_dtype": st.text(max_size=8),
    "engine": st.text(max_size=8),
    "engine_version": st.text(max_size=12),
    "compute_capability": st.text(max_size=6),
    "cuda_context_gib": NUMBER,
    "cuda_graph_gib": NUMBER,
    "max_num_batched_tokens": st.integers(),
    "max_num_seqs": st.integers(),
}


@st.composite
def planner_options(draw: st.DrawFn) -> dict:
    """Sane values for some options, then one or two options set to anything."""
    chosen = draw(st.sets(st.sampled_from(sorted(SANE))))
    options = {name: draw(SANE[name]) for name in sorted(chosen)}
    for name in draw(st.lists(st.sampled_from(sorted(WILD)), max_size=2)):
        options[name] = draw(WILD[name])
    return options


@settings(max_examples=examples(200))
@given(options=planner_options())
# Found by the factor-10 run: a card below a byte made the headroom negative.
@example(options={"cuda_context_gib": 0.0, "gpu_memory_gib": 6.252718033651417e-264})
@fuzz("model: planner options (CLI flags, module arguments)")
def test_fuzz_planner_options(tiny_model: Path, options: dict) -> None:
    try:
        plan = plan_model(str(tiny_model), **options)
    except INVALID_INPUT as error:
        assert "\n" not in str(error)
        return
    _plan_sane(plan)
    for key in ("gpu_memory_gib", "gpu_memory_utilization", "cuda_context_gib",
                "cuda_graph_gib"):
        assert math.isfinite(float(plan["inputs"][key])), key


HEALTH = {"gpu_health": {"verdict": "healthy", "pairs": [
    {"gpus": [0, 1], "topology": "PHB", "p2p_read": "OK"}],
    "recommendations": {"disable_custom_all_reduce": True, "nccl_p2p_disable": False}}}


@settings(max_examples=examples(150))
@given(health=mutated(HEALTH, max_edits=3) | mutated(HEALTH["gpu_health"]) | JSON)
@fuzz("model: --health JSON (gpu_health facts)")
def test_fuzz_plan_health_json(tiny_model: Path, health: object) -> None:
    try:
        plan = plan_model(str(tiny_model), health=health)
    except INVALID_INPUT as error:
        assert "\n" not in str(error)
        return
    _plan_sane(plan)
    assert set(plan["inputs"]["health"]) >= {"disable_custom_all_reduce", "nccl_p2p_disable"}
