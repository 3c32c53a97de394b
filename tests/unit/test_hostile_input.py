"""Issue 17, "Input that crashes, hangs, or lies": each input named there, refused with one
line naming the input and the fix, a non-zero exit, nothing written.

The fuzz tests (tests/fuzz/) explore the same surfaces at random; these pin the cases the
issue listed, so each has a test that failed on the code before the fix.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import struct
import sys
import threading
from pathlib import Path

import pytest

from onecat.bench.httpclient import public_url
from onecat.bench.session import BenchError, BenchOptions, _probe
from onecat.cli import main as onecat_main
from onecat.fleet.runner import claim_run_dir
from onecat.health.nvml import kernel_log_problem, read_kernel_log
from onecat.model.plan import INVALID_INPUT, plan_model
from onecat.model.safetensors import CheckpointError, read_header
from onecat.preflight.checks import judge
from onecat.report.cli import make_report
from onecat.report.load import ReportError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_fixtures import QWEN25_14B, build_model, write_safetensors

TINY = {**QWEN25_14B, "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024}


@pytest.fixture
def no_hang():
    """Fail (instead of hanging CI) when the code under test blocks: the old code did, on a
    FIFO, forever."""

    def hung(signum, frame):
        raise TimeoutError("hung for 20 s: a FIFO or device was read as a file")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    assert onecat_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# onecat plan ------------------------------------------------------------------------------

def test_plan_refuses_a_negative_tensor_dimension(tmp_path, capsys):
    model = build_model(tmp_path, TINY, "fp16")
    header = {"model.embed_tokens.weight": {"dtype": "F16", "shape": [-1024, 256],
                                            "data_offsets": [524288, 0]}}
    raw = json.dumps(header).encode()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 16)
    _one_line_exit_2(capsys, ["plan", str(model)], "model.safetensors",
                     "has shape [-1024, 256]", "download it again")


def test_plan_refuses_an_empty_checkpoint(tmp_path, capsys):
    model = build_model(tmp_path, TINY, "fp16")
    write_safetensors(model / "model.safetensors", [])
    _one_line_exit_2(capsys, ["plan", str(model)], "hold no weights")


def test_plan_refuses_a_float_dimension_and_deep_json(tmp_path):
    path = tmp_path / "model.safetensors"
    for header in (b'{"w": {"dtype": "F16", "shape": [1e400], "data_offsets": [0, 2]}}',
                   b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")
        with pytest.raises(CheckpointError) as caught:
            read_header(str(path))
        assert str(caught.value).startswith(str(path))


@pytest.mark.parametrize(("change", "needle"), [
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]}},
     None),
    ({"quantization_config": {"quant_method": "modelopt", "quantization": "x"}}, None),
    ({"architectures": {"a": 1}}, "architectures is {'a': 1}"),
    ({"architectures": 5}, "architectures is 5"),
    ({"quantization_config": "x"}, "quantization_config is 'x'"),
    ({"num_hidden_layers": 2**70}, "num_hidden_layers"),
])
def test_plan_config_shapes_are_refused_or_planned_never_a_traceback(tmp_path, change, needle):
    model = build_model(tmp_path, TINY, "nvfp4-ct", config_changes=change)
    try:
        plan = plan_model(str(model))
    except INVALID_INPUT as error:
        assert needle is not None and needle in str(error), error
        return
    assert needle is None, plan
    assert plan["quant_format"] in ("nvfp4-compressed-tensors", "unknown")


@pytest.mark.parametrize("option", ["--gpu-memory-gib", "--cuda-context-gib",
                                    "--non-torch-gib", "--cuda-graph-gib",
                                    "--gpu-memory-utilization"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_plan_refuses_non_finite_numbers(tmp_path, capsys, option, value):
    model = build_model(tmp_path, TINY, "nvfp4-ct")
    _one_line_exit_2(capsys, ["plan", str(model), option, value], option)


def test_plan_refuses_a_fifo_shard_instead_of_hanging(tmp_path, capsys, no_hang):
    model = build_model(tmp_path, TINY, "nvfp4-ct")
    (model / "model.safetensors").unlink()
    os.mkfifo(model / "model.safetensors")
    _one_line_exit_2(capsys, ["plan", str(model)], "model.safetensors", "is a FIFO")


def test_plan_refuses_a_fifo_health_file(tmp_path, capsys, no_hang):
    model = build_model(tmp_path, TINY, "nvfp4-ct")
    os.mkfifo(tmp_path / "health.json")
    _one_line_exit_2(capsys, ["plan", str(model), "--health", str(tmp_path / "health.json")],
                     "--health", "is a FIFO")


# onecat bench -----------------------------------------------------------------------------

class _Models:
    async def get_json(self, path: str) -> tuple[int, object]:
        return 200, {"data": 5}


def test_bench_refuses_a_models_answer_without_a_list():
    opts = BenchOptions(url="http://127.0.0.1:8000", out=Path("unused"))
    with pytest.raises(BenchError, match="without a list of models"):
        asyncio.run(_probe(_Models(), opts))


@pytest.mark.parametrize(("option", "value"), [
    ("--requests-per-level", "100000000000000000"), ("--timeout", "nan"),
    ("--timeout", "inf"), ("--concurrency", "1,100000000"), ("--input-len", "1e17"),
])
def test_bench_refuses_absurd_load_options(tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as caught:
        onecat_main(["bench", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "o"),
                     option, value])
    assert caught.value.code == 2
    assert option in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bench_refuses_a_load_whose_prompts_would_not_fit_in_memory(tmp_path, capsys):
    _one_line_exit_2(capsys, ["bench", "--url", "http://127.0.0.1:9", "--out",
                              str(tmp_path / "o"), "--requests-per-level", "1000000",
                              "--input-len", "8192"], "--requests-per-level")
    assert not (tmp_path / "o").exists()


def test_urls_with_credentials_are_never_shown_whole():
    assert public_url("http://user:pw@10.0.0.5:8000/v1?api_key=k&x") == \
        "http://***@10.0.0.5:8000/v1?api_key=***&x"
    assert public_url("10.0.0.5:8000") == "http://10.0.0.5:8000"


# onecat report ----------------------------------------------------------------------------

LEVEL = {"max_concurrency": 1, "completed": 4, "failed": 0, "errors": {},
         "output_throughput": 40.0, "total_token_throughput": 120.0, "median_ttft_ms": 300.0,
         "p99_ttft_ms": 400.0, "median_tpot_ms": 25.0}


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("bench-c1.json", {**LEVEL, "output_throughput": "fast"}, 'output_throughput is "fast"'),
    ("health.json", {"gpu_health": 5}, "gpu_health is 5"),
    ("health.json", {"gpus": ["x"], "pairs": []}, 'gpus is ["x"]'),
    ("bench-c1.json", {**LEVEL, "median_ttft_ms": math.inf}, "median_ttft_ms is Infinity"),
])
def test_report_refuses_wrong_types_and_writes_nothing(tmp_path, capsys, name, content,
                                                        needle):
    run = tmp_path / "run"
    for host in ("node1", "node2"):
        (run / host).mkdir(parents=True)
        (run / host / "bench-c1.json").write_text(json.dumps(LEVEL))
    (run / "node1" / name).write_text(json.dumps(content))
    assert onecat_main(["report", str(run), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and f"node1/{name}" in err, err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ReportError):
        make_report(run, tmp_path / "out", plots=False)


# onecat health / preflight ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_kernel_log_that_never_ends_is_refused_without_reading(tmp_path, kind, no_hang):
    path = "/dev/zero" if kind == "device" else str(tmp_path / "kmsg")
    if kind == "fifo":
        os.mkfifo(path)
    assert "not a regular file" in kernel_log_problem(path)
    text, source, failure = read_kernel_log(path)
    assert text is None and source == path and "not a regular file" in failure


def test_health_local_refuses_a_fifo_kernel_log(tmp_path, capsys, no_hang):
    os.mkfifo(tmp_path / "kmsg")
    _one_line_exit_2(capsys, ["health", "--local", "--kernel-log", str(tmp_path / "kmsg")],
                     "--kernel log", "not a regular file")


def test_preflight_refuses_a_nan_disk_requirement():
    facts = {"gpus": [], "disks": [{"path": "/", "measured_at": "/", "free_gib": 1.0}]}
    with pytest.raises(ValueError, match=r"min_free_gib nan is not a number of GiB >= 0"):
        judge(facts, "Debian", "12", 0, [{"path": "/", "min_free_gib": math.nan}])


# Results folders --------------------------------------------------------------------------

def test_two_runs_in_the_same_second_get_their_own_folders(tmp_path):
    claimed: list[tuple[str, Path]] = []
    threads = [threading.Thread(target=lambda: claimed.append(
        claim_run_dir(tmp_path, "20261203T000000Z-abc1234"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = sorted(run_id for run_id, _ in claimed)
    assert len(set(ids)) == 8 and ids[0] == "20261203T000000Z-abc1234"
    assert all(path.is_dir() and path.name == run_id for run_id, path in claimed)
