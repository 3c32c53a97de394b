"""`onecat bench` agrees with upstream's `vllm bench serve` on one real vLLM server (issue 48,
item 3): the same shape, one run each, with prompts of its own (tests/real_engine/peer.py).

What they are held to, and why not to each other's tok/s. Two runs one after the other see
different machines: in CI the tier shares two cores with both molecule scenarios, and stop 58's
CI measured onecat's median at 1.7 times vllm's in the same test (on an idle machine they agree
within 6 %: benchmarks/real_engine_peer.py, docs/testing.md). So each client is held to the one
clock that saw its own requests at the same moments: the server's (vLLM's TTFT and end-to-end
histograms, read before and after the run; no warm-up requests, so the server's count is the
client's):

- both count the same tokens exactly (EOS ignored), and the server counted the requests each
  says it sent;
- a client sends each request before the server's clock starts and reads its last token after
  it stops, so its mean end-to-end is at least the server's (less 5 % for two clocks), and at
  most 1.5 times it plus 100 ms: what the API server's delivery, HTTP and the client's parsing
  add, every process starved beside two converging scenarios (the first CI run of this test
  measured onecat's TTFT at 69 ms, inside a 50 ms allowance by less than the server's own
  TTFT).
  onecat's mean TTFT is held the same way.
- vllm bench's TTFT is not: its client stamps every chunk of one read with the moment of that
  read (vllm/benchmarks/lib/endpoint_request_func.py, `iter_any()`), so on a loaded machine,
  when its first read comes late, its TTFT reads as late as the whole request (the first CI run of
  this test: TTFT mean 191 ms where the server's own was 8.8 ms, end-to-end 197 ms; onecat in
  the same minute 69 and 226). It is held to its own end-to-end only.

A client that measured another thing is outside these bounds: TTFT taken at the last token
(the whole request, several times the server's TTFT here), a clock started before the request
got its concurrency slot, milliseconds taken for seconds.
"""

from __future__ import annotations

import engine
import peer
import pytest

pytestmark = pytest.mark.real_engine

SHAPE = peer.Shape(concurrency=4, input_len=64, output_len=32, requests=32, warmup=0)
ROUNDS = 1
LOW = 0.95
HIGH = 1.5
SLACK_MS = 100.0


@pytest.fixture(scope="module")
def runs(real_server: engine.Server, tmp_path_factory: pytest.TempPathFactory
         ) -> dict[str, list[dict]]:
    """Runs on the tier's shared server (interleaved, with ROUNDS above 1), each timed by the
    server too."""
    work = tmp_path_factory.mktemp("peer")
    found: dict[str, list[dict]] = {"onecat": [], "vllm": []}
    for round_ in range(ROUNDS):
        order = ("onecat", "vllm") if round_ % 2 == 0 else ("vllm", "onecat")
        for client in order:
            run = peer.run_onecat if client == "onecat" else peer.run_vllm
            seed = 1000 + 2 * round_ + (client == "vllm")
            out = work / f"{client}-{round_}"
            found[client].append(peer.timed_by_server(
                real_server, lambda run=run, out=out, seed=seed: run(real_server, out, seed,
                                                                     SHAPE)))
    return found


def test_both_clients_get_every_token_they_asked_for(runs: dict[str, list[dict]]) -> None:
    for client, results in runs.items():
        for result in results:
            assert result["completed"] == SHAPE.requests and result["failed"] == 0, (client,
                                                                                   result)
            assert result["total_output_tokens"] == SHAPE.requests * SHAPE.output_len, (
                client, result)
            assert result["server"]["requests"] == SHAPE.requests + SHAPE.warmup, (client,
                                                                                  result)


def test_each_client_times_its_requests_as_the_server_timed_them(
        runs: dict[str, list[dict]]) -> None:
    held = {"onecat": ("mean_e2el_ms", "mean_ttft_ms"), "vllm": ("mean_e2el_ms",)}
    for client, results in runs.items():
        for result in results:
            for key in held[client]:
                mine, server = result[key], result["server"][key]
                assert server is not None and server > 0, (client, key, result)
                assert LOW * server <= mine <= HIGH * server + SLACK_MS, (client, key, mine,
                                                                         server, result)
            assert 0 < result["mean_ttft_ms"] <= result["mean_e2el_ms"], (client, result)
