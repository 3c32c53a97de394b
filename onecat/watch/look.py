"""One look at this node: read NVML, compare with the previous look, write the verdict.

`python3 -m onecat.watch --once` runs one look (the watch's systemd timer runs it every
interval). With a probe (the node's server URL and a prompts file), it also asks the server
each fixed prompt, greedy, and scores fixed reference texts (probe.py): an answer fails when
it degenerates or lacks what a right answer contains, a likelihood when it left the tolerance
of the one recorded when the node passed its gate (`--record-references` records them); a
failed probe is `unhealthy`. Answers are never compared with answers (not batch-invariant).

Every look judges the absolute readings with the health stage's own rules and what changed
since the previous look (deltas.py), and sustained hardware slowdown over a history of looks
(throttle.py). The previous readings live in the state folder with the kernel's boot id (after
a reboot the volatile counters and the kernel log start again: the previous boot's counts are
no baseline). The verdict file says what the node's gateway agent and `onecat status` read:
verdict, the state's own verdict, findings, the reason a node is out, when. Metrics go to
node_exporter's textfile folder when it exists. Exit status: 0 healthy, 1 degraded or
unhealthy, 2 NVML could not be read.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onecat import httpsync
from onecat.answers import hung
from onecat.answers.likelihood import FIRST_MAX_NLL, REL_TOLERANCE
from onecat.answers.probe import (
    ProbeResult,
    answers,
    as_set,
    ask_all,
    likelihoods,
    references_identity,
    stored_likelihoods,
)
from onecat.answers.prompts import PromptSet
from onecat.files import read_json, write_atomic, write_json
from onecat.health import xid_events
from onecat.health.judge import ERROR, WARNING, Thresholds
from onecat.health.nvml import gather
from onecat.repair import files as repair_files
from onecat.repair import floor
from onecat.repair import history as repair_history

from . import act, action_lock, throttle
from .deltas import Finding, Limits, change_findings, state_findings, verdict
from .metrics import render

EXIT_HEALTHY, EXIT_FINDINGS, EXIT_CANNOT_READ = 0, 1, 2
STATE_FILE = "last-readings.json"
ACTION_FILE = "action.json"
LAST_SUCCESS_FILE = "last-success"
THROTTLE_FILE = "throttle-history.json"
# Beside the agent's answer file: when the watch's answer expires (Unix seconds, three
# intervals after the look that wrote it). The gateway's agent answers `drain` past it, so a
# watch that stopped (its timer, its unit, a hung look) cannot leave a node in rotation.
EXPIRES_FILE = "watch-expires"
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")

@dataclass(frozen=True)
class Probe:
    """The quality probe: the node's own server and the fixed prompts it is asked."""

    url: str
    model: str
    prompts: PromptSet | list[str]
    references_file: Path
    api_key: str = ""
    record: bool = False
    # What serves (image, model revision, name, engine arguments): references recorded for
    # other bits are replaced by this look's (the node passed its gate on the new bits).
    identity: str = ""
    # The likelihood check's tolerance, relative to the recorded NLL (likelihood.py).
    tolerance: float = REL_TOLERANCE
    # The key of the engine's /metrics (ONECAT_METRICS_KEY: roles/vllm_serve's guard).
    metrics_key: str = ""
    # Each question waits at most timeout_s; the whole probe at most deadline_s, so the look
    # ends before its unit's TimeoutStartSec kills it (roles/watch derives both).
    timeout_s: float = 60.0
    deadline_s: float | None = None
    # The most a likelihood may be when it becomes the first reference (likelihood.py).
    first_max_nll: float = FIRST_MAX_NLL


@dataclass(frozen=True)
class Ladder:
    """The repair ladder's seams (onecat/repair): its folder (order, progress, history,
    report), its runner unit, and the window a repaired card's fault must not return in."""

    state_dir: Path
    start_runner: Callable[[], str | None]
    runner_active: Callable[[], bool]
    serving_record: Path
    recurrence_window_s: float = 7 * 86400.0


