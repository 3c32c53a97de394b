"""`onecat status`: the fleet now, one row per node, from what each node's watch wrote.

playbooks/status.yml reads two small files per node (the watch's verdict file and the
serve stage's gateway state) and writes them to status.json in the run's folder; this
module turns them into the table. No NVML walk from the controller: the watch already
looked, at most one interval ago. A node out of service says why: held at a stage by the
newest rollout (its rollout.json in the results folder), held or drained by its watch,
or unreachable now.

The same run asks every gateway's HAProxy for its own view of the back end (gateways.json
beside status.json: {gateway: {"reached", "error", "servers": {server: {"status", "agent"}}}}).
The "at gateways" column shows it, and a node whose watch says in while a gateway holds it
out (or the reverse: the gateway does not hear its agent) is flagged under the table: what the
watch says is not what HAProxy does, and only HAProxy's view decides who gets requests.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fleet.rollout import rows_by_host
from ..gateway.backends import server_name
from ..gateway.runtime import in_rotation
from ..text import one_line

# verdict: the watch's whole verdict (state, changes, probe), `stale` when it stopped looking;
# state: the health judge's verdict on the GPUs' absolute readings alone; reason: why the
# watch drains or holds the node out; last success: the last look that completed.
# gateway: in or out as the deploy and the watch want it; at gateways: HAProxy's own status of
# the node at each gateway (what decides whether it gets requests).
COLUMNS = ("node", "verdict", "watch", "serving", "gateway", "at gateways", "state", "reason",
           "last success", "probe", "ECC c/u", "max °C", "findings")
# HAProxy statuses that take no new request ("DRAIN (agent)", "MAINT (via ...)", "DOWN 1/2").
OUT_OF_ROTATION = ("MAINT", "DRAIN", "DOWN", "NOLB")


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


@dataclass(frozen=True)
class Gateway:
    """One gateway's HAProxy view of the back end, as gateways.json says it (any shape read)."""

    name: str
    error: str = ""  # why it could not be read ("" when it was)
    servers: dict[str, tuple[str, str]] = field(default_factory=dict)  # name: (status, agent)


def _server(value: Any) -> tuple[str, str]:
    """(status, last agent text) of one server's entry; "?" for a status of the wrong type."""
    if isinstance(value, str):
        return one_line(value) or "?", ""
    value = _mapping(value)
    status, agent = value.get("status"), value.get("agent")
    return (one_line(status) or "?" if isinstance(status, str) else "?",
            one_line(agent) if isinstance(agent, str) else "")


def _gateway(name: str, entry: Any) -> Gateway:
    if not isinstance(entry, dict):
        return Gateway(name, "its entry is not a JSON object")
    if entry.get("reached") is False:
        return Gateway(name, "did not answer now")
    if entry.get("error"):
        return Gateway(name, one_line(entry["error"]))
    servers = entry.get("servers")
    if not isinstance(servers, dict):
        return Gateway(name, "its servers are not a JSON object")
    return Gateway(name, "", {one_line(k): _server(v) for k, v in servers.items()})


def gateway_views(document: Any) -> list[Gateway]:
    """gateways.json's entries by gateway name; an entry of any shape is a Gateway."""
    return [_gateway(one_line(name), entry)
            for name, entry in sorted(_mapping(document).items(), key=lambda kv: str(kv[0]))]


def _side(status: str) -> str | None:
    """"in" or "out" of rotation as HAProxy's status says, None when the status is not one
    HAProxy writes (a flag needs a status it can trust)."""
    if in_rotation(status):
        return "in"
    return "out" if status.split(" ", 1)[0].upper() in OUT_OF_ROTATION else None


def _word(gateway: Gateway, server: str) -> str:
    if gateway.error:
        return "not read"
    if server not in gateway.servers:
        return "absent"  # not in the back end: never passed a gate, or not deployed there
    status = gateway.servers[server][0]
    return status if status.upper() == "NO CHECK" else status.split(" ", 1)[0]


def at_gateways(server: str, gateways: list[Gateway]) -> str:
    """The node's status at each gateway: `UP` with one, `gw1 UP, gw2 MAINT` with several;
    those not read are counted last (the lines under the table say why), so the statuses
    that were read are not cut off a narrow cell."""
    if len(gateways) == 1:
        return _word(gateways[0], server)
    unread = sum(1 for g in gateways if g.error)
    return ", ".join([*(f"{g.name} {_word(g, server)}" for g in gateways if not g.error),
                      *([f"{unread} not read"] if unread else [])]) or "-"


