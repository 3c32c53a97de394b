"""The fleet summary says, per host, where it stopped and why."""

from __future__ import annotations

import io

from onecat.fleet.rollout import render_table, summarize

ECC = "GPU 1 (0000:d8:00.0, serial 0321) has 2 aggregate uncorrectable ECC errors: replace it"


def test_summary_rows_for_served_held_and_preflight_stopped_hosts():
    hosts = {
        "node-a": {"onecat_stage": "serve",
                   "onecat_stages_passed": ["preflight", "health", "serve"],
                   "gpu_health": {"verdict": "healthy", "problems": []},
                   "vllm_serve_result": {"serving": True, "image_id": "sha256:abc"}},
        "node-c": {"onecat_stage": "health", "onecat_stages_passed": ["preflight"],
                   "gpu_health": {"verdict": "unhealthy", "problems": [
                       {"severity": "warning", "message": "GPU 0 runs at x8"},
                       {"severity": "error", "message": ECC}]}},
        "node-d": {"onecat_stage": "preflight", "onecat_stages_passed": [],
                   "onecat_preflight": {"errors": ["no NVIDIA GPU found on the PCI bus"]}},
        "node-e": {},
    }
    summary = summarize(hosts, run_id="r1")
    rows = {row["host"]: row for row in summary["hosts"]}
    assert rows["node-a"] == {
        "host": "node-a", "stage": "serve", "status": "ok", "verdict": "healthy",
        "serving": True, "rolled_back": False, "image": "sha256:abc", "reasons": [],
        "in_rotation": None,
    }
    assert rows["node-c"]["status"] == "held at health"
    assert rows["node-c"]["reasons"] == [ECC]
    assert rows["node-d"]["reasons"] == ["no NVIDIA GPU found on the PCI bus"]
    assert rows["node-e"]["status"] == "not run"
    assert rows["node-c"]["serving"] is None
    assert summary["held"] == ["node-c", "node-d"]
    assert summary["serving"] == ["node-a"]
    assert summary["run_id"] == "r1"


def test_rolled_back_host_keeps_its_reason_and_unknown_failures_say_where():
    hosts = {
        "canary": {"onecat_stage": "serve", "onecat_stages_passed": ["preflight", "health"],
                   "vllm_serve_result": {"serving": True, "rolled_back": True,
                                    "reason": "smoke test returned one token repeated",
                                    "rollback": "rolled back to the previous unit and image"}},
        "other": {"onecat_stage": "runtime", "onecat_stages_passed": ["preflight", "driver"]},
    }
    summary = summarize(hosts)
    rows = {row["host"]: row for row in summary["hosts"]}
    assert rows["canary"]["reasons"] == [
        "smoke test returned one token repeated", "rolled back to the previous unit and image"
    ]
    assert rows["canary"]["serving"] is True
    assert summary["rolled_back"] == ["canary"]
    assert rows["other"]["reasons"] == [
        "failed during the runtime stage: see this run's log for the task"
    ]
    table = render_table(summary).splitlines()
    assert table[2].split() == ["canary", "serve", "held", "at", "serve", "-", "yes", "yes", "-"]
    assert table[3] == "    - smoke test returned one token repeated"


def test_host_left_untouched_by_a_stopped_rollout_is_not_held():
    hosts = {"node-b": {"onecat_stage": "serve", "onecat_stages_passed": ["preflight", "health"],
                        "onecat_skip_reason": "rollout stopped before this batch"}}
    (row,) = summarize(hosts)["hosts"]
    assert row["status"] == "untouched at serve"
    assert row["reasons"] == ["rollout stopped before this batch"]
    assert summarize(hosts)["held"] == []


def test_batched_stage_hold_reason_is_reported_flattened():
    hosts = {"node-d": {"onecat_stage": "driver", "onecat_stages_passed": ["preflight"],
                        "onecat_hold_reason": "nvidia_driver: branch 590\n  refused on Volta"}}
    (row,) = summarize(hosts)["hosts"]
    assert row["status"] == "held at driver"
    assert row["reasons"] == ["nvidia_driver: branch 590 refused on Volta"]


def test_gateway_state_says_whether_a_host_is_in_rotation():
    hosts = {
        "node-a": {"onecat_stage": "serve", "onecat_stages_passed": ["serve"],
                   "gateway_node_state": {"serving": True, "in_rotation": True}},
        "node-b": {"onecat_stage": "serve", "onecat_stages_passed": [],
                   "vllm_serve_result": {"serving": True, "rolled_back": True, "reason": "gate"},
                   "gateway_node_state": {"serving": True, "in_rotation": False,
                                          "reason": "gate"}},
    }
    summary = summarize(hosts)
    rows = {row["host"]: row for row in summary["hosts"]}
    assert rows["node-a"]["in_rotation"] is True and rows["node-b"]["in_rotation"] is False
    assert summary["in_rotation"] == ["node-a"]
    assert render_table(summary).splitlines()[3].split()[-1] == "no"


def test_run_notes_are_one_line_each_and_printed_under_the_table():
    summary = summarize({"n1": {"onecat_stage": "serve", "onecat_stages_passed": ["serve"]}},
                        "r1", ["the gateway on gw is OPEN:\n anyone", "", None])
    assert summary["notes"] == ["the gateway on gw is OPEN: anyone"]
    assert render_table(summary).splitlines()[-1] == "NOTE: the gateway on gw is OPEN: anyone"
    assert summarize({}, "r2")["notes"] == []


HOSTILE = "\x1b]0;pwned\x07boom\x1b[2J\r\nnode-9   serve   ok"  # a title, a clear, a fake row


def test_reasons_from_nodes_print_as_one_printable_line_each():
    """A reason is what a node or its engine said: an escape sequence reached the terminal
    and a newline added a row that looked like another host's."""
    summary = summarize({"n1": {"onecat_stage": "serve", "onecat_stages_passed": ["health"],
                                "vllm_serve_result": {"serving": False, "rolled_back": False,
                                                      "reason": HOSTILE}}})
    summary["notes"] = [HOSTILE]
    table = render_table(summary)
    assert all(line.isprintable() for line in table.splitlines()), table
    assert "\x1b" not in table and "\r" not in table
    assert table.count("node-9") == 2  # inside the reason's line and the note's, no row of its own
    assert not any(line.startswith("node-9") for line in table.splitlines())


def test_failed_lines_keep_their_lines_but_no_escape_sequence(tmp_path):
    from onecat.fleet.runner import HostProgress, RunOutcome, print_outcome

    progress = HostProgress(stage="serve")
    progress.counts["failed"] = 1
    progress.errors.append("the gate failed\n" + HOSTILE)
    out = io.StringIO()
    print_outcome(RunOutcome("r1", tmp_path, 2, "failed", {"n1": progress}), stream=out)
    lines = out.getvalue().splitlines()
    assert all(line.isprintable() for line in lines), lines
    start = lines.index("n1: FAILED the gate failed")
    assert lines[start + 1].startswith("    ") and "boom" in lines[start + 1]
    assert lines[start + 2] == "    node-9 serve ok"