@dataclass(frozen=True)
class Acting:
    """What the watch may do about a fault: the gateway agent's answer file and the engine."""

    agent_file: Path | None
    restart_engine: Callable[[], str | None]
    policy: act.Policy = field(default_factory=act.Policy)
    # The repair ladder (policy.repair), None: a fault no restart clears is held.
    ladder: Ladder | None = None
    # The fleet's floor (the gateway host's /v1/out, onecat/repair/floor.py): asked with the
    # fault, answers (granted, why). None: no floor (no gateway).
    floor: Callable[[str], tuple[bool, str]] | None = None


def answer_agent(agent_file: Path, answer: str, state: dict[str, Any] | None = None) -> None:
    """Write the watch's answer for the node's gateway agent: `up` (the watch wants the node
    in) or its drain or maint. The agent turns `up` into `ready up` on every check while the
    deploy wants the node in too (roles/gateway, onecat-gateway-agent@.service): readmission
    is level-triggered, and a gateway that missed one check hears it at the next. A node no
    longer repairing (`state`, the watch's new one) loses the repair runner's drain beside it
    (REPAIR_DRAIN_FILE): the watch's own answer speaks for it again."""
    write_atomic(agent_file, answer + "\n")
    if state is not None and state.get("mode") != act.REPAIRING:
        (agent_file.parent / repair_files.REPAIR_DRAIN_FILE).unlink(missing_ok=True)


def _activity(config: Probe) -> hung.Activity | None:
    """The engine's activity from its /metrics (hung.py), None when it cannot be read."""
    try:
        answer = httpsync.request(f"{config.url}/metrics", headers={
            "Authorization": f"Bearer {config.metrics_key}"} if config.metrics_key else None,
            timeout=10, limit=8 << 20)
    except (OSError, ValueError):  # BadAnswer is a ValueError
        return None
    return hung.activity(answer.text()) if answer.status == 200 else None


def run_probe(config: Probe) -> tuple[list[ProbeResult], list[Finding]]:
    """Ask every prompt and score the reference texts (probe.py: known answers, degeneracy,
    likelihood; answers are never compared with answers). The likelihoods become the
    references after a passing look on new bits (or with --record-references); one that has
    none yet for a text gets it from its first passing look. A question the engine took and
    never answered, while its generation counter stood still, is a stuck engine (hung.py):
    a fault, with the restart first."""
    stored = read_json(config.references_file) or {}
    record = config.record or bool(config.identity and stored.get("identity") != config.identity)
    references = {} if record else stored_likelihoods(stored)
    seen: list[hung.Activity | None] = [None]

    def before_each() -> None:
        seen[0] = _activity(config)

    results = ask_all(config.url, config.model, config.prompts, references, config.api_key,
                      config.tolerance, config.timeout_s, config.deadline_s, before_each,
                      config.first_max_nll)
    stuck = None
    if results and results[-1].timed_out:
        stuck = hung.stuck(seen[0], _activity(config), results[-1].seconds)
    # A server that gives no answer at all (stopped, restarting, loading, or slow but making
    # tokens) is taken out by the gateway's own health check; the watch's business is a
    # server that answers wrong, or that took a request and is stuck on it.
    findings = [Finding(ERROR if result.reached else WARNING,
                        "quality" if result.reached else "probe_unreachable", None,
                        f"the quality probe {result.prompt[:40]!r} failed: {result.reason}")
                for result in results if not result.ok and not (stuck and result.timed_out)]
    if stuck:
        findings.append(Finding(ERROR, act.ENGINE_HUNG, None, stuck))
    chosen = as_set(config.prompts)
    questions = len(chosen.prompts) + (len(chosen.score_texts) if config.tolerance > 0 else 0)
    spent = sum(r.seconds for r in results)
    if (config.deadline_s is not None and not stuck and len(results) < questions
            and spent >= config.deadline_s - 1):
        findings.append(Finding(WARNING, "probe_deadline", None, (
            f"the probe's deadline ({config.deadline_s:.0f} s) ended it after {len(results)} of "
            f"{questions} questions: the rest were not asked (raise watch_probe_deadline_s, or "
            "ask fewer)")))
    scored = likelihoods(results)
    if not findings and (record or set(scored) - set(references)):
        document = {"model": config.model, "identity": config.identity,
                    "likelihood": {**references, **scored},
                    "answers": answers(results) if record else stored.get("answers") or {}}
        write_json(config.references_file, document)
    return results, findings


