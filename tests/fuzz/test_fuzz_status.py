"""Fuzz what `onecat status` reads: status.json (each node's verdict and node.json, written by
playbooks/status.yml from the nodes' own files), gateways.json (each gateway's HAProxy view)
and the newest rollout.json.

Contract: `python -m onecat.watch.status` prints a table (exit 0), or one line and exit 2 when
status.json is not a JSON object of nodes; never a traceback (issue 47: a node document that
was a list raised AttributeError), and every printed character is printable (no escape from a
node or a gateway reaches the operator's terminal).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from fuzzkit import JSON, dumps, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.watch.status import main

VERDICT = {"verdict": "healthy", "state_verdict": "healthy", "mode": "in", "reason": "",
           "at": "2026-12-03T16:59:30Z", "last_success": "2026-12-03T16:59:30Z",
           "stale_after": "2026-12-03T17:02:30Z", "findings": [{"message": "GPU 1: hot"}],
           "probe": [{"ok": True, "seconds": 0.25}],
           "ecc_since_driver_load": {"corrected": 1, "uncorrected": 0}, "temperature_max_c": 71}
NODE = {"serving": True, "in_rotation": True, "reason": ""}
STATUS = {"fleet-a": {"reached": True, "verdict": VERDICT, "node": NODE},
          "fleet-b": {"reached": True, "verdict": {**VERDICT, "mode": "held"}, "node": NODE},
          "fleet-c": {"reached": False}}
GATEWAYS = {"gw1": {"reached": True, "error": "", "servers": {
    "fleet-a": {"status": "MAINT", "agent": "maint"},
    "fleet-b": {"status": "UP", "agent": "ready up"},
    "fleet-c": {"status": "DOWN 1/2", "agent": ""}}},
    "gw2": {"reached": False}}
ROLLOUT = {"run_id": "20261203T000000Z-abc1234", "hosts": [
    {"host": "fleet-c", "stage": "health", "status": "held at health", "reasons": ["ECC"]}]}


def _status(status: object, gateways: object, rollout: object) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "status.json").write_text(dumps(status))
        if gateways is not None:
            (folder / "gateways.json").write_text(dumps(gateways))
        (folder / "run").mkdir()
        (folder / "run" / "rollout.json").write_text(dumps(rollout))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(folder / "status.json"), "--results", str(folder)])
    return code, out.getvalue() + err.getvalue()


@settings(max_examples=examples(150))
@given(status=st.just(STATUS) | mutated(STATUS, max_edits=4) | JSON,
       gateways=st.none() | st.just(GATEWAYS) | mutated(GATEWAYS, max_edits=4) | JSON,
       rollout=st.just(ROLLOUT) | mutated(ROLLOUT, max_edits=2) | JSON)
# A node's verdict, node.json or whole entry, and a gateway's entry or servers, as a list, a
# string or a number (issue 47's crash was a list).
@example(status={"fleet-a": {"verdict": ["healthy"], "node": [1, 2]}, "fleet-b": "up",
                 "fleet-c": 5}, gateways={"gw1": ["UP"], "gw2": "MAINT", "gw3": 7}, rollout=None)
@example(status={"fleet-a": {"verdict": "healthy", "node": "in"}},
         gateways={"gw1": {"servers": ["fleet-a"]}, "gw2": {"servers": {"fleet-a": ["UP"]}}},
         rollout=["a list"])
@example(status=["fleet-a"], gateways=["gw1"], rollout="x")
@example(status={"fleet-a": {"verdict": {**VERDICT, "mode": "\x1b[2Jin"}, "node": NODE}},
         gateways={"gw\x1b]0;x\x07": {"servers": {"fleet-a": {"status": "MAINT\r\n!! fake",
                                                            "agent": "\x1b[31mheld"}}}},
         rollout=ROLLOUT)
@fuzz("status: status.json, gateways.json and rollout.json")
def test_fuzz_status_inputs(status: object, gateways: object, rollout: object) -> None:
    code, printed = _status(status, gateways, rollout)
    assert code == (0 if isinstance(status, dict) else 2), printed
    assert all(ch.isprintable() for line in printed.splitlines() for ch in line), printed
    if isinstance(status, dict):
        assert printed.startswith("node "), printed
    else:
        assert printed.count("\n") == 1, printed
