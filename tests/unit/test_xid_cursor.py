"""Xid events counted once (issue 47): each look counts the kernel log's lines after the
previous look's cursor (the kernel's own time on every line), so lines that left the log (a
kmsg ring wrap, journal vacuuming, Storage=volatile) hide no new event, as a count since boot
did: three old Xid 74 lines replaced by two new ones gave no finding."""

from __future__ import annotations

from onecat.health.nvml import line_time, log_cursor, parse_xid
from onecat.watch.deltas import change_findings

BUS = "0000:3b:00"


def _line(at: float, code: int = 74) -> str:
    return f"[{at:12.6f}] NVRM: Xid (PCI:{BUS}): {code}, pid=1, name=x, NVLink: fatal error"


def test_each_log_format_gives_the_kernels_time() -> None:
    assert line_time("[ 3605.118406] NVRM: Xid (PCI:0000:3b:00): 13, ...") == 3605.118406
    assert line_time("[  12.5] host kernel: NVRM: Xid ...") == 12.5  # journalctl short-monotonic
    assert line_time("4,1893,3605118406,-;NVRM: Xid (PCI:0000:3b:00): 13, ...") == 3605.118406
    assert line_time("NVRM: Xid (PCI:0000:3b:00): 13, ...") is None  # journalctl -o cat


def test_only_lines_after_the_cursor_are_new() -> None:
    old = "\n".join(_line(t) for t in (100, 200, 300)) + "\n[ 350.0] something else"
    assert log_cursor(old) == 350.0
    rotated = "\n".join(_line(t) for t in (400, 500))
    [event] = parse_xid(rotated, after=350.0)
    assert (event["count"], event["new"]) == (2, 2)
    [event] = parse_xid(old + "\n" + rotated, after=350.0)
    assert (event["count"], event["new"]) == (5, 2)
    [event] = parse_xid("NVRM: Xid (PCI:0000:3b:00): 74, no time", after=350.0)
    assert event["new"] is None  # no time on the line: the count since boot decides
    assert "new" not in parse_xid(old)[0]


def _readings(events: list[dict], cursor: float | None) -> dict:
    return {"boot_id": "b1", "gpus": [], "xid_events": events, "xid_cursor": cursor}


def test_rotated_old_lines_hide_no_new_fatal_xid() -> None:
    old = "\n".join(_line(t) for t in (100, 200, 300))
    before = _readings(parse_xid(old), log_cursor(old))
    rotated = "\n".join(_line(t) for t in (400, 500))
    now = _readings(parse_xid(rotated, after=before["xid_cursor"]), log_cursor(rotated))
    findings = [f for f in change_findings(before, now) if f.code == "xid"]
    assert len(findings) == 1 and findings[0].severity == "error"
    assert "Xid 74" in findings[0].message and "2 more time(s)" in findings[0].message
    # Nothing new after the cursor: nothing reported, whatever the count since boot.
    again = _readings(parse_xid(rotated, after=now["xid_cursor"]), log_cursor(rotated))
    assert [f for f in change_findings(now, again) if f.code == "xid"] == []