def _wanted(verdict: Any, node: Any, rollout: Any) -> tuple[str, str, str] | None:
    """(in or out, what the node says, who says it) from its watch, its deploy state and the
    newest rollout; None when nothing says (a verdict without a usable mode)."""
    node = _mapping(node)
    mode = _mapping(verdict).get("mode")
    if isinstance(mode, str) and mode and mode != "in":
        return "out", f"watch: {one_line(mode)}", "its watch"
    held = _held(rollout)
    if held:
        return "out", f"rollout: {held[0]}", "the newest rollout"
    if "in_rotation" in node and not node["in_rotation"]:
        return "out", f"deploy: out ({one_line(node.get('reason') or '?')})", "the deploy"
    if mode == "in":
        return "in", "watch: in", "its watch"
    if verdict is None or verdict == {}:
        # No watch (not installed, or not looked yet): nothing on the node holds it out.
        return "in", "watch: none", ""
    return None  # a verdict file of the wrong shape says nothing either way


def _why(want: str, who: str, agent: str) -> str:
    if want == "in":
        return (f"out of rotation at the gateway while {who} says in" if who else
                "out of rotation at the gateway though nothing on the node holds it out")
    heard = f"; its agent last said: {agent}" if agent else ""
    return (f"in rotation at the gateway while {who} holds it out (the gateway does not "
            f"hear its agent{heard})")


def disagreements(host: str, verdict: Any, node: Any, gateways: list[Gateway],
                  rollout: Any = None, reached: bool = True,
                  server: str | None = None) -> list[str]:
    """A line per gateway whose HAProxy has the node out while the node wants it in, or in
    while the node wants it out (then the gateway does not hear its agent)."""
    wanted = _wanted(verdict, node, rollout) if reached else None
    if wanted is None:
        return []
    want, says, who = wanted
    server = server_name(host) if server is None else server
    lines = []
    for gateway in gateways:
        if gateway.error or server not in gateway.servers:
            continue
        status, agent = gateway.servers[server]
        side = _side(status)
        if side is None or side == want:
            continue
        lines.append(one_line(f"{host}: {says}, gateway {gateway.name}: {status} — "
                              f"{_why(want, who, agent)}"))
    return lines


def rotation_lines(gateways: list[Gateway]) -> list[str]:
    """One closing line per gateway: how many of its back end's servers take requests."""
    lines = []
    for gateway in gateways:
        if gateway.error:
            lines.append(f"gateway {gateway.name}: HAProxy's view not read: {gateway.error}")
            continue
        statuses = [status for status, _ in gateway.servers.values()]
        lines.append(f"gateway {gateway.name}: {sum(map(in_rotation, statuses))} of "
                     f"{len(statuses)} node(s) in rotation")
    return [one_line(line) for line in lines]


def _empty(host: str, verdict: str, watch: str, serving: str, gateway: str,
           findings: str = "-", at: str = "-") -> dict[str, str]:
    return {"node": host, "verdict": verdict, "watch": watch, "serving": serving,
            "gateway": gateway, "at gateways": at, "state": "-", "reason": "-",
            "last success": "-", "probe": "-", "ECC c/u": "-", "max °C": "-",
            "findings": findings}


def row(host: str, verdict: Any, node: Any, now: float, rollout: Any = None,
        reached: bool = True, gateways: list[Gateway] | None = None,
        server: str | None = None) -> dict[str, str]:
    """One node's row; a node without a verdict file (or with one of the wrong shape) says why.

    `rollout` is this host's row of the newest rollout.json; `reached` is False when the node
    did not answer the status run; `gateways` are the gateways' views, where the node is
    `server` (its inventory name made a server name)."""
    at = at_gateways(server_name(host) if server is None else server, gateways or [])
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
                      serving, gateway, held[1] if held else "-", at)
    if not isinstance(verdict, dict) or not verdict:
        if held and not verdict:
            # The rollout stopped before the watch stage: the reason is the rollout's.
            return _empty(host, held[0], "not installed (the rollout stopped before it)",
                          serving, gateway, held[1], at)
        why = ("no verdict file (watch not installed, or not looked yet)" if not verdict
               else "its verdict file is not a JSON object")
        return _empty(host, "unknown", why, serving, gateway, at=at)
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
            "at gateways": at, "state": _text(verdict.get("state_verdict")),
            "reason": one_line(reason) or "-",
            "last success": _age(verdict.get("last_success"), now), "probe": probe,
            "ECC c/u": _ecc(verdict.get("ecc_since_driver_load")),
            "max °C": _text(verdict.get("temperature_max_c")),
            "findings": "; ".join(str(f.get("message")) for f in findings) or "-"}


