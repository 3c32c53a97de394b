"""`onecat bench` agrees with upstream's `vllm bench serve` on one real vLLM server (issue 48,
item 3): the same shape, one run each, with prompts of its own (tests/real_engine/peer.py).

What they are held to, and why not to each other's tok/s or to a ceiling. In CI the tier shares
two cores with both molecule scenarios, and what a loaded machine adds between the engine and a
client has no bound worth asserting: stop 58's CI measured onecat's tok/s median at 1.7 times
vllm's; the next two runs, against the server's own clock for the same requests, measured
vllm bench's mean TTFT at 191 ms where the server's was 8.8 ms, then onecat's at 190 ms where
the server's was 43 ms (69 ms the run before). On an idle machine the two agree within 6 %
and each client's end-to-end is the server's plus 4-6 % (benchmarks/real_engine_peer.py,
docs/testing.md): that is where the figures live. What holds on any machine is what this
test asserts, for each client, against the server's clock (vLLM's TTFT and end-to-end
histograms, `_sum` and `_count` read before and after the run; no warm-up requests, so the
server's count is the client's):

- both count the same tokens exactly (EOS ignored), and the server counted the requests each
  says it sent;
- a client sends each request before the server's clock starts and reads its first and last
  token after the server made them, so its mean TTFT and end-to-end are at least the server's
  (less 5 % for two clocks): a client that timed less than the request (from its first token,
  a clock unit off, a chunk count taken for time) is below that;
- its TTFT is no more than its end-to-end.

That a chunk's arrival sets TTFT and the last one the end-to-end as in vllm bench serve is held
on controlled streams by tests/unit/test_bench_vllm_parity.py.
"""

from __future__ import annotations

import engine
import peer
import pytest

pytestmark = pytest.mark.real_engine

SHAPE = peer.Shape(concurrency=4, input_len=64, output_len=32, requests=32, warmup=0)
ROUNDS = 1
LOW = 0.95


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


def test_each_client_times_no_less_than_the_server_timed_its_requests(
        runs: dict[str, list[dict]]) -> None:
    for client, results in runs.items():
        for result in results:
            for key in peer.SERVER_TIMES:
                mine, server = result[key], result["server"][key]
                assert server is not None and server > 0, (client, key, result)
                assert mine >= LOW * server, (client, key, mine, server, result)
            assert 0 < result["mean_ttft_ms"] <= result["mean_e2el_ms"], (client, result)
