"""Summarise a rollout per host: the stage it reached, its verdict, serving or not, and why.

Stdlib only: this file also ships as ``ansible.module_utils.onecat.fleet.rollout`` for the
``rollout_summary`` module that the report stage runs on the controller.
Input per host is the small subset of its hostvars that the stages set:
``onecat_stage`` (last stage entered), ``onecat_stages_passed``, ``onecat_skip_reason``
(the rollout stopped before the host's batch), ``onecat_hold_reason`` (why a batched
stage held the host out),
``onecat_preflight``, ``gpu_health``, ``vllm_serve_result`` and ``gateway_node_state`` (what
the serve stage recorded for the gateway: in rotation or held out, and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..text import one_line

STAGES = ("preflight", "driver", "runtime", "model", "health", "serve", "benchmark")


def _object(value: Any) -> Mapping[str, Any]:
    """A recorded fact that should be an object; {} when a play or a user set something else."""
    return value if isinstance(value, Mapping) else {}


def _line(value: Any) -> str:
    return " ".join(str(value).split())


def _lines(value: Any) -> list[str]:
    return [_line(item) for item in value if item] if isinstance(value, list) else []


def _reasons(stage: str, facts: Mapping[str, Any]) -> list[str]:
    """Why a host stopped at ``stage``, from what that stage recorded."""
    if stage == "preflight":
        return _lines(_object(facts.get("onecat_preflight")).get("errors"))
    if stage == "health":
        problems = _object(facts.get("gpu_health")).get("problems")
        return [_line(p.get("message")) for p in problems if isinstance(p, Mapping)
                and p.get("severity") == "error"] if isinstance(problems, list) else []
    if stage == "serve":
        result = _object(facts.get("vllm_serve_result"))
        return [_line(text) for text in (result.get("reason"), result.get("rollback")) if text]
    return []


def summarize_host(host: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    facts = _object(facts)
    stage = _line(facts.get("onecat_stage") or "not reached")
    passed = _lines(facts.get("onecat_stages_passed"))
    serve = facts.get("vllm_serve_result")
    serve = None if serve is None else _object(serve)
    skipped = facts.get("onecat_skip_reason")
    held = stage != "not reached" and stage not in passed and not skipped
    reasons = [_line(skipped)] if skipped else (_reasons(stage, facts) if held else [])
    if held and not reasons and facts.get("onecat_hold_reason"):
        reasons = [_line(facts["onecat_hold_reason"])]
    if held and not reasons:
        reasons = [f"failed during the {stage} stage: see this run's log for the task"]
    verdict = _object(facts.get("gpu_health")).get("verdict")
    return {
        "host": host,
        "stage": stage,
        "status": (
            f"held at {stage}" if held
            else f"untouched at {stage}" if skipped
            else "ok" if passed else "not run"
        ),
        "verdict": None if verdict is None else _line(verdict),
        # None: this run did not reach the serve stage, so it cannot say.
        "serving": None if serve is None else bool(serve.get("serving")),
        "rolled_back": bool((serve or {}).get("rolled_back")),
        "image": (serve or {}).get("image_id"),
        # None: no gateway state recorded in this run (no serve stage, or no gateway role).
        "in_rotation": _in_rotation(facts.get("gateway_node_state")),
        "reasons": reasons,
    }


def _in_rotation(state: Any) -> bool | None:
    if not isinstance(state, Mapping) or "in_rotation" not in state:
        return None
    return bool(state.get("in_rotation")) and bool(state.get("serving"))


def summarize(hosts: Mapping[str, Mapping[str, Any]], run_id: str = "",
              notes: list[Any] | None = None) -> dict[str, Any]:
    """Per host rows, the lists of held/serving/rolled back/in rotation hosts, and the run's
    notes (what holds for the whole fleet, e.g. an open gateway), one line each."""
    rows = [summarize_host(host, facts) for host, facts in sorted(hosts.items())]
    return {
        "run_id": run_id,
        "notes": [_line(note) for note in notes or [] if note and _line(note)],
        "hosts": rows,
        "held": [row["host"] for row in rows if row["status"].startswith("held")],
        "serving": [row["host"] for row in rows if row["serving"]],
        "rolled_back": [row["host"] for row in rows if row["rolled_back"]],
        "in_rotation": [row["host"] for row in rows if row["in_rotation"]],
    }


def render_table(summary: Mapping[str, Any]) -> str:
    """A fixed-width table, one line per host, reasons indented below it."""
    header = (f"{'host':<20} {'stage':<10} {'status':<18} {'verdict':<10} {'serving':<8} "
              f"{'rolled back':<12} in rotation")
    lines = [header, "-" * len(header)]
    # Reasons and statuses carry what nodes and engines said: one printable line each
    # (onecat.text.one_line), so no escape sequence reaches the terminal and no line is faked.
    for row in summary["hosts"]:
        lines.append(
            f"{one_line(row['host']):<20} {one_line(row['stage']):<10} "
            f"{one_line(row['status']):<18} {one_line(row['verdict'] or '-'):<10} "
            f"{yes_no(row['serving']):<8} "
            f"{'yes' if row['rolled_back'] else 'no':<12} {yes_no(row.get('in_rotation'))}"
        )
        lines.extend(f"    - {one_line(reason)}" for reason in row["reasons"])
    lines.extend(f"NOTE: {one_line(note)}" for note in summary.get("notes") or [])
    return "\n".join(lines)


def yes_no(value: object) -> str:
    return "-" if value is None else ("yes" if value else "no")


def rows_by_host(document: Any) -> dict[str, dict[str, Any]]:
    """A rollout.json document's rows by host name; rows of the wrong shape are left out
    (the file is read back by `onecat report` and `onecat status`)."""
    hosts = document.get("hosts") if isinstance(document, Mapping) else None
    if not isinstance(hosts, list):
        return {}
    return {row["host"]: row for row in hosts
            if isinstance(row, dict) and isinstance(row.get("host"), str)}
