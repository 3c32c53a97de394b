"""`onecat bench --workload multiturn` against the stand-in engine (with its prefix cache)."""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading
from pathlib import Path

import pytest

from onecat.bench.httpclient import Endpoint
from onecat.bench.multiturn import (
    _TextCollector,
    cache_report,
    kept_answer_chars,
    prefix_counters,
    tokens_per_word,
    words_ratio,
)
from onecat.bench.runner import LiveCounters, RequestResult
from onecat.cli import main as onecat_main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "standin_engine"))
from standin_harness import standin  # noqa: E402

SMALL = ["--conversations", "3", "--turns", "3", "--system-len", "200", "--turn-len", "40",
         "--output-len", "6", "--concurrency", "2", "--quiet"]


def test_conversations_come_back_with_their_history_and_hit_the_cache(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with standin(tmp_path, env={"STANDIN_TRACE_FILE": str(trace)}) as server:
        code = onecat_main(["bench", "--url", server.url, "--workload", "multiturn",
                            "--out", str(tmp_path / "out"), *SMALL])
    assert code == 0
    report = json.loads((tmp_path / "out" / "multiturn.json").read_text())
    assert report["workload"] == "multiturn"
    assert (report["num_requests"], report["completed"], report["failed"]) == (9, 9, 0)
    assert report["total_output_tokens"] == 9 * 6
    # The stand-in's tokenizer makes ~1.6 tokens of these words: the lengths follow it.
    assert report["tokens_per_word"] > 1.2
    # Each turn resends the conversation: the prompt grows by a turn and an answer.
    assert report["mean_input_tokens"] > 200 + 40
    cache = report["prefix_cache"]
    assert cache["queries"] == report["total_input_tokens"]
    # Turn 1 of the 2nd and 3rd conversation hit the shared system prompt; later turns hit
    # their whole previous prompt.
    assert 0.5 < cache["hit_rate"] < 1.0
    assert cache["nodes"][server.url]["share_of_prompt_tokens"] == 1.0
    for key in ("median_ttft_ms", "p90_ttft_ms", "output_throughput"):
        assert report[key] and report[key] > 0
    assert len(trace.read_text().splitlines()) == 9 + 0  # no warm-up, no probe generation


def test_tenants_each_send_their_own_system_prompt(tmp_path: Path) -> None:
    """--tenants 3: conversation n has tenant n mod 3's system prompt, so no first turn hits
    another's; with one prompt the 2nd and 3rd conversations' first turns hit it (issue 51's
    second multi-turn shape, benchmarks/routing.py)."""
    hits = {}
    for tenants in ("1", "3"):
        with standin(tmp_path / tenants) as server:
            code = onecat_main(["bench", "--url", server.url, "--workload", "multiturn",
                                "--out", str(tmp_path / tenants / "out"), *SMALL,
                                "--tenants", tenants])
        assert code == 0
        report = json.loads((tmp_path / tenants / "out" / "multiturn.json").read_text())
        assert report["tenants"] == int(tenants) and report["failed"] == 0
        hits[tenants] = report["prefix_cache"]["hits"]
    # Two first turns hit the 200-token prompt under one prompt only (in whole 16-token
    # blocks, of the part the chat template leaves intact: 160 each here).
    assert hits["1"] - hits["3"] >= 200, hits


def test_without_prefix_caching_the_hit_rate_is_zero(tmp_path: Path) -> None:
    with standin(tmp_path, args=["--no-enable-prefix-caching"]) as server:
        code = onecat_main(["bench", "--url", server.url, "--workload", "multiturn",
                            "--out", str(tmp_path / "out"), *SMALL])
    assert code == 0
    report = json.loads((tmp_path / "out" / "multiturn.json").read_text())
    assert report["prefix_cache"]["queries"] == 0 and report["prefix_cache"]["hit_rate"] is None


def test_the_random_workload_is_still_the_default_and_unchanged(tmp_path: Path) -> None:
    with standin(tmp_path) as server:
        code = onecat_main(["bench", "--url", server.url, "--concurrency", "2", "--input-len",
                            "30", "--output-len", "4", "--requests-per-level", "4",
                            "--warmup", "0", "--quiet", "--out", str(tmp_path / "out")])
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "bench-c2.json", "summary.csv", "summary.json", "summary.md"]


@pytest.mark.parametrize("argv", [
    ["--workload", "multiturn", "--concurrency", "1,2"],
    ["--workload", "multiturn", "--conversations", "0"],
])
def test_bad_multiturn_command_lines_exit_2(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        code = onecat_main(["bench", "--url", "http://127.0.0.1:9", "--out", str(tmp_path),
                            *argv])
        raise SystemExit(code)
    assert exited.value.code == 2


def test_counters_and_the_cache_report() -> None:
    page = ('# TYPE vllm:prefix_cache_queries_total counter\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 750.0\n'
            'vllm:prefix_cache_hits_created{engine="0"} 1.7e9\n')
    assert prefix_counters(page) == (1000.0, 750.0)
    assert prefix_counters("vllm:num_requests_running 1.0\n") is None
    a, b, c = "http://a:8000", "http://b:8000", "http://c:8000"
    report = cache_report({a: (0.0, 0.0), b: (100.0, 0.0), c: None},
                          {a: (300.0, 200.0), b: (200.0, 50.0), c: (5.0, 1.0)})
    assert (report["queries"], report["hits"], report["hit_rate"]) == (400, 250, 0.625)
    assert report["nodes"][a]["share_of_prompt_tokens"] == 0.75
    assert report["busiest_over_mean"] == 1.5
    assert report["nodes"][c]["hit_rate"] is None


def test_the_cache_report_shows_node_urls_without_their_secrets() -> None:
    """A --metrics-url with a password or a query key went into multiturn.json as typed."""
    secret = "http://ops:hunter2@10.0.0.5:8000/?key=sk-secret"
    report = cache_report({secret: (0.0, 0.0)}, {secret: (10.0, 5.0)})
    assert list(report["nodes"]) == ["http://***@10.0.0.5:8000/?key=***"]
    assert "hunter2" not in json.dumps(report) and "sk-secret" not in json.dumps(report)


class _Tokenize(http.server.BaseHTTPRequestHandler):
    """An engine whose /tokenize says the 1,000 words of the probe are `count` tokens."""

    count: object = 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"count": self.count}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("count", "ratio"), [(1, 0.25), (10**9, 8.0), (1300, 1.3),
                                              (True, 1.0), (-5, 1.0), ("800", 1.0)])
def test_a_tokenize_answer_scales_the_turns_only_within_bounds(count: object,
                                                               ratio: float) -> None:
    """A count of 1 for 1,000 words made every 200-token turn 200,000 words (14 MB)."""
    handler = type("Handler", (_Tokenize,), {"count": count})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        got = asyncio.run(tokens_per_word(Endpoint.parse(url), {}, "m", 0))
    finally:
        server.shutdown()
        server.server_close()
    assert got == pytest.approx(ratio)
    assert words_ratio(count, 1000) == pytest.approx(ratio)


def test_a_kept_answer_is_bounded() -> None:
    """An engine that ignores the token limit cannot grow the next turn without end."""
    limit = kept_answer_chars(6)
    assert limit == 4096 and kept_answer_chars(1000) == 64_000
    collect = _TextCollector(RequestResult(request_id="x"), LiveCounters(), limit)
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "y" * 1000}}]}).encode()
    for at in range(10):
        collect(chunk, float(at))
    assert len("".join(collect.text)) == limit
    assert collect.chunks == 10  # every chunk still timed
