"""Statistics and per-level metrics of `onecat bench`, against hand-computed values."""

import math
import random

import pytest

from onecat.bench import stats
from onecat.bench.metrics import level_metrics
from onecat.bench.runner import RequestResult


def test_mean_and_population_std():
    assert stats.mean([1, 2, 3, 4]) == 2.5
    # Classic example: deviations -3,-1,-1,-1,0,0,2,4 -> variance 32/8 = 4.
    assert stats.std([2, 4, 4, 4, 5, 5, 7, 9]) == 2.0


def test_percentile_linear_interpolation_by_hand():
    ten = list(range(1, 11))
    assert stats.percentile([4, 1, 3, 2], 50) == 2.5  # sorts first
    assert stats.median([5, 1, 3]) == 3
    assert stats.percentile(ten, 90) == pytest.approx(9.1, abs=1e-12)  # index 8.1
    assert stats.percentile(ten, 99) == pytest.approx(9.91, abs=1e-12)  # index 8.91
    assert stats.percentile(ten, 0) == 1
    assert stats.percentile(ten, 100) == 10
    assert stats.percentile([7.0], 99) == 7.0


def test_empty_input_gives_none_not_zero():
    assert stats.mean([]) is None
    assert stats.std([]) is None
    assert stats.percentile([], 50) is None
    assert stats.summarize("ttft", []) == {
        "mean_ttft_ms": None, "median_ttft_ms": None, "std_ttft_ms": None,
        "p90_ttft_ms": None, "p99_ttft_ms": None}


def test_percentile_rejects_out_of_range():
    with pytest.raises(ValueError, match="within"):
        stats.percentile([1.0], 101)


def test_summarize_converts_seconds_to_ms():
    out = stats.summarize("ttft", [0.1, 0.2, 0.3, 0.4])
    assert out["mean_ttft_ms"] == pytest.approx(250.0)
    assert out["median_ttft_ms"] == pytest.approx(250.0)
    assert out["std_ttft_ms"] == pytest.approx(math.sqrt(12500.0))  # (150²+50²)·2/4
    assert out["p90_ttft_ms"] == pytest.approx(370.0)  # index 2.7: 300 + 0.7·100
    assert out["p99_ttft_ms"] == pytest.approx(397.0)  # index 2.97


def test_percentile_is_bit_identical_to_numpy_default():
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 97, 1000):
        values = [rng.lognormvariate(0, 1) for _ in range(n)]
        for p in (0, 1, 25, 50, 90, 99, 99.9, 100):
            assert stats.percentile(values, p) == float(np.percentile(values, p)), (n, p)


def _ok(ttft, latency, out, prompt, itl):
    return RequestResult(ok=True, ttft=ttft, latency=latency, output_tokens=out,
                         prompt_tokens=prompt, itl=itl)


def test_level_metrics_like_vllm_bench_serve():
    results = [
        _ok(0.1, 1.1, 11, 100, [0.1] * 10),  # TPOT (1.1-0.1)/10 = 100 ms
        _ok(0.3, 2.3, 5, 100, [0.5] * 4),  # TPOT (2.3-0.3)/4 = 500 ms
        _ok(0.2, 0.2, 1, 100, []),  # one token: no TPOT, as in vLLM
        RequestResult(error="timeout"),
        RequestResult(error="http_500"),
        RequestResult(error="http_500"),
    ]
    m = level_metrics(results, concurrency=4, duration=4.0)
    assert m["max_concurrency"] == 4
    assert (m["num_requests"], m["completed"], m["failed"]) == (6, 3, 3)
    assert m["errors"] == {"http_500": 2, "timeout": 1}
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (300, 17)
    assert m["request_throughput"] == 0.75
    assert m["output_throughput"] == 4.25
    assert m["total_token_throughput"] == (300 + 17) / 4
    assert m["mean_tpot_ms"] == pytest.approx(300.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_itl_ms"] == pytest.approx((10 * 100 + 4 * 500) / 14)
    assert m["median_e2el_ms"] == pytest.approx(1100.0)
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p99"):
            assert f"{stat}_{name}_ms" in m


def test_level_metrics_with_nothing_completed():
    m = level_metrics([RequestResult(error="connection_refused")], concurrency=1, duration=0.5)
    assert m["completed"] == 0
    assert m["output_throughput"] == 0.0
    assert m["median_ttft_ms"] is None
    assert m["errors"] == {"connection_refused": 1}
