"""`onecat status`'s table, from the verdict files and gateway states of the nodes."""

from __future__ import annotations

import calendar
import time

from onecat.watch.status import render, row, rows_from_document

NOW = calendar.timegm(time.strptime("2026-12-03T17:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))


def test_a_healthy_serving_node_in_rotation() -> None:
    verdict = {"verdict": "healthy", "state_verdict": "healthy", "mode": "in", "reason": "",
               "at": "2026-12-03T16:59:30Z", "last_success": "2026-12-03T16:59:30Z",
               "findings": [],
               "probe": [{"ok": True, "seconds": 0.25}, {"ok": True, "seconds": 0.5}],
               "ecc_since_driver_load": {"corrected": 12, "uncorrected": 0},
               "temperature_max_c": 71}
    node = {"serving": True, "in_rotation": True}
    assert row("fleet-a", verdict, node, NOW) == {
        "node": "fleet-a", "verdict": "healthy", "watch": "in", "serving": "yes",
        "gateway": "in", "at gateways": "-", "state": "healthy", "reason": "-",
        "last success": "30 s ago",
        "probe": "ok (0.8 s)", "ECC c/u": "12/0", "max °C": "71", "findings": "-"}


def test_a_drained_node_shows_why() -> None:
    verdict = {"verdict": "unhealthy", "state_verdict": "unhealthy", "mode": "draining",
               "reason": "GPU 1 has 1 uncorrectable ECC error since the driver loaded",
               "at": "2026-12-03T16:00:00Z", "last_success": "2026-12-03T16:00:00Z",
               "findings": [{"message": "GPU 1: 1 new uncorrectable ECC error"}],
               "probe": [{"ok": False, "reason": "collapsed into repetition", "seconds": 1}]}
    cells = row("fleet-b", verdict, {"serving": True, "in_rotation": True}, NOW)
    assert cells["watch"] == "draining" and cells["serving"] == "yes"
    assert cells["gateway"] == "draining (watch)"
    held = row("fleet-b", {**verdict, "mode": "held"}, {"serving": True, "in_rotation": True}, NOW)
    assert held["gateway"] == "out (watch: held)"
    assert cells["last success"] == "60 min ago" and cells["state"] == "unhealthy"
    assert cells["reason"] == "GPU 1 has 1 uncorrectable ECC error since the driver loaded"
    assert cells["probe"] == "FAILED collapsed into repetition (1.0 s)"
    assert cells["findings"] == "GPU 1: 1 new uncorrectable ECC error"


def test_a_node_without_a_watch_says_so() -> None:
    cells = row("fleet-c", None, {"serving": False, "in_rotation": False, "reason": "ECC"}, NOW)
    assert cells["verdict"] == "unknown" and "no verdict file" in cells["watch"]
    assert cells["gateway"] == "out: ECC" and cells["serving"] == "no"


def test_the_table_lines_up_and_cuts_long_cells() -> None:
    rows = rows_from_document({"b": {"verdict": None, "node": None},
                               "a": {"verdict": {"verdict": "healthy", "findings": [
                                   {"message": "x" * 300}]}}}, NOW)
    table = render(rows, width=40).splitlines()
    assert [line.split()[0] for line in table] == ["node", "a", "b"]
    assert len({line.index("verdict") for line in table[:1]}) == 1
    assert max(len(line) for line in table) < 40 * 3 + 80
    assert table[1].split()[1] == "healthy" and table[2].split()[1] == "unknown"


GOOD = {"verdict": "healthy", "mode": "in", "at": "2026-12-03T16:59:30Z", "findings": [],
        "probe": [{"ok": True, "seconds": 0.25}]}
HOSTILE_NODE_FILES = [
    ["healthy"],                                   # the verdict as a list
    "healthy",                                     # ... as a string
    {**GOOD, "probe": "ok"},                       # probe as a string
    {**GOOD, "probe": ["ok", 5]},                  # probe entries that are not objects
    {**GOOD, "probe": [{"ok": True, "seconds": "fast"}]},
    {**GOOD, "probe": [{"ok": True, "seconds": 1e400}]},
    {**GOOD, "findings": 5},
    {**GOOD, "findings": ["disk", None]},
    {**GOOD, "at": 5},
    {**GOOD, "at": "9999999-01-01T00:00:00Z"},
    {**GOOD, "ecc_since_driver_load": [1, 2]},
    {**GOOD, "mode": ["in"], "temperature_max_c": {"a": 1}},
    {**GOOD, "reason": ["held"], "state_verdict": {"a": 1}, "last_success": 5},
    {**GOOD, "reason": None, "cannot_look": ["x"], "last_success": "yesterday"},
]


def test_node_files_of_any_shape_give_a_row_and_no_terminal_escapes() -> None:
    """status.json is read from the nodes: any shape gives a row, and ESC/OSC sequences in
    a finding cannot reach the operator's terminal."""
    for verdict in HOSTILE_NODE_FILES:
        cells = row("fleet-a", verdict, {"serving": True, "in_rotation": True}, NOW)
        assert cells["node"] == "fleet-a", verdict
    escape = {**GOOD, "findings": [{"message": "\x1b]0;pwned\x07 GPU 1\x1b[2J hot\r\nx"}]}
    document = {"fleet-a": {"verdict": escape, "node": ["not", "a", "dict"]},
                "fleet-\x1bb": "garbage", "fleet-c": {"verdict": "healthy", "node": 7}}
    table = render(rows_from_document(document, NOW))
    assert all(ch.isprintable() for line in table.splitlines() for ch in line), table
    assert "GPU 1 [2J hot x" in table and "its verdict file is not a JSON object" in table


def test_a_status_document_that_is_not_an_object_is_one_line_and_exit_2(tmp_path, capsys):
    from onecat.watch.status import main

    path = tmp_path / "status.json"
    path.write_text("[1, 2]")
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a JSON object of nodes" in err


HELD_AT_HEALTH = {"host": "fleet-c", "stage": "health", "status": "held at health",
                  "reasons": ["GPU 1 (00000000:5E:00.0) has 1 uncorrectable ECC error since the "
                              "driver loaded (3 in its lifetime): drain the node"]}


def test_a_node_the_rollout_held_at_health_says_so_not_unknown() -> None:
    """The demo's fleet-c: held at health, so no serve state and no watch on it."""
    cells = row("fleet-c", None, None, NOW, rollout=HELD_AT_HEALTH)
    assert cells["verdict"] == "held at health"
    assert cells["watch"] == "not installed (the rollout stopped before it)"
    assert cells["gateway"] == "out: held at health"
    assert cells["findings"].startswith("GPU 1 (00000000:5E:00.0) has 1 uncorrectable ECC error")
    # Its watch may run all the same (the watch stage alone): the watch's verdict stays first,
    # the gateway column says the rollout keeps it out.
    watched = row("fleet-c", GOOD, None, NOW, rollout=HELD_AT_HEALTH)
    assert (watched["verdict"], watched["watch"], watched["gateway"]) == (
        "healthy", "in", "out: held at health")
    # A rollout that passed the node changes nothing.
    passed = row("fleet-a", None, None, NOW, rollout={"status": "ok", "stage": "serve"})
    assert passed["verdict"] == "unknown" and "no verdict file" in passed["watch"]


def test_a_node_that_does_not_answer_is_unreachable_not_unknown() -> None:
    rows = rows_from_document({"fleet-a": {"reached": True, "verdict": GOOD, "node": None},
                               "fleet-b": {"reached": False}}, NOW)
    assert [(r["node"], r["verdict"]) for r in rows] == [("fleet-a", "healthy"),
                                                         ("fleet-b", "unreachable")]
    assert rows[1]["watch"] == "did not answer now (its error is below)"


def test_the_newest_rollout_names_the_held_hosts(tmp_path) -> None:
    import json
    import os

    from onecat.watch.status import main, newest_rollout

    assert newest_rollout(tmp_path) == ("", {})
    for age, (run_id, status) in enumerate((("20261204T1400-new", "held at health"),
                                            ("20261203T0900-old", "ok"))):
        (tmp_path / run_id).mkdir()
        path = tmp_path / run_id / "rollout.json"
        path.write_text(json.dumps({"run_id": run_id, "hosts": [
            {**HELD_AT_HEALTH, "status": status}, "not a row", {"host": 5}]}))
        os.utime(path, (NOW - 60 * age, NOW - 60 * age))
    run_id, rows = newest_rollout(tmp_path)
    assert run_id == "20261204T1400-new" and rows["fleet-c"]["status"] == "held at health"
    assert list(rows) == ["fleet-c"]
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"fleet-c": {"reached": True, "verdict": None, "node": None}}))
    assert main([str(status), "--results", str(tmp_path)]) == 0