def summary(readings: dict[str, Any]) -> dict[str, Any]:
    """What `onecat status` shows of the GPUs: ECC errors since the driver loaded (the boot,
    on a node onecat deployed) and the hottest GPU, without a second NVML walk."""
    gpus = readings.get("gpus") or []

    def total(kind: str) -> int | None:
        values = [((g.get("ecc") or {}).get("volatile") or {}).get(kind) for g in gpus]
        known = [v for v in values if isinstance(v, int)]
        return sum(known) if known else None

    temperatures = [g["temperature_c"] for g in gpus if isinstance(g.get("temperature_c"), int)]
    return {"ecc_since_driver_load": {"corrected": total("corrected"),
                                      "uncorrected": total("uncorrected")},
            "temperature_max_c": max(temperatures) if temperatures else None}


def probe_due(state_dir: Path, every: int) -> bool:
    """Whether this look probes: every `every` looks, and on every look while the node is out
    (its way back in goes through a passing probe)."""
    counter = state_dir / "looks"
    try:
        count = int(counter.read_text().strip() or 0)
    except (OSError, ValueError):
        count = 0
    write_atomic(counter, f"{count + 1}\n", 0o600)
    mode = act.saved_mode(read_json(state_dir / ACTION_FILE))
    return mode != act.IN or count % max(every, 1) == 0


def serving_probe(record_file: Path, prompts: PromptSet | list[str], references_file: Path,
                  api_key: str, unit_dir: Path = Path("/etc/systemd/system"),
                  tolerance: float = REL_TOLERANCE) -> Probe | None:
    """The probe of what the node's serve stage recorded (serving.json), None when it
    records nothing (not serving yet) or when the engine's unit is not the one that passed
    the gate (a deploy is changing it: its own gate judges the new server, and the watch
    must not restart an engine the deploy is rolling out or back)."""
    record = read_json(record_file)
    if not record or not record.get("url") or not record.get("served_model_name"):
        return None
    if record.get("unit") and record.get("unit_sha256"):
        try:
            unit = (unit_dir / str(record["unit"])).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(unit).hexdigest() != record["unit_sha256"]:
            return None
    identity = references_identity(record)
    return Probe(str(record["url"]).rstrip("/"), str(record["served_model_name"]), prompts,
                 references_file, api_key, identity=identity, tolerance=tolerance)


def _expired(expires_file: Path, now: float) -> bool:
    """Whether the previous answer had expired (the agent answered `drain` for a stale watch)."""
    try:
        return float(expires_file.read_text().strip()) < now
    except (OSError, ValueError):
        return False


