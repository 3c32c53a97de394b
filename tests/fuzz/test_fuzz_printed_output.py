"""Fuzz what onecat prints from nodes and engines (issue 49): the deploy table and its FAILED
lines, and what the multi-turn bench keeps of an engine's answers.

Contract: every line `onecat deploy` prints is printable (no escape sequence, no CR), and a
node's text adds no line of its own to the table; the multi-turn bench keeps at most its
bound of any answer, and a chunk of any shape is one counted error, never another exception.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from fuzzkit import JSON, examples, fuzz
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.bench.httpclient import HttpError
from onecat.bench.multiturn import _TextCollector, kept_answer_chars
from onecat.bench.runner import LiveCounters, RequestResult
from onecat.fleet.rollout import render_table, summarize
from onecat.fleet.runner import HostProgress, RunOutcome, print_outcome

# What a node's text may hold: escape sequences, CR and LF, NUL, bidi controls, anything.
HOSTILE = st.text(max_size=80) | st.sampled_from([
    "\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "ok\r\nnode-9   serve   ok", "\x00", "\u202etxt",
    "\x9b31m", "line\u2028two"])


@settings(max_examples=examples(200))
@given(st.lists(HOSTILE, min_size=1, max_size=3), st.lists(HOSTILE, max_size=2), HOSTILE)
@example(["\x1b]0;pwned\x07boom\nnode-9 serve ok"], ["\r\nNOTE: fake"], "x\x1b[2J")
@fuzz("deploy: the table and FAILED lines")
def test_every_printed_line_is_printable_and_a_node_adds_no_row(reasons, notes, error):
    summary = summarize({"n1": {"onecat_stage": "serve", "onecat_stages_passed": ["health"],
                                "vllm_serve_result": {"serving": False, "rolled_back": False,
                                                      "reason": reasons[0]}}})
    summary["hosts"][0]["reasons"] = reasons
    summary["notes"] = notes
    table = render_table(summary).splitlines()
    assert all(line.isprintable() for line in table), table
    # The header, its rule, one row, one line per reason, one per note: no more.
    assert len(table) == 3 + len(reasons) + len(notes), table
    progress = HostProgress(stage="serve")
    progress.counts["failed"] = 1
    progress.errors.append(error)
    out = io.StringIO()
    print_outcome(RunOutcome("r", Path("/nonexistent"), 2, "failed", {"n1": progress}),
                  stream=out)
    lines = out.getvalue().splitlines()
    assert all(line.isprintable() for line in lines), lines
    assert sum(line.startswith("n1: FAILED") for line in lines) == 1


CHUNK = (st.builds(lambda text: {"choices": [{"index": 0, "delta": {"content": text}}]},
                   st.text(max_size=3000)) | JSON)


@settings(max_examples=examples(200))
@given(st.lists(CHUNK, min_size=1, max_size=8), st.integers(0, 64))
@example([{"choices": [{"delta": {"content": "y" * 5000}}]}] * 3, 6)
@example([[1, 2], {"choices": "x"}, {"choices": [5]}], 6)
@fuzz("bench: multi-turn answers")
def test_a_kept_answer_stays_within_its_bound_and_a_bad_chunk_is_one_error(chunks, output_len):
    limit = kept_answer_chars(output_len)
    collect = _TextCollector(RequestResult(request_id="x"), LiveCounters(), limit)
    for at, chunk in enumerate(chunks):
        try:
            collect(json.dumps(chunk, allow_nan=True).encode(), float(at))
        except HttpError as err:  # the runner counts it as the request's error
            assert err.reason == "bad_response" or err.reason.startswith("server_error")
            break
    assert len("".join(collect.text)) <= limit
