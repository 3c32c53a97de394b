"""`onecat bench` end to end against the stand-in engine on loopback (fast timing)."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from onecat.bench.session import BenchOptions, run_bench
from onecat.cli import main as onecat_main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "standin_engine"))
from standin_harness import free_port, standin  # noqa: E402

LEVEL_KEYS = {
    "max_concurrency", "completed", "failed", "duration", "total_input_tokens",
    "total_output_tokens", "request_throughput", "output_throughput", "total_token_throughput",
    "errors", "gpu_memory_used_mib", "kv_cache_usage_perc_max",
    *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p90", "p99")
      for m in ("ttft", "tpot", "itl", "e2el")),
}


def _run(url: str, out: Path, reader=None, **kwargs) -> list[dict]:
    options = BenchOptions(url=url, out=out, quiet=True, **{
        "concurrency": [1, 4], "input_len": 40, "output_len": 8, "requests_per_level": 8,
        "warmup": 0, "timeout": 10.0, **kwargs})
    return asyncio.run(run_bench(options, reader))


def test_normal_run_writes_every_file_and_key(tmp_path):
    samples = iter([[100.0, 200.0], [150.0, 180.0]])
    reader = lambda: next(samples, [120.0, 190.0])  # noqa: E731 - fake NVML: MiB per GPU
    trace = tmp_path / "trace.jsonl"
    env = {"STANDIN_PREFILL_MS": "30", "STANDIN_TRACE_FILE": str(trace)}
    with standin(tmp_path, env=env) as server:
        levels = _run(server.url, tmp_path / "out", reader, warmup=1, detailed=True)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "bench-c1.json", "bench-c4.json", "summary.csv", "summary.json", "summary.md"]
    for level, c in zip(levels, (1, 4), strict=True):
        on_disk = json.loads((out / f"bench-c{c}.json").read_text())
        assert on_disk == level
        assert set(level) >= LEVEL_KEYS
        assert (level["max_concurrency"], level["completed"], level["failed"]) == (c, 8, 0)
        assert level["errors"] == {}
        assert level["total_output_tokens"] == 64
        assert level["total_input_tokens"] == 8 * 40  # exact lengths through /tokenize
        assert level["input_len_source"] == "tokenize"
        # Peak per GPU within the level; the sampler restarts at each level.
        assert level["gpu_memory_used_mib"] == ([150, 200] if c == 1 else [120, 190])
        assert level["kv_cache_usage_perc_max"] is not None
        assert 30 <= level["median_ttft_ms"] < 500  # truth: 30 ms prefill + 0.4 ms
        assert level["num_requests_running_max"] <= c
    # --save-detailed: one record per request, with the X-Request-Id the server saw.
    first = levels[0]["requests"][0]
    assert first["id"] == "onecat-bench-0-1"  # index 0 was the warmup request
    assert first["output_tokens"] == 8 and first["error"] is None and first["ttft_ms"] > 0
    seen = {json.loads(line)["request_id"] for line in trace.read_text().splitlines()}
    assert {r["id"] for lv in levels for r in lv["requests"]} | {"onecat-bench-0-warmup-0"} == seen
    summary = json.loads((out / "summary.json").read_text())
    assert [lv["max_concurrency"] for lv in summary["levels"]] == [1, 4]
    assert summary["run"]["model"] == "standin-model"
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["max_concurrency"] for r in rows] == ["1", "4"]
    assert rows[0]["gpu_memory_used_mib"] == "150;200"
    assert "| 4 | 8 | 0 |" in (out / "summary.md").read_text()


def test_ten_percent_failures_are_counted_by_reason(tmp_path):
    with standin(tmp_path, env={"STANDIN_FAIL_PERCENT": "10"}) as server:
        levels = _run(server.url, tmp_path / "out", concurrency=[2], requests_per_level=20)
    (level,) = levels
    assert (level["completed"], level["failed"]) == (18, 2)
    assert level["errors"] == {"http_500": 2}
    assert level["total_output_tokens"] == 18 * 8


def test_mid_stream_stall_times_out_and_the_run_ends(tmp_path):
    env = {"STANDIN_STALL_PERCENT": "50", "STANDIN_STALL_AFTER_TOKENS": "2"}
    with standin(tmp_path, env=env) as server:
        levels = _run(server.url, tmp_path / "out", concurrency=[2], requests_per_level=4,
                      timeout=1.0)
    (level,) = levels
    assert level["errors"] == {"timeout": 2}
    assert level["completed"] == 2
    assert 1.0 <= level["duration"] < 5.0


def test_dropped_stream_is_a_truncated_stream(tmp_path):
    env = {"STANDIN_STALL_PERCENT": "50", "STANDIN_STALL_AFTER_TOKENS": "2",
           "STANDIN_STALL_S": "0.2"}
    with standin(tmp_path, env=env) as server:
        levels = _run(server.url, tmp_path / "out", concurrency=[1], requests_per_level=4)
    assert levels[0]["errors"] == {"truncated_stream": 2}


def test_without_tokenize_estimates_and_reports_real_lengths(tmp_path):
    with standin(tmp_path, env={"STANDIN_NO_TOKENIZE": "1"}) as server:
        levels = _run(server.url, tmp_path / "out", concurrency=[2], requests_per_level=4)
    (level,) = levels
    assert level["input_len_source"] == "estimate"
    assert level["completed"] == 4
    # 39 words + BOS; a word of 5+ letters is 2+ stand-in tokens, so the real length is larger.
    assert level["mean_input_tokens"] > 40
    assert level["total_input_tokens"] == round(level["mean_input_tokens"] * 4)


def test_chat_endpoint_with_api_key_file(tmp_path, capsys):
    key = tmp_path / "vllm.env"
    key.write_text("# written by the serve role\nVLLM_API_KEY='sekret'\n")
    with standin(tmp_path, args=["--api-key", "sekret"]) as server:
        rc = onecat_main(["bench", "--url", server.url, "--api-key-file", str(key),
                          "--endpoint", "chat", "--concurrency", "2", "--input-len", "30",
                          "--output-len", "4", "--requests-per-level", "4", "--warmup", "1",
                          "--out", str(tmp_path / "out")])
        assert rc == 0
        level = json.loads((tmp_path / "out" / "bench-c2.json").read_text())
        assert level["endpoint"] == "/v1/chat/completions"
        assert level["total_input_tokens"] == 4 * 30
        rc = onecat_main(["bench", "--url", server.url, "--out", str(tmp_path / "o2"),
                          "--quiet"])
    assert rc == 1
    assert "wants an API key: pass --api-key-file" in capsys.readouterr().err


def test_unreachable_server_exits_1_with_one_line(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    rc = onecat_main(["bench", "--url", url, "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and "cannot reach" in err[0] and "connection_refused" in err[0]


def test_every_request_failing_exits_1_but_keeps_the_data(tmp_path, capsys):
    with standin(tmp_path, env={"STANDIN_FAIL_PERCENT": "100"}) as server:
        rc = onecat_main(["bench", "--url", server.url, "--concurrency", "2",
                          "--requests-per-level", "3", "--warmup", "0", "--output-len", "4",
                          "--out", str(tmp_path / "out"), "--quiet"])
    assert rc == 1
    assert "every request failed ({'http_500': 3})" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "bench-c2.json").read_text())["failed"] == 3


def test_progress_goes_to_stderr(tmp_path, capsys):
    with standin(tmp_path) as server:
        options = BenchOptions(url=server.url, out=tmp_path / "out", concurrency=[1],
                               input_len=20, output_len=30, requests_per_level=3, warmup=0,
                               progress_interval=0.05)
        asyncio.run(run_bench(options))
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "c=1: 3 ok, 0 failed" in captured.err
    assert "/3 done, 0 failed," in captured.err


@pytest.mark.parametrize("argv", [
    ["bench", "--url", "http://x", "-i", "inv.yml", "--out", "o"],
    ["bench", "--url", "http://x", "--concurrency", "1,zero", "--out", "o"],
])
def test_bad_command_lines_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        onecat_main(argv)
    assert exc.value.code == 2


def test_fleet_mode_names_a_missing_inventory(capsys, tmp_path):
    missing = tmp_path / "inventory.yml"
    assert onecat_main(["bench", "-i", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"onecat: inventory {missing} not found")


def test_runs_as_python_m_onecat_bench(tmp_path):
    """What the benchmark role runs on a node: its venv's Python (aiohttp, nvidia-ml-py) with
    the onecat package on PYTHONPATH."""
    with standin(tmp_path) as server:
        run = subprocess.run(
            [sys.executable, "-m", "onecat.bench", "--url", server.url, "--concurrency",
             "2", "--input-len", "20", "--output-len", "4", "--requests-per-level", "2",
             "--warmup", "0", "--out", str(tmp_path / "out"), "--quiet"],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "out" / "bench-c2.json").read_text())["completed"] == 2


def test_credentials_in_the_url_never_reach_the_result_files(tmp_path):
    with standin(tmp_path) as server:
        url = server.url.replace("http://", "http://bench-user:bench-pw-secret@") + "?key=k1"
        _run(url, tmp_path / "out")
    for path in (tmp_path / "out").iterdir():
        text = path.read_text()
        assert "bench-pw-secret" not in text and "bench-user" not in text, path.name
        assert "key=k1" not in text, path.name
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["run"]["url"].startswith("http://***@127.0.0.1:")


def test_empty_text_chunks_are_chunks_like_vllm_bench_serve(tmp_path):
    """Every 2nd token streams with empty text (special tokens in vLLM): counting only chunks
    with text would see every other gap and report an ITL twice the truth."""
    env = {"STANDIN_EMPTY_TEXT_EVERY": "2", "STANDIN_DECODE_MS": "20",
           "STANDIN_DECODE_MS_PER_SEQ": "0"}
    with standin(tmp_path, env=env) as server:
        (level,) = _run(server.url, tmp_path / "out", concurrency=[1], output_len=16,
                        requests_per_level=4)
    assert level["completed"] == 4 and level["total_output_tokens"] == 64
    assert 15 <= level["median_itl_ms"] < 30  # one decode step, not two
    assert level["median_tpot_ms"] == pytest.approx(level["mean_itl_ms"], rel=0.2)
    assert level["request_goodput"] is None and level["warnings"]  # 4 requests: p99 is the max


def test_a_level_beyond_max_num_seqs_warns_that_it_measures_the_queue(tmp_path):
    # vLLM runs at most --max-num-seqs requests and queues the rest (num_requests_waiting): a
    # level of 8 against 2 slots measures the queue. The level at 2 does not warn.
    with standin(tmp_path, args=["--max-num-seqs", "2"],
                 env={"STANDIN_DECODE_MS": "20"}) as server:
        levels = _run(server.url, tmp_path / "out", concurrency=[2, 8], output_len=16)
    at_two, at_eight = levels
    assert not any("waited at the server" in w for w in at_two["warnings"])
    assert at_eight["num_requests_waiting_max"] >= 1
    warning = next(w for w in at_eight["warnings"] if "waited at the server" in w)
    assert "of 8 requests waited" in warning and "at most 2 ran at once" in warning
    assert warning in (tmp_path / "out" / "summary.md").read_text()