def test_an_unreadable_rollout_leaves_the_table_without_it(tmp_path) -> None:
    from onecat.watch.status import newest_rollout

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rollout.json").write_text("{not json")
    assert newest_rollout(tmp_path) == ("", {})
    (tmp_path / "run" / "rollout.json").write_text('["a list"]')
    assert newest_rollout(tmp_path) == ("run", {})


def test_a_watch_that_stopped_looking_is_stale_not_healthy() -> None:
    """The verdict says when it goes stale (three of the timer's intervals): past that, the
    last verdict is history, whatever it said."""
    fresh = {**GOOD, "stale_after": "2026-12-03T17:02:30Z"}
    assert row("fleet-a", fresh, None, NOW)["verdict"] == "healthy"
    stopped = {**GOOD, "stale_after": "2026-12-03T16:59:59Z"}
    cells = row("fleet-a", stopped, None, NOW)
    assert cells["verdict"] == "stale"
    assert cells["watch"] == "stale: no look for three intervals (last said healthy)"
    assert row("fleet-a", {**GOOD, "stale_after": "soon"}, None, NOW)["verdict"] == "healthy"


def test_a_look_that_could_not_complete_says_why() -> None:
    blind = {"verdict": "unhealthy", "mode": "draining", "at": "2026-12-03T16:59:30Z",
             "cannot_look": "NVML failed: GPU is lost", "findings": [
                 {"message": "the watch cannot look: NVML failed: GPU is lost"}]}
    cells = row("fleet-a", blind, {"serving": True, "in_rotation": True}, NOW)
    assert cells["verdict"] == "unhealthy" and cells["gateway"] == "draining (watch)"
    assert cells["watch"] == "draining; cannot look: NVML failed: GPU is lost"


def test_the_timer_interval_is_read_as_systemd_reads_it() -> None:
    import pytest

    from onecat.timespan import timespan_seconds

    assert timespan_seconds("60s") == 60 and timespan_seconds("1h") == 3600
    assert timespan_seconds("1h 30min") == 5400 and timespan_seconds("8") == 8
    assert timespan_seconds("2 weeks") == 2 * 604800 and timespan_seconds("1.5m") == 90
    for bad in ("", "0s", "5 parsecs", "1h; rm -rf /", "-5s"):
        with pytest.raises(ValueError):
            timespan_seconds(bad)


def test_a_watch_that_cannot_look_or_stopped_says_so_with_its_last_success() -> None:
    blind = {"verdict": "unhealthy", "state_verdict": None, "mode": "draining", "reason":
             "the watch cannot look: NVML failed", "cannot_look": "NVML failed",
             "at": "2026-12-03T16:59:50Z", "last_success": "2026-12-03T16:40:00Z",
             "stale_after": "2026-12-03T17:02:50Z", "findings": []}
    cells = row("fleet-a", blind, {"serving": True, "in_rotation": True}, NOW)
    assert cells["verdict"] == "unhealthy" and cells["state"] == "-"
    assert cells["last success"] == "20 min ago"
    assert cells["reason"] == "the watch cannot look: NVML failed"
    stopped = {**GOOD, "state_verdict": "healthy", "last_success": "2026-12-03T16:50:00Z",
               "stale_after": "2026-12-03T16:53:00Z"}
    cells = row("fleet-a", stopped, {"serving": True, "in_rotation": True}, NOW)
    assert cells["verdict"] == "stale" and cells["last success"] == "10 min ago"
    assert cells["state"] == "healthy"  # what it last saw, shown as such


def test_a_repairing_node_says_its_step_and_a_dead_card_names_itself() -> None:
    verdict = {"verdict": "unhealthy", "mode": "repairing",
               "reason": "resetting: GPU 1 has 1 uncorrectable ECC error since the driver loaded",
               "at": "2026-12-03T16:00:00Z", "last_success": "2026-12-03T16:00:00Z"}
    cells = row("fleet-a", verdict, {"serving": True, "in_rotation": True}, NOW)
    assert cells["watch"] == "repairing: resetting"
    assert cells["gateway"] == "out (watch: repairing)"
    service = {**verdict, "mode": "service",
               "reason": "service required: GPU 1 serial 0323117011202 (00000000:5E:00.0): ECC"}
    cells = row("fleet-a", service, {"serving": True, "in_rotation": True}, NOW)
    assert cells["watch"] == "service required"
    assert cells["reason"].startswith("service required: GPU 1 serial 0323117011202")


# Each gateway's own view (gateways.json, playbooks/status.yml's gateway play): HAProxy's status
# of every server of onecat_nodes and the last word of its agent check.
def _gw(**servers: str) -> dict:
    return {"reached": True, "error": "", "servers": {
        name: {"status": status, "agent": "ready up" if status.startswith("UP") else "maint"}
        for name, status in servers.items()}}


IN = {"reached": True, "verdict": GOOD, "node": {"serving": True, "in_rotation": True}}


def test_the_at_gateways_column_is_haproxys_own_view() -> None:
    from onecat.watch.status import gateway_views

    one = gateway_views({"gw1": _gw(**{"fleet-a": "UP", "fleet-b": "DRAIN (agent)",
                                       "fleet-c": "MAINT (via onecat_nodes/x)"})})
    rows = rows_from_document({"fleet-a": IN, "fleet-b": IN, "fleet-c": IN, "fleet-d": IN},
                              NOW, gateways=one)
    assert [r["at gateways"] for r in rows] == ["UP", "DRAIN", "MAINT", "absent"]
    two = gateway_views({"gw2": _gw(**{"fleet-a": "MAINT"}), "gw1": _gw(**{"fleet-a": "UP 1/2"}),
                         "gw3": {"reached": False}})
    assert row("fleet-a", GOOD, None, NOW, gateways=two)["at gateways"] == \
        "gw1 UP, gw2 MAINT, 1 not read"
    # Without gateways (none read, or a status.json from before): a dash, as the other columns.
    assert row("fleet-a", GOOD, None, NOW)["at gateways"] == "-"
    # The server's name at the gateway is the inventory name with odd characters made "_"
    # (roles/gateway/tasks/hold.yml).
    odd = gateway_views({"gw1": _gw(**{"fleet_a.b_1": "MAINT"})})
    assert rows_from_document({"fleet a.b/1": IN}, NOW, gateways=odd)[0]["at gateways"] == "MAINT"


def test_out_at_a_gateway_while_the_watch_says_in_is_flagged() -> None:
    """The 3 a.m. case: the watch says in, HAProxy holds the node out; the table said in."""
    from onecat.watch.status import report

    gateways = {"gw1": _gw(**{"fleet-a": "MAINT", "fleet-b": "UP", "fleet-c": "DOWN"})}
    nowatch = {"reached": True, "verdict": None, "node": {"serving": True, "in_rotation": True}}
    done = report({"fleet-a": IN, "fleet-b": IN, "fleet-c": nowatch}, gateways, now=NOW)
    assert done.flags == [
        "fleet-a: watch: in, gateway gw1: MAINT — out of rotation at the gateway while its "
        "watch says in",
        "fleet-c: watch: none, gateway gw1: DOWN — out of rotation at the gateway though "
        "nothing on the node holds it out"]
    lines = done.text.splitlines()
    assert lines[-3:] == ["gateway gw1: 1 of 3 node(s) in rotation",
                          *(f"!! {flag}" for flag in done.flags)]
    assert [r["at gateways"] for r in done.rows] == ["MAINT", "UP", "DOWN"]


def test_in_at_a_gateway_while_the_node_wants_out_is_flagged() -> None:
    """The reverse: the watch holds the node out, HAProxy still sends it requests (its agent
    is not heard); so for the deploy's own hold and a rollout's."""
    from onecat.watch.status import report

    held = {**IN, "verdict": {**GOOD, "mode": "held"}}
    gated = {"reached": True, "verdict": None,
             "node": {"serving": True, "in_rotation": False, "reason": "gate failed"}}
    gateways = {"gw1": _gw(**{"fleet-a": "UP", "fleet-b": "UP", "fleet-c": "UP"}),
                "gw2": _gw(**{"fleet-a": "MAINT", "fleet-b": "MAINT", "fleet-c": "MAINT"})}
    done = report({"fleet-a": held, "fleet-b": gated, "fleet-c": {**IN, "verdict": None}},
                  gateways, rollout={"fleet-c": HELD_AT_HEALTH}, now=NOW)
    assert done.flags == [
        "fleet-a: watch: held, gateway gw1: UP — in rotation at the gateway while its watch "
        "holds it out (the gateway does not hear its agent; its agent last said: ready up)",
        "fleet-b: deploy: out (gate failed), gateway gw1: UP — in rotation at the gateway while "
        "the deploy holds it out (the gateway does not hear its agent; its agent last said: "
        "ready up)",
        "fleet-c: rollout: held at health, gateway gw1: UP — in rotation at the gateway while "
        "the newest rollout holds it out (the gateway does not hear its agent; its agent last "
        "said: ready up)"]
    assert [r["at gateways"] for r in done.rows] == ["gw1 UP, gw2 MAINT"] * 3


def test_agreement_and_unknowns_are_not_flagged() -> None:
    from onecat.watch.status import report

    draining = {**IN, "verdict": {**GOOD, "mode": "draining"}}
    gateways = {"gw1": _gw(**{"fleet-a": "UP", "fleet-b": "DRAIN (agent)", "fleet-c": "MAINT",
                              "fleet-d": "MAINT", "fleet-e": "who knows", "fleet-f": "MAINT"})}
    done = report({"fleet-a": IN, "fleet-b": draining, "fleet-c": {"reached": False},
                   "fleet-d": {**IN, "verdict": ["garbage"]}, "fleet-e": IN,
                   "fleet-f": {**IN, "verdict": {**GOOD, "mode": 5}}}, gateways, now=NOW)
    # in/UP and draining/DRAIN agree; an unreachable node and a verdict of the wrong shape say
    # nothing of what the node wants; a status HAProxy does not write is no evidence either.
    assert done.flags == []
    assert "gateway gw1: 1 of 6 node(s) in rotation" in done.text


def test_a_gateway_that_could_not_be_read_says_so() -> None:
    from onecat.watch.status import report

    gateways = {"gw1": {"reached": False},
                "gw2": {"reached": True, "servers": {},
                        "error": "gw2: HAProxy's admin socket /run/haproxy/admin.sock does not "
                                 "answer: [Errno 111] Connection refused"},
                "gw3": _gw(**{"fleet-a": "UP"})}
    done = report({"fleet-a": IN}, gateways, now=NOW)
    assert done.rows[0]["at gateways"] == "gw3 UP, 2 not read"
    unread = report({"fleet-a": IN}, {"gw1": {"reached": False}, "gw2": None}, now=NOW)
    assert unread.rows[0]["at gateways"] == "2 not read"
    assert done.text.splitlines()[-3:] == [
        "gateway gw1: HAProxy's view not read: did not answer now",
        "gateway gw2: HAProxy's view not read: gw2: HAProxy's admin socket "
        "/run/haproxy/admin.sock does not answer: [Errno 111] Connection refused",
        "gateway gw3: 1 of 1 node(s) in rotation"]
    assert done.flags == []
    assert "(no gateway asked: the inventory has no gateway group" in report(
        {"fleet-a": IN}, {}, now=NOW).text
    assert "gateway" not in report({"fleet-a": IN}, None, now=NOW).text.splitlines()[-1]


SHAPES = [["a", "list"], "a string", 5, 2.5, None, True, {}, {"mode": ["in"]}]


def test_a_status_document_of_any_shape_raises_nothing() -> None:
    """Issues 47 and 49: `onecat status` raised AttributeError ('list' object has no attribute
    'items') on a status document that is a list: no row, no traceback, whatever the shape."""
    for document in SHAPES[:6]:  # not objects
        assert rows_from_document(document, NOW) == [], document
    from onecat.watch.status import report

    for document in SHAPES[:6]:
        assert report(document, None, now=NOW).rows == [], document


def test_node_and_gateway_entries_of_any_shape_give_rows_and_no_traceback() -> None:
    """A node's verdict or node.json, or a gateway's entry, that is a list, a string, a number,
    null or an object with fields of the wrong type: a row, no traceback, no escape."""
    from onecat.watch.status import report

    document = {f"node-{i}-{j}": {"reached": True, "verdict": verdict, "node": node}
                for i, verdict in enumerate(SHAPES) for j, node in enumerate(
                    [*SHAPES, {"serving": [1], "in_rotation": "yes", "reason": {"a": 1}}])}
    document.update({"entry-list": ["x"], "entry-str": "x", "entry-num": 7, "entry-null": None})
    gateway_shapes = {f"gw-{i}": shape for i, shape in enumerate(SHAPES)}
    gateway_shapes.update({
        "gw-servers-list": {"reached": True, "servers": ["node-0-0"]},
        "gw-servers-str": {"reached": True, "servers": "UP"},
        "gw-error-list": {"reached": True, "error": ["down"], "servers": {}},
        "gw-\x1b]0;pwned\x07": {"reached": True, "servers": {
            "node-0-0": ["UP"], "node-1-1": "MAINT\x1b[2J", "node-2-2": {"status": 5},
            "node-3-3": {"status": "UP", "agent": ["x"]},
            "node-4-4": {"status": "DRAIN\r\nfake line", "agent": "\x1b[31mheld"},
            "entry-list": None}}})
    for gateways in (gateway_shapes, *SHAPES):
        done = report(document, gateways, now=NOW)
        assert len(done.rows) == len(document), gateways
        assert all(ch.isprintable() for line in done.text.splitlines() for ch in line), gateways
    done = report(document, gateway_shapes, now=NOW)
    assert "its entry is not a JSON object" in done.text
    assert "its servers are not a JSON object" in done.text
    assert "gateway gw-error-list: HAProxy's view not read: ['down']" in done.text


def test_a_node_file_that_is_not_json_is_a_row_not_unreachable() -> None:
    """The playbook cannot parse the file: the node answered all the same."""
    document = {"fleet-a": {"reached": True, "unreadable": "Task failed: ... The filter plugin "
                            "'ansible.builtin.from_json' failed: Expecting value: line 1"}}
    cells = rows_from_document(document, NOW)[0]
    assert (cells["verdict"], cells["watch"]) == (
        "unknown", "its verdict file or node.json is not JSON")
    assert cells["findings"] == "Expecting value: line 1"


def test_main_reads_the_gateways_beside_status_json(tmp_path, capsys) -> None:
    import json

    from onecat.watch.status import main

    status = tmp_path / "status.json"
    status.write_text(json.dumps({"fleet-a": IN}))
    assert main([str(status)]) == 0
    assert "gateway" not in capsys.readouterr().out.splitlines()[-1]  # none there: as before
    (tmp_path / "gateways.json").write_text(json.dumps({"gw1": _gw(**{"fleet-a": "MAINT"})}))
    assert main([str(status)]) == 0
    out = capsys.readouterr().out
    assert "!! fleet-a: watch: in, gateway gw1: MAINT" in out
    for text, says in (("{not json", "the gateways' view is not shown: cannot read"),
                       ('["a list"]', "is not a JSON object of gateways")):
        (tmp_path / "gateways.json").write_text(text)
        assert main([str(status)]) == 0
        assert says in capsys.readouterr().out
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"gw9": _gw(**{"fleet-a": "UP"})}))
    assert main([str(status), "--gateways", str(other)]) == 0
    assert "gateway gw9: 1 of 1 node(s) in rotation" in capsys.readouterr().out


