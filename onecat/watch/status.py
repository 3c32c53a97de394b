"""`onecat status`: the fleet now, one row per node, from what each node's watch wrote.

playbooks/status.yml reads two small files per node (the watch's verdict file and the
serve stage's gateway state) and writes them to status.json in the run's folder; this
module turns them into the table. No NVML walk from the controller: the watch already
looked, at most one interval ago. A node out of service says why: held at a stage by the
newest rollout (its rollout.json in the results folder), held or drained by its watch,
or unreachable now.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ..fleet.rollout import rows_by_host
from ..text import one_line

# verdict: the watch's whole verdict (state, changes, probe), `stale` when it stopped looking;
# state: the health judge's verdict on the GPUs' absolute readings alone; reason: why the
# watch drains or holds the node out; last success: the last look that completed.
COLUMNS = ("node", "verdict", "watch", "serving", "gateway", "state", "reason", "last success",
           "probe", "ECC c/u", "max °C", "findings")


# The node files come from the nodes: any JSON shape, any characters. A reader of them is a
# controller-side parser of untrusted input (docs/hostile-input.md): no shape may raise, and no
# escape sequence may reach the operator's terminal.
def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _records(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _seconds(value: Any) -> float:
    try:
        seconds = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def _epoch(stamp: str) -> float | None:
    """A verdict's UTC time stamp (2026-12-03T16:59:30Z) in Unix seconds, or None."""
    try:
        return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except (ValueError, OverflowError):
        return None


def _age(stamp: Any, now: float) -> str:
    if not stamp:
        return "-"
    if not isinstance(stamp, str):
        return one_line(stamp)
    at = _epoch(stamp)
    if at is None:
        return stamp
    seconds = now - at
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s ago"
    return f"{seconds / 60:.0f} min ago" if seconds < 7200 else f"{seconds / 3600:.0f} h ago"


def _past(stamp: Any, now: float) -> bool:
    """Whether a verdict's `stale_after` time has passed (False when it has none)."""
    at = _epoch(stamp) if isinstance(stamp, str) else None
    return at is not None and now > at


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _ecc(counts: Any) -> str:
    """Corrected/uncorrected ECC errors since the driver loaded, summed over the GPUs."""
    if not isinstance(counts, dict):
        return "-"
    return f"{_text(counts.get('corrected'))}/{_text(counts.get('uncorrected'))}"


def _held(rollout: Any) -> tuple[str, str] | None:
    """(status, reasons) when the newest rollout held this host at a stage (or never got
    to its batch), else None."""
    rollout = _mapping(rollout)
    status = rollout.get("status")
    if not isinstance(status, str) or not status.startswith(("held", "untouched")):
        return None
    reasons = rollout.get("reasons")
    why = "; ".join(str(r) for r in reasons) if isinstance(reasons, list) else ""
    return one_line(status), one_line(why) or "see that run's summary"


def _empty(host: str, verdict: str, watch: str, serving: str, gateway: str,
           findings: str = "-") -> dict[str, str]:
    return {"node": host, "verdict": verdict, "watch": watch, "serving": serving,
            "gateway": gateway, "state": "-", "reason": "-", "last success": "-", "probe": "-",
            "ECC c/u": "-", "max °C": "-", "findings": findings}


