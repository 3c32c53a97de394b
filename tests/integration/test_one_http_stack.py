"""One HTTP stack: every malformed answer of tests/bad_http.py meets the blocking client
(onecat.httpsync: the gate, the probe, the scrapers) and the bench's aiohttp client as one
short reason or one printable line, never a traceback and never a wait for the timeout."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bad_http import ANSWERS, serving

from onecat import httpsync
from onecat.bench.httpclient import Client, Endpoint, HttpError
from onecat.bench.multiturn import read_counters
from onecat.bench.observe import http_metrics_fetch
from onecat.bench.runner import LiveCounters, Target, run_level
from onecat.serve.gate import smoke

REPO = Path(__file__).resolve().parents[2]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": [1]}\n"


@pytest.fixture(params=sorted(ANSWERS))
def bad_server(request) -> Iterator[str]:
    with serving(ANSWERS[request.param]) as url:
        yield url


def _one_line(text: str) -> None:
    assert text and text.isprintable() and len(text) < 300, repr(text)


def test_the_blocking_client_names_every_malformed_answer_in_one_line(bad_server: str) -> None:
    with pytest.raises(httpsync.BadAnswer) as error:
        httpsync.request(bad_server + "/health", timeout=5)
    _one_line(str(error.value))


def test_the_metrics_scraper_misses_a_sample_on_a_malformed_answer(bad_server: str) -> None:
    port = int(bad_server.rpartition(":")[2])
    fetch = http_metrics_fetch("127.0.0.1", port, False, timeout=5)
    try:
        with pytest.raises(httpsync.BadAnswer):
            fetch()
    finally:
        fetch.close()  # type: ignore[attr-defined]


def test_prefix_cache_counters_from_a_malformed_server_are_none(bad_server: str) -> None:
    assert read_counters(bad_server, timeout=5) is None


def test_a_smoke_completion_that_is_not_json_is_a_malformed_answer() -> None:
    with serving(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n<html>hi!") as url:
        passed, reason, _ = smoke(url, "m", "The capital of France is", 4, timeout_s=5)
    assert not passed
    assert reason.startswith("the smoke completion failed: a malformed HTTP answer (the body "
                             "is not JSON"), reason


def test_the_blocking_client_reads_a_good_answer_and_refuses_what_is_not_asked() -> None:
    with serving(OK) as url:
        answer = httpsync.request(url + "/x", timeout=5)
        assert (answer.status, answer.json()) == (200, {"a": [1]})
        with pytest.raises(httpsync.TooLarge):
            httpsync.request(url, timeout=5, limit=4)
    with (serving(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello") as url,
          pytest.raises(httpsync.BadAnswer, match="not JSON")):
        httpsync.request(url, timeout=5).json()
    for url in ("file:///etc/passwd", "http://a b/", "http://h:99999/", "ftp://h/"):
        with pytest.raises(ValueError, match=r"not an http\(s\) URL") as error:
            httpsync.request(url)
        assert not isinstance(error.value, httpsync.BadAnswer)


def test_a_kept_alive_connection_the_server_dropped_is_replaced_once() -> None:
    with serving(OK) as url:  # hangs up after each answer, without saying so
        conn = httpsync.Connection(url, timeout=5)
        try:
            assert conn.request("GET", "/metrics").json() == {"a": [1]}
            assert conn.request("GET", "/metrics").json() == {"a": [1]}
        finally:
            conn.close()


def test_nothing_answering_is_an_oserror_not_a_bad_answer() -> None:
    with serving(OK) as url:
        pass  # the port is free again
    with pytest.raises(OSError):
        httpsync.request(url, timeout=5)


def _client(url: str) -> Client:
    return Client(Endpoint.parse(url), {}, 2)


def _refused(bad_server: str, call: Callable[[Client], Awaitable[object]], what: str) -> None:
    """`call` on a client of the malformed server ends in one HttpError line with a reason, far
    below any request timeout (a malformed answer must not wait for it)."""
    async def scenario() -> HttpError:
        client = _client(bad_server)
        try:
            await asyncio.wait_for(call(client), 5)
        except HttpError as error:
            return error
        finally:
            await client.close()
        raise AssertionError(f"the malformed answer was read as {what}")

    error = asyncio.run(scenario())
    assert error.reason in ("bad_response", "truncated_stream"), error
    _one_line(str(error))


def test_a_stream_from_a_malformed_server_fails_with_a_reason_at_once(bad_server: str) -> None:
    _refused(bad_server, lambda client: client.stream("/v1/completions", b"{}",
                                                      lambda data, now: None), "a stream")


def test_a_side_request_to_a_malformed_server_fails_with_a_reason(bad_server: str) -> None:
    _refused(bad_server, lambda client: client.get_json("/v1/models"), "JSON")


def test_a_level_against_a_malformed_server_counts_each_failure(bad_server: str) -> None:
    target = Target(Endpoint.parse(bad_server), "m", False, {}, timeout=5)
    live = LiveCounters()
    run = asyncio.run(run_level(target, ["a", "b"], 1, 4, live))
    assert live.failed == 2 and live.done == 0
    assert {r.error for r in run.results} <= {"bad_response", "truncated_stream"}, run.results


def test_bench_against_a_malformed_server_exits_1_with_one_line(bad_server: str,
                                                                tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onecat", "bench", "--url", bad_server, "--out",
         str(tmp_path / "out"), "--timeout", "5"],
        capture_output=True, text=True, check=False, cwd=REPO, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach" in lines[0], done.stderr


def test_a_server_that_takes_the_request_and_says_nothing_is_told_from_one_that_is_not_there(
        ) -> None:
    """A listener that accepts and never answers (a stuck engine: onecat/answers/hung.py) is an
    AnswerTimeout, and the smoke completion says 'no answer in time'; a port nobody listens
    on is a plain refusal."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(httpsync.AnswerTimeout, match="no answer within 1 s"):
            httpsync.request(url + "/health", timeout=1)
        passed, reason, text = smoke(url, "m", "p", 4, timeout_s=1)
        assert not passed and text == "" and "no answer in time" in reason, reason
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(OSError) as error:
        httpsync.request(f"http://127.0.0.1:{port}/health", timeout=1)
    assert not isinstance(error.value, httpsync.AnswerTimeout)