def render(rows: list[dict[str, str]], width: int = 60) -> str:
    """A plain-text table; long cells are cut to `width` characters (twice that for the
    gateways' statuses: a status cut off is the one thing this column is for)."""
    cells = [[one_line(r.get(c) or "-")[:width * (2 if c == "at gateways" else 1)]
              for c in COLUMNS] for r in rows]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
              for line in cells]
    return "\n".join(lines)


def _entries(document: Any) -> list[tuple[str, dict[str, Any]]]:
    """status.json's (host, entry) pairs by host name; an entry of any shape is a mapping."""
    return [(str(host), _mapping(entry))
            for host, entry in sorted(_mapping(document).items(), key=lambda kv: str(kv[0]))]


def rows_from_document(document: Any, now: float | None = None,
                       rollout: dict[str, Any] | None = None,
                       gateways: list[Gateway] | None = None) -> list[dict[str, str]]:
    """status.json ({host: {"verdict": ..., "node": ..., "reached": ...}}) as rows, by host
    name; `rollout` is the newest rollout.json's rows by host, `gateways` the gateways' views.
    A document that is not an object gives no row (issue 47: a list raised AttributeError)."""
    now = time.time() if now is None else now
    rollout = rollout or {}
    return [_unreadable(host, entry, gateways or []) if "unreadable" in entry else
            row(one_line(host), entry.get("verdict"), entry.get("node"), now,
                rollout.get(host), entry.get("reached") is not False, gateways,
                server_name(host))
            for host, entry in _entries(document)]


def _unreadable(host: str, entry: dict[str, Any], gateways: list[Gateway]) -> dict[str, str]:
    """A node that answered with a verdict file or node.json that is not JSON (the playbook
    could not parse it): the parser's words, after Ansible's preamble, are the findings."""
    why = one_line(entry["unreadable"]).rpartition("failed: ")[2] or "-"
    return _empty(one_line(host), "unknown", "its verdict file or node.json is not JSON",
                  "-", "-", why, at_gateways(server_name(host), gateways))


@dataclass
class Report:
    rows: list[dict[str, str]]
    flags: list[str]  # the nodes whose gateways disagree with them
    text: str


def report(document: Any, gateways: Any = None, rollout: dict[str, Any] | None = None,
           run_id: str = "", now: float | None = None, gateways_error: str = "") -> Report:
    """The table, then each gateway's count of nodes in rotation and the disagreements
    between the nodes and their gateways. `gateways` is gateways.json's document (None: none,
    no gateway lines); `gateways_error` says why it could not be read."""
    rollout = rollout or {}
    views = gateway_views(gateways)
    rows = rows_from_document(document, now, rollout, views)
    flags = [line for host, entry in _entries(document)
             for line in disagreements(one_line(host), entry.get("verdict"), entry.get("node"),
                                       views, rollout.get(host),
                                       entry.get("reached") is not False, server_name(host))
             if "unreadable" not in entry]
    lines = [render(rows)]
    if rollout:
        lines.append(f"(held at a stage: as the newest rollout, {one_line(run_id)}, left them)")
    if gateways_error:
        lines.append(f"(the gateways' view is not shown: {one_line(gateways_error)})")
    elif gateways is not None and not isinstance(gateways, dict):
        lines.append("(the gateways' view is not a JSON object of gateways: not shown)")
    elif gateways == {}:
        lines.append("(no gateway asked: the inventory has no gateway group, or --limit left "
                     "it out)")
    lines += rotation_lines(views)
    lines += [f"!! {flag}" for flag in flags]
    return Report(rows, flags, "\n".join(lines))


def read_json(path: Path) -> tuple[Any, str]:
    """(the document, "") or (None, why it cannot be read)."""
    try:
        return json.loads(path.read_text()), ""
    except (OSError, ValueError, RecursionError) as error:
        return None, f"cannot read {path}: {one_line(error)}"


def read_gateways(path: Path) -> tuple[Any, str]:
    """gateways.json's document and why it cannot be read; (None, "") when there is none (a
    status.json from before the gateways were read)."""
    return read_json(path) if path.exists() else (None, "")


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
    parser.add_argument("--gateways", type=Path,
                        help="each gateway's HAProxy view (default: gateways.json beside "
                             "STATUS_JSON, when there is one)")
    args = parser.parse_args(argv)
    document, error = read_json(args.status_json)
    if error:
        print(f"onecat status: {error}", file=sys.stderr)
        return 2
    if not isinstance(document, dict):
        print(f"onecat status: {args.status_json} is not a JSON object of nodes",
              file=sys.stderr)
        return 2
    run_id, rollout = newest_rollout(args.results) if args.results else ("", {})
    gateways, gateways_error = read_gateways(
        args.gateways or args.status_json.with_name("gateways.json"))
    print(report(document, gateways, rollout, run_id, gateways_error=gateways_error).text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