def _cards(faults: list[dict[str, Any]], readings: dict[str, Any] | None,
           previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The cards the faults point at, named with what the previous look read of them (a lost
    GPU's serial cannot be read now)."""
    return repair_history.fill_ids(repair_history.cards_of(faults, readings or {}), previous)


def _repair_view(ladder: Ladder | None, findings: list[Finding],
                 readings: dict[str, Any] | None, now: float,
                 previous: dict[str, Any] | None = None) -> act.Repair | None:
    """What the ladder knows at this look: serving, the runner's progress, and whether this
    look's fault came back on a card the ladder repaired within the window."""
    if ladder is None:
        return None
    faults = repair_history.recurring([f.as_dict() for f in findings if f.severity == ERROR])
    recurred = None
    if faults and readings:
        past = repair_history.load(read_json(ladder.state_dir / repair_files.HISTORY_FILE))
        recurred = repair_history.recurred(past, _cards(faults, readings, previous), now,
                                           ladder.recurrence_window_s)
    return act.Repair(serving=read_json(ladder.serving_record) is not None,
                      progress=read_json(ladder.state_dir / repair_files.PROGRESS_FILE),
                      runner_active=ladder.runner_active(), recurred=recurred)


def order_repair(ladder: Ladder, decided: act.Action, now: float) -> act.Action:
    """Hand the order to onecat-repair.service (a new order replaces the last one's progress;
    a resumed one keeps it); hold the node out when the runner cannot be started."""
    order = decided.start_repair or {}
    if not order.get("resume"):
        write_json(ladder.state_dir / repair_files.ORDER_FILE, order, 0o600)
        (ladder.state_dir / repair_files.PROGRESS_FILE).unlink(missing_ok=True)
    failure = ladder.start_runner()
    if failure:
        return act.restart_failed(decided, failure, now,
                                  "the repair runner (onecat-repair.service) did not start")
    return decided


def _service_report(ladder: Ladder, decided: act.Action, readings: dict[str, Any] | None,
                    now: float, repair: act.Repair | None,
                    previous: dict[str, Any] | None = None) -> None:
    faults = [f for f in decided.state.get("faults") or [] if isinstance(f, dict)]
    cards = _cards(faults, readings, previous)
    earlier = repair.recurred if repair is not None else None
    document = repair_history.report(node=platform.node(), now=now, reason=decided.state["reason"],
                              cards=cards, readings=readings or {}, earlier=earlier, tried=[])
    write_json(ladder.state_dir / repair_files.REPORT_FILE, document)
    past = repair_history.load(read_json(ladder.state_dir / repair_files.HISTORY_FILE))
    past = repair_history.record(past, at=now, cards=cards, fault=decided.state["reason"], tried=[],
                          outcome=repair_history.SERVICE_REQUIRED)
    write_atomic(ladder.state_dir / repair_files.HISTORY_FILE,
                 json.dumps(past, sort_keys=True) + "\n", 0o600)
    # The gateway's stats page and `onecat status` name the card for the ticket.
    decided.state["reason"] = act.clip(document["summary"])
    decided.answer = f"maint down #onecat-watch service required: {decided.state['reason']}"
    decided.transitions.append(f"service report: {document['summary'][:200]}")


def _floor_refused(acting: Acting, saved: Any, findings: list[Finding]) -> str:
    """Why the fleet's floor keeps this node in ("" when it may leave, or need not ask): asked
    only by a node in rotation whose faults do not make answers wrong (floor.py)."""
    faults = [f for f in findings if f.severity == ERROR]
    mode = act.saved_mode(saved)
    if acting.floor is None or not faults or mode != act.IN or floor.wrong_answers(
            f.code for f in faults):
        return ""
    granted, why = acting.floor("; ".join(f.message for f in faults)[:200])
    return "" if granted else why or "the fleet's floor keeps it in"


def _act(acting: Acting | None, state_dir: Path, findings: list[Finding], now: float,
         probe_unreachable: bool = False, stale_after_s: float | None = None,
         readings: dict[str, Any] | None = None, previous: dict[str, Any] | None = None,
         ) -> tuple[str | None, list[str], str]:
    """Decide what to do about a look (act.step), do it, and record it: the engine restart,
    the repair order, the saved state, the gateway agent's answer and when it expires. Returns
    the node's mode, the transitions and the reason it is out ("" when in)."""
    if acting is None:
        return None, [], ""
    with action_lock.held(state_dir):  # a --release or --repair meanwhile waits, not lost
        return _act_held(acting, state_dir, findings, now, probe_unreachable, stale_after_s,
                         readings, previous)


def _act_held(acting: Acting, state_dir: Path, findings: list[Finding], now: float,
              probe_unreachable: bool, stale_after_s: float | None,
              readings: dict[str, Any] | None, previous: dict[str, Any] | None,
              ) -> tuple[str | None, list[str], str]:
    ladder = acting.ladder if acting.policy.repair else None
    repair = _repair_view(ladder, findings, readings, now, previous)
    saved = read_json(state_dir / ACTION_FILE)
    decided = act.step(saved, findings, now, acting.policy,
                       probe_unreachable=probe_unreachable, repair=repair,
                       floor_refused=_floor_refused(acting, saved, findings))
    if decided.restart_engine:
        failure = acting.restart_engine()
        if failure:
            decided = act.restart_failed(decided, failure, now)
    if ladder is not None and decided.start_repair is not None:
        if not decided.start_repair.get("resume"):
            # The runner names the cards it repairs with what this watch read of them.
            # A fault that names no card (bad answers: the engine's) names none, so no later
            # fault of a card counts as its recurrence; the runner still resets every GPU the
            # engine holds.
            faults = [f for f in decided.start_repair.get("faults") or []
                      if isinstance(f, dict) and f.get("gpu")]
            decided.start_repair["cards"] = _cards(faults, readings, previous) if faults else []
        decided = order_repair(ladder, decided, now)
    if ladder is not None and decided.service_report:
        _service_report(ladder, decided, readings, now, repair, previous)
    write_atomic(state_dir / ACTION_FILE, json.dumps(decided.state, sort_keys=True) + "\n",
                 0o600)
    if acting.agent_file is not None:
        expires = acting.agent_file.with_name(EXPIRES_FILE)
        if decided.answer == "up" and _expired(expires, now):
            # The agent drained the node while the watch was silent; its next check, with a
            # fresh expiry, answers `ready up` again.
            decided.transitions.append("the watch looks again after its answer expired")
        if stale_after_s is not None:
            write_atomic(expires, f"{now + stale_after_s:.0f}\n")
        else:
            expires.unlink(missing_ok=True)  # no interval known: no deadline to keep
        answer_agent(acting.agent_file, decided.answer, decided.state)
    mode = decided.state["mode"]
    reason = "" if mode == act.IN else str(decided.state.get("reason") or "")
    if mode == act.IN and decided.state.get("floor"):
        reason = f"kept in by the fleet's floor: {decided.state['floor']}"
    if mode == act.REPAIRING:
        reason = f"{decided.state.get('step') or 'ordered'}: {reason}"
    return mode, decided.transitions, reason


def _still_looking(acting: Acting | None, now: float, stale_after_s: float | None,
                   quality: Probe) -> None:
    """Move the agent's expiry past the probe's deadline before the probe: a look that probes a
    loaded engine may take that long, and must not read as a watch that stopped (the agent
    answers `drain` past the expiry). Only later, never sooner; an expiry already passed is
    left to the end of the look, which readmits the node with a fresh one."""
    if acting is None or acting.agent_file is None or stale_after_s is None:
        return
    expires = acting.agent_file.with_name(EXPIRES_FILE)
    try:
        current = float(expires.read_text().strip())
    except (OSError, ValueError):
        return  # none yet (the first look) or garbled: the end of the look writes it
    until = now + stale_after_s + (quality.deadline_s or quality.timeout_s)
    if now <= current < until:
        write_atomic(expires, f"{until:.0f}\n")


def look(nvml: Any, state_dir: Path, verdict_file: Path, metrics_file: Path | None,
         kernel_log_path: str | None = None, limits: Limits | None = None,
         now: float | None = None, quality: Probe | None = None,
         acting: Acting | None = None,
         stale_after_s: float | None = None, thresholds: Thresholds | None = None,
         boot_id_file: Path = BOOT_ID_FILE, xid_events_file: Path | None = None,
         ) -> tuple[str, list[Finding], list[str]]:
    """One look: gather, judge the state, compare with the previous look, probe, act, record.

    `xid_events_file`: NVML's Xid events the listener wrote (onecat/health/xid_events.py), the
    second Xid source beside the kernel log; None reads the kernel log alone.

    Returns the verdict, the findings and the transitions of the node's mode (acting).
    Raises what gather raises (NVML cannot be read)."""
    now = time.time() if now is None else now
    previous = read_json(state_dir / STATE_FILE)
    booted = boot_id(boot_id_file)
    # The kernel log's lines after the previous look's cursor, in this boot (issue 47: lines
    # that left the log hide no new Xid).
    after = previous.get("xid_cursor") if isinstance(previous, dict) and booted and \
        previous.get("boot_id") == booted else None
    readings = gather(nvml, check_xid=True, kernel_log_path=kernel_log_path,
                      xid_after=after if isinstance(after, (int, float)) else None,
                      xid_times=xid_events_file is not None)
    readings["boot_id"] = booted
    if xid_events_file is not None:
        # NVML's Xid events after the previous look's cursor (its uptime), in this boot.
        # An unreadable boot id on both looks is one boot: the cursor still holds.
        heard = previous.get("xid_nvml") if isinstance(previous, dict) and \
            previous.get("boot_id") == booted else None
        cursor = heard.get("cursor") if isinstance(heard, dict) else None
        readings["xid_nvml"] = xid_events.look_at(
            xid_events_file, booted,
            cursor if isinstance(cursor, (int, float)) and not isinstance(cursor, bool) else None)
    state = state_findings(readings, thresholds)
    history = throttle.record(read_json(state_dir / THROTTLE_FILE), readings, now)
    findings = state + throttle.findings(history, readings, now) + change_findings(
        previous, readings, limits, state)
    results: list[ProbeResult] = []
    if quality is not None:
        _still_looking(acting, now, stale_after_s, quality)
        results, failed = run_probe(quality)
        findings += failed
    result = verdict(findings)
    # Nothing answered and nothing was found stuck: not back yet (an engine still loading).
    unreachable = bool(results) and not any(r.reached for r in results) and not any(
        f.code == act.ENGINE_HUNG for f in findings)
    mode, transitions, reason = _act(acting, state_dir, findings, now, unreachable,
                                     stale_after_s, readings, previous)
    stamp = _stamp(now)
    write_atomic(state_dir / LAST_SUCCESS_FILE, f"{now:.0f}\n", 0o600)
    write_atomic(state_dir / THROTTLE_FILE, json.dumps(history, sort_keys=True) + "\n", 0o600)
    document = {"verdict": result, "state_verdict": verdict(state), "at": stamp,
                "first_look": previous is None, "boot_id": readings["boot_id"], "mode": mode,
                "reason": reason, "floor_held": mode == act.IN and bool(reason),
                "last_success": stamp, "stale_after": _stale_after(now, stale_after_s),
                "transitions": transitions,
                "gpus": len(readings.get("gpus") or []),
                "xid_sources": xid_sources(readings),
                **summary(readings),
                "findings": [finding.as_dict() for finding in findings],
                "probe": [{"prompt": r.prompt, "ok": r.ok, "reason": r.reason,
                           "seconds": round(r.seconds, 3),
                           **({} if r.nll is None else {"nll": round(r.nll, 4)})}
                          for r in results] or None}
    write_json(verdict_file, document)
    write_atomic(state_dir / STATE_FILE, json.dumps(readings, sort_keys=True) + "\n", 0o600)
    if metrics_file is not None and metrics_file.parent.is_dir():
        write_atomic(metrics_file, render(
            readings, result, findings,
            probe_ok=all(r.ok for r in results) if results else None,
            probe_seconds=sum(r.seconds for r in results) if results else None, mode=mode,
            last_success=now, throttle_looks=history.get("looks"),
            repairs=_repair_counts(acting), floor_held=mode == act.IN and bool(reason),
            service_cards=_service_cards(acting, mode), deploy_drain=_deploy_drain(acting)))
    return result, findings, transitions


def xid_sources(readings: dict[str, Any]) -> dict[str, Any]:
    """Which Xid sources this look read, for the verdict: the kernel log (where from, or why
    not) and NVML's Xid events (the listener's state, the GPUs that give none). A source that
    is down is said here and in the metrics, never as a GPU's finding."""
    log = readings.get("xid_source") if readings.get("xid_events") is not None else None
    sources: dict[str, Any] = {"kernel_log": log or f"unread: {readings.get('xid_error')}"}
    heard = readings.get("xid_nvml")
    if isinstance(heard, dict):
        sources["nvml_events"] = {key: heard[key] for key in ("state", "why", "without_events")
                                  if key in heard}
    return sources


def _service_cards(acting: Acting | None, mode: str) -> list[dict[str, Any]] | None:
    """The cards the ladder's service report names while the node waits for service."""
    if acting is None or acting.ladder is None or mode != act.SERVICE:
        return None
    report = read_json(acting.ladder.state_dir / repair_files.REPORT_FILE)
    cards = report.get("cards") if isinstance(report, dict) else None
    return [card for card in cards if isinstance(card, dict)] if isinstance(cards, list) else None


def _deploy_drain(acting: Acting | None) -> bool | None:
    """Whether the deploy drains the node now: the gateway agent's deploy-drain, beside the
    watch's answer file (roles/gateway/tasks/drain.yml); None without an agent."""
    if acting is None or acting.agent_file is None:
        return None
    return (acting.agent_file.parent / "deploy-drain").exists()


def _repair_counts(acting: Acting | None) -> dict[str, int] | None:
    """The ladder's outcome counters (history.json), None without a ladder."""
    if acting is None or acting.ladder is None or not acting.policy.repair:
        return None
    past = repair_history.load(read_json(acting.ladder.state_dir / repair_files.HISTORY_FILE))
    return dict(past["counts"])


def boot_id(path: Path = BOOT_ID_FILE) -> str | None:
    """The kernel's boot id (a new one at every boot), None when it cannot be read."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _stale_after(now: float, stale_after_s: float | None) -> str | None:
    """When this verdict is stale (three of the timer's intervals without a new look): what
    `onecat status` compares with, so a watch that stopped does not look healthy forever."""
    return None if stale_after_s is None else _stamp(now + stale_after_s)


def _last_success(state_dir: Path) -> float | None:
    try:
        return float((state_dir / LAST_SUCCESS_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def cannot_look(why: str, state_dir: Path, verdict_file: Path, metrics_file: Path | None,
                acting: Acting | None = None, now: float | None = None,
                stale_after_s: float | None = None, reboot_pending: str = "") -> list[str]:
    """A look that could not complete (NVML failed, the GPU driver is gone, an exception):
    the watch fails closed. The verdict says "cannot look: <why>", the gateway agent answers
    `drain` (acting), and the metrics say the watch is down, with its last success. The last
    good readings stay the baseline of the next complete look. Returns the transitions.

    `reboot_pending` (the driver stage's reboot marker, when NVML said "Driver/library version
    mismatch"): blind for a reason that makes no answer wrong, so a warning, and the node
    stays in: a driver update with reboots off must not drain every node at once (issue 46)."""
    now = time.time() if now is None else now
    why = " ".join(why.split())[:300]
    if reboot_pending:
        findings = [Finding(WARNING, act.REBOOT_PENDING, None,
                            f"the watch cannot look: {why}; a driver reboot is pending "
                            f"({reboot_pending}): the engine serves on the libraries it "
                            "loaded, its GPUs unwatched until the node reboots")]
    else:
        findings = [Finding(ERROR, act.CANNOT_LOOK, None, f"the watch cannot look: {why}")]
    mode, transitions, reason = _act(acting, state_dir, findings, now,
                                     stale_after_s=stale_after_s)
    last = _last_success(state_dir)
    document = {"verdict": verdict(findings), "state_verdict": None, "at": _stamp(now),
                "cannot_look": why, "reboot_pending": bool(reboot_pending),
                "mode": mode, "reason": reason, "floor_held": mode == act.IN and bool(reason),
                "transitions": transitions, "stale_after": _stale_after(now, stale_after_s),
                "last_success": None if last is None else _stamp(last),
                "findings": [finding.as_dict() for finding in findings], "probe": None}
    write_json(verdict_file, document)
    if metrics_file is not None and metrics_file.parent.is_dir():
        write_atomic(metrics_file, render({}, verdict(findings), findings, mode=mode, up=False,
                                          last_success=last,
                                          floor_held=mode == act.IN and bool(reason),
                                          service_cards=_service_cards(acting, mode),
                                          deploy_drain=_deploy_drain(acting)))
    return transitions
