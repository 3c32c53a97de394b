"""benchmarks/repair.py reads progress files fetched from nodes (issue 49): what it prints
from them is printable, and a file of the wrong shape is one line and exit 2, never a
traceback."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "repair.py"
spec = importlib.util.spec_from_file_location("repair_benchmark", SCRIPT)
assert spec and spec.loader
repair_benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repair_benchmark)

ESCAPES = "reset\x1b]0;pwned\x07\x1b[2J\nFAKE"


def test_step_names_and_rungs_from_a_node_print_as_one_line(tmp_path: Path, capsys) -> None:
    progress = {"step": ESCAPES, "fault_seen": 100.0,
                "tried": [{"rung": ESCAPES}, "junk"],
                "steps": [{"step": ESCAPES, "at": 101.0}, {"step": "judge", "at": 103.5},
                          {"step": "no time", "at": "soon"}, {"step": "gate", "at": 110.0}]}
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(progress))
    assert repair_benchmark.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert all(line.isprintable() for line in out.splitlines()), out
    assert "\x1b" not in out and "reset ]0;pwned [2J FAKE" in out
    assert "     2.5 s" in out and "     6.5 s" in out  # the untimed entry is left out


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', '{"steps": 5, "tried": {"a": 1}}'])
def test_a_progress_file_of_the_wrong_shape_is_no_traceback(tmp_path: Path, capsys,
                                                             content: str) -> None:
    path = tmp_path / "progress.json"
    path.write_text(content)
    code = repair_benchmark.main([str(path)])
    captured = capsys.readouterr()
    if content.startswith("{"):
        assert code == 0 and "measured:" in captured.out
    else:
        assert code == 2 and "is not a progress file" in captured.err
