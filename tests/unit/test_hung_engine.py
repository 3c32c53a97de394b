"""onecat/answers/hung.py: a stuck engine told from a slow one and from one that is down."""

from __future__ import annotations

from onecat.answers.hung import Activity, activity, stuck

# vLLM's own shape: one sample per model and engine, HELP/TYPE lines, the _created twin.
PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="m"} 34.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:generation_tokens_total_bogus 99
"""


def test_the_page_gives_tokens_running_and_waiting_summed_over_label_sets() -> None:
    assert activity(PAGE) == Activity(1234.0, 2.0, 3.0)


def test_a_page_without_the_generation_counter_is_no_evidence() -> None:
    assert activity("vllm:num_requests_running 1\n") is None
    assert activity("") is None and activity(None) is None
    assert activity("vllm:generation_tokens_total not-a-number\n") is None


def test_a_counter_that_stood_still_is_stuck_even_with_gauges_at_zero() -> None:
    # vllm PR #46811's incident: the wedge landed before the gauges' update (running read 0).
    why = stuck(Activity(40, 0, 0), Activity(40, 0, 0), 60)
    assert why is not None and "answered nothing in 60 s" in why
    assert "0 request(s) running, 0 waiting" in why
    why = stuck(Activity(40, 0, 0), Activity(40, 1, 3), 61.4)
    assert why is not None and "1 request(s) running, 3 waiting" in why


def test_a_counter_that_moved_or_restarted_or_was_not_read_is_not_stuck() -> None:
    assert stuck(Activity(40, 1, 0), Activity(41, 1, 0), 60) is None  # slow, but generating
    assert stuck(Activity(40, 1, 0), Activity(3, 1, 0), 60) is None   # a new engine: new counter
    assert stuck(None, Activity(40, 1, 0), 60) is None
    assert stuck(Activity(40, 1, 0), None, 60) is None