def test_onecat_status_exits_1_on_a_disagreement_and_never_raises(tmp_path, monkeypatch,
                                                                   capsys) -> None:
    """`onecat status` itself (onecat/watch/cli.py): the status.json the playbook wrote, its
    gateways.json beside it; a status.json that is a list is one line, not issue 47's
    AttributeError; a gateway out of step with a healthy node exits 1."""
    import argparse
    import json

    from onecat.fleet.runner import RunOutcome
    from onecat.watch import cli

    run = tmp_path / "results" / "run-1"
    run.mkdir(parents=True)
    monkeypatch.setattr(cli, "inventory_usable", lambda inventory: True)
    monkeypatch.setattr(cli, "run_playbook", lambda *a, **k: RunOutcome("run-1", run, 0, "ok", {}))
    args = argparse.Namespace(inventory="hosts.yml", limit=None, extra_vars=[],
                              results=tmp_path / "results")
    healthy = {"fleet-a": {**IN, "verdict": {**GOOD, "stale_after": "2999-01-01T00:00:00Z"}}}
    (run / "status.json").write_text(json.dumps(healthy))
    (run / "gateways.json").write_text(json.dumps({"gw1": _gw(**{"fleet-a": "UP"})}))
    assert cli.run_status(args) == 0
    (run / "gateways.json").write_text(json.dumps({"gw1": _gw(**{"fleet-a": "MAINT"})}))
    assert cli.run_status(args) == 1
    assert "!! fleet-a: watch: in, gateway gw1: MAINT" in capsys.readouterr().out
    (run / "status.json").write_text('["a list"]')
    assert cli.run_status(args) == 1
    assert "is not a JSON object of nodes" in capsys.readouterr().err