def row(host: str, verdict: Any, node: Any, now: float, rollout: Any = None,
        reached: bool = True) -> dict[str, str]:
    """One node's row; a node without a verdict file (or with one of the wrong shape) says why.

    `rollout` is this host's row of the newest rollout.json; `reached` is False when the node
    did not answer the status run."""
    node = _mapping(node)
    serving = "-" if "serving" not in node else ("yes" if node["serving"] else "no")
    gateway = "-" if "in_rotation" not in node else (
        "in" if node["in_rotation"] else f"out: {node.get('reason') or '?'}")
    held = _held(rollout)
    if held and gateway in ("-", "in"):
        # The node's own state predates the rollout that held it (or it never had one).
        gateway = f"out: {held[0]}"
    if not reached:
        return _empty(host, "unreachable", "did not answer now (its error is below)",
                      serving, gateway, held[1] if held else "-")
    if not isinstance(verdict, dict) or not verdict:
        if held and not verdict:
            # The rollout stopped before the watch stage: the reason is the rollout's.
            return _empty(host, held[0], "not installed (the rollout stopped before it)",
                          serving, gateway, held[1])
        why = ("no verdict file (watch not installed, or not looked yet)" if not verdict
               else "its verdict file is not a JSON object")
        return _empty(host, "unknown", why, serving, gateway)
    watch = str(verdict.get("mode") or "-")
    result = str(verdict.get("verdict"))
    if verdict.get("cannot_look"):
        watch = f"{watch}; cannot look: {verdict['cannot_look']}"
    stale = _past(verdict.get("stale_after"), now)
    if stale:
        # The watch stopped (its timer, its unit, the node): what it said last is history.
        result = "stale"
        watch = f"stale: no look for three intervals (last said {verdict.get('verdict')})"
    probes = _records(verdict.get("probe"))
    probe = "-" if not probes else (
        "ok" if all(p.get("ok") for p in probes)
        else "FAILED " + next(str(p.get("reason")) for p in probes if not p.get("ok")))
    if probes:
        probe += f" ({sum(_seconds(p.get('seconds')) for p in probes):.1f} s)"
    findings = _records(verdict.get("findings"))
    mode = verdict.get("mode")
    if mode == "repairing":
        # "repairing: resetting" (the runner's step leads its reason, look.py).
        watch = f"repairing: {str(verdict.get('reason') or '').split(':', 1)[0] or '?'}"
    elif mode == "service":
        watch = "service required"
    if gateway == "in" and mode not in (None, "in"):
        # The deploy keeps it in; the node's watch took it out (the agent answers for both).
        gateway = "draining (watch)" if mode == "draining" else f"out (watch: {mode})"
    reason = verdict.get("reason") or (
        f"cannot look: {verdict['cannot_look']}" if verdict.get("cannot_look") else "")
    return {"node": host, "verdict": result, "watch": watch, "serving": serving, "gateway": gateway,
            "state": _text(verdict.get("state_verdict")), "reason": one_line(reason) or "-",
            "last success": _age(verdict.get("last_success"), now), "probe": probe,
            "ECC c/u": _ecc(verdict.get("ecc_since_driver_load")),
            "max °C": _text(verdict.get("temperature_max_c")),
            "findings": "; ".join(str(f.get("message")) for f in findings) or "-"}


def render(rows: list[dict[str, str]], width: int = 60) -> str:
    """A plain-text table; long cells are cut to `width` characters."""
    cells = [[one_line(r.get(c) or "-")[:width] for c in COLUMNS] for r in rows]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
              for line in cells]
    return "\n".join(lines)


def rows_from_document(document: dict[str, Any], now: float | None = None,
                       rollout: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """status.json ({host: {"verdict": ..., "node": ..., "reached": ...}}) as rows, by host
    name; `rollout` is the newest rollout.json's rows by host."""
    now = time.time() if now is None else now
    rollout = rollout or {}
    return [row(one_line(host), _mapping(entry).get("verdict"), _mapping(entry).get("node"),
                now, rollout.get(host), _mapping(entry).get("reached") is not False)
            for host, entry in sorted(document.items())]


def newest_rollout(results: Path) -> tuple[str, dict[str, Any]]:
    """The newest RESULTS/<run-id>/rollout.json: (its run id, its rows by host); ("", {})
    when there is none or it cannot be read (the table then goes without it)."""
    try:
        paths = sorted(results.glob("*/rollout.json"), key=lambda p: p.stat().st_mtime)
        document = json.loads(paths[-1].read_text()) if paths else None
    except (OSError, ValueError, RecursionError):
        return "", {}
    if document is None:
        return "", {}
    return (one_line(_mapping(document).get("run_id") or paths[-1].parent.name),
            rows_by_host(document))


def main(argv: list[str] | None = None) -> int:
    """`python3 -m onecat.watch.status STATUS_JSON`: print the table (playbooks/status.yml)."""
    parser = argparse.ArgumentParser(prog="python3 -m onecat.watch.status")
    parser.add_argument("status_json", type=Path)
    parser.add_argument("--results", type=Path,
                        help="the results folder whose newest rollout.json says which hosts "
                             "a rollout held")
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.status_json.read_text())
    except (OSError, ValueError) as error:
        print(f"onecat status: cannot read {args.status_json}: {error}", file=sys.stderr)
        return 2
    if not isinstance(document, dict):
        print(f"onecat status: {args.status_json} is not a JSON object of nodes",
              file=sys.stderr)
        return 2
    run_id, rollout = newest_rollout(args.results) if args.results else ("", {})
    print(render(rows_from_document(document, rollout=rollout)))
    if rollout:
        print(f"(held at a stage: as the newest rollout, {run_id}, left them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
