"""Every HTTP client of the gate, the watch's probe, the burn-in's fixed prompts and
`onecat bench --gateway-stats` meets a server that answers malformed HTTP with one readable
line, never a traceback: http.client's HTTPException (a bad chunk, an over-long header line,
bytes that are not HTTP, a body cut short) is no OSError."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bad_http import ANSWERS, serving

from onecat.gateway.share import fetch_stats
from onecat.serve.gate import smoke, wait_ready

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=sorted(ANSWERS))
def bad_server(request) -> Iterator[str]:
    with serving(ANSWERS[request.param]) as url:
        yield url


def test_the_gate_and_the_probes_smoke_say_malformed(bad_server: str) -> None:
    passed, reason, text = smoke(bad_server, "m", "The capital of France is", 4, timeout_s=5)
    assert not passed and text == ""
    assert reason.startswith("the smoke completion failed: a malformed HTTP answer (")
    assert reason.isprintable()


def test_waiting_for_a_server_that_answers_malformed_http_ends_with_why(bad_server: str) -> None:
    ready, reason = wait_ready(bad_server, "m", timeout_s=0, interval_s=0)
    assert not ready
    assert reason.startswith("not ready after 0 s: /health gave a malformed HTTP answer (")
    assert reason.isprintable()


def test_gateway_stats_from_a_malformed_server_is_a_value_error(bad_server: str) -> None:
    with pytest.raises(ValueError, match="malformed HTTP answer"):
        fetch_stats(bad_server + "/stats", timeout=5)


def test_gateway_stats_reads_only_http_urls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"not an http\(s\) URL"):
        fetch_stats("file:///etc/passwd#")


def test_bench_gateway_stats_refuses_in_one_line_and_exit_2(bad_server: str,
                                                             tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onecat", "bench", "--url", bad_server, "--out",
         str(tmp_path / "out"), "--gateway-stats", bad_server + "/stats"],
        capture_output=True, text=True, check=False, cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "malformed HTTP answer" in lines[0], done.stderr
