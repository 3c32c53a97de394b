"""What the watch does about a look: keep the node in, drain it, restart its engine once, or
hold it out until an operator acts.

A node is taken out in two steps, one look apart, so that requests already running finish:
`drain` (the gateway sends no new request), then `maint down` (out). After an event a restart
can clear (a fatal Xid, a failed quality probe: the seed says a restart clears the garbage for
a while) the engine is restarted once and the node comes back when the look after the restart
is clean. A condition that lasts (a lost GPU, a page pending retirement, uncorrectable errors
since the driver loaded, sustained hardware slowdown, ...: deltas.CONDITIONS) is not cleared
by a restart: the node is held out, as is one with a second fault within the flap window or
an engine that does not come back, until `--release` (a released node whose condition still
lasts is drained again by the next look).

Pure: `step` takes the saved state, the look and the time, and returns the new state and
what to do; look.py does it.

The repair ladder (issue 31, onecat/repair): with `Policy.repair`, a fault a GPU reset or a
reboot can clear (remedies.py's table) is not held for an operator: the node goes to
`repairing` and onecat-repair.service climbs the ladder (lease, engine stopped, GPUs reset,
judged, started, gated, burned in); the watch answers the gateway meanwhile and readmits the
node when the runner says it passed. A fault back within the recurrence window of a repair of
the same card, or one that needs the card replaced, ends in `service` (service required).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from onecat.health.judge import ERROR
from onecat.repair import remedies, run

from .deltas import Finding

IN, DRAINING, RESTARTED, HELD = "in", "draining", "restarted", "held"
REPAIRING, SERVICE = "repairing", "service"
MODES = (IN, DRAINING, RESTARTED, HELD, REPAIRING, SERVICE)
# What an engine restart can clear is remedies.py's table (rung "restart"): a channel the
# driver reset (a fatal Xid), answers that went bad (the seed's pitfall 5.5). A condition (a
# state the health judge reports on every look) is never restartable: the GPU's state outlives
# the engine.
# The look itself could not complete (NVML failed, an exception): the watch is blind. It
# fails closed: the node drains and stays drained while the watch cannot look, and comes
# back by itself once a complete look finds nothing (no restart, no hold for blindness alone).
CANNOT_LOOK = "cannot_look"
# Blind, but for a reason that makes no answer wrong: the driver's userspace was upgraded and
# the host has not rebooted yet (NVML error 18 while the driver stage's reboot marker says so).
# The engine serves on the libraries it loaded; a drain here would take every node of a fleet
# out at once on a driver update (issue 46). A warning: the node stays in.
REBOOT_PENDING = "reboot_pending"
# The engine took the quality probe's request and generated nothing for its whole timeout
# (hung.py): a fault, the restart first (onecat/repair/remedies.py).
ENGINE_HUNG = "engine_hung"
# Faults that end by themselves, outside the card: sustained hardware slowdown (heat, the
# power brake; throttle.py keeps it failed until its quiet stretch has passed). No rung clears
# them and no operator needs to: the node is out while they last and back after (issue 46),
# so a cooling failure along a row of racks does not leave every node in it held for a
# `--release` each.
SELF_CLEARING = frozenset({"throttle_sustained"})


@dataclass(frozen=True)
class Policy:
    """The watch's action settings (the role's watch_* variables)."""

    # Restart the engine after a fault it can clear; false holds the node out at once.
    restart: bool = True
    # A second fault within this many seconds of a restart holds the node out.
    flap_window_s: float = 3600.0
    # How long a restarted engine may take to answer again before the node is held out.
    restart_grace_s: float = 900.0
    # Climb the repair ladder (GPU reset) instead of holding the node for an operator.
    repair: bool = False
    # The ladder's last rung: reboot the node when a reset fails or cannot clear the fault.
    reboot: bool = False


@dataclass(frozen=True)
class Repair:
    """What the watch knows of the repair ladder at this look (look.py reads it)."""

    # The node serves (the serve stage recorded it): only a serving node is repaired; one the
    # rollout held out is the rollout's (an operator's `onecat repair`).
    serving: bool = False
    # The runner's progress file (onecat/repair/run.py), None when there is none.
    progress: dict[str, Any] | None = None
    # Whether onecat-repair.service runs now.
    runner_active: bool = False
    # The earlier repair of the same card within the recurrence window, when this look's
    # fault is back (look.py asks history.recurred): service required.
    recurred: dict[str, Any] | None = None


@dataclass
class Action:
    """What one step decided: the agent's answer, an engine restart, a log line."""

    state: dict[str, Any]
    answer: str
    restart_engine: bool = False
    transitions: list[str] = field(default_factory=list)
    # A repair order for onecat-repair.service (its rungs, the fault, the order id).
    start_repair: dict[str, Any] | None = None
    # The node just became "service required": write the report.
    service_report: bool = False


def initial_state() -> dict[str, Any]:
    return {"mode": IN, "since": None, "reason": "", "restartable": False, "restarts": [],
            "blind": False, "clearing": False, "floor": "", "rungs": [], "service": [],
            "faults": [], "order": None, "by_operator": False}


def saved_mode(saved: Any) -> str:
    """The mode a saved state (action.json, any JSON shape) records; IN when it records none."""
    return str(saved.get("mode") or IN) if isinstance(saved, dict) else IN


def clip(text: str) -> str:
    """A reason as the state, the agent's answer and the stats page carry it: printable ASCII
    (any other character becomes a space), at most 180 characters."""
    return "".join(ch if " " <= ch <= "~" else " " for ch in text)[:180]


def _clean_reason(findings: list[Finding]) -> str:
    worst = [f for f in findings if f.severity == ERROR] or findings
    return clip("; ".join(f.message for f in worst[:3]))


def _answer(mode: str, reason: str) -> str:
    """The watch's answer for the node's gateway agent: `up` when the watch wants the node in
    (the agent answers HAProxy `ready up` then, on every check, while the deploy wants it in
    too: roles/gateway), else the drain or maint with the reason."""
    if mode == IN:
        return "up"
    if mode == DRAINING:
        return f"drain #onecat-watch: {reason}"
    if mode == SERVICE:
        return f"maint down #onecat-watch service required: {reason}"
    return f"maint down #onecat-watch {mode}: {reason}"


# The runner's steps before its lease is granted (a new order's progress says "ordered").
BEFORE_LEASE = ("ordered", run.LEASE)


def _repair_answer(state: dict[str, Any]) -> str | None:
    """`up` for a node an operator ordered to repair while its runner waits for the fleet's
    lease: nothing is wrong with its answers, and taking every ordered node out at once, before
    any lease, would empty the gateway (issue 46). The runner drains it once the lease is
    granted (onecat/repair/files.py REPAIR_DRAIN_FILE); None otherwise."""
    if (state.get("mode") == REPAIRING and state.get("by_operator")
            and str(state.get("step") or "ordered") in BEFORE_LEASE):
        return "up"
    return None


def _self_clearing(faults: list[dict[str, Any]]) -> bool:
    """Whether every remembered fault ends by itself (SELF_CLEARING)."""
    return bool(faults) and all(isinstance(f, dict) and f.get("code") in SELF_CLEARING
                                for f in faults)


def _plan(faults: list[Finding]) -> remedies.Plan:
    return remedies.plan((f.code, f.xid) for f in faults)


def _remember(state: dict[str, Any], faults: list[Finding]) -> None:
    """Keep what the ladder needs of a fault: its plan and the findings themselves."""
    plan = _plan(faults)
    state.update(rungs=list(plan.rungs), service=list(plan.service),
                 held_by=list(plan.held_by), faults=[f.as_dict() for f in faults])


def step(
    saved: dict[str, Any] | None,
    findings: list[Finding],
    now: float,
    policy: Policy | None = None,
    probe_unreachable: bool = False,
    repair: Repair | None = None,
    floor_refused: str = "",
) -> Action:
    """One look's decision.

    `probe_unreachable`: the quality probe could not reach the server at all (an engine
    still loading after a restart): not back yet. A server that does not answer is the
    gateway's own health check's business (look.py makes it a warning), not a fault here.
    `repair`: the ladder's view (None: no ladder, a node is held for an operator).
    `floor_refused`: the fleet's floor refused this node's way out (why; look.py asked it,
    only for a node in rotation whose faults do not make answers wrong: onecat/repair/
    floor.py): it stays in, serving, and says so on every look."""
    policy = policy or Policy()
    repair = repair or Repair()
    state = {**initial_state(), **(saved or {})}
    if state["mode"] not in MODES:
        state = initial_state()
    recent = [t for t in state["restarts"] if now - float(t) < policy.flap_window_s]
    state["restarts"] = recent
    faults = [f for f in findings if f.severity == ERROR]
    mode, transitions, restart = state["mode"], [], False
    state["floor"] = ""
    order: dict[str, Any] | None = None
    report = False

    def go(new_mode: str, why: str) -> None:
        nonlocal mode
        transitions.append(f"{mode} -> {new_mode}: {why}")
        mode = new_mode
        state.update(mode=new_mode, since=now)

    def climb(why: str) -> None:
        """Up the ladder past the restart: service, a repair order, or held."""
        nonlocal order, report
        rungs = [r for r in state.get("rungs") or [] if r != remedies.RESTART]
        if state.get("service"):
            state["reason"] = clip(f"the card must be replaced ({', '.join(state['service'])})"
                                   f": {state['reason']}")
            report = True
            go(SERVICE, state["reason"])
        elif repair.recurred is not None and rungs:
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(repair.recurred["at"])))
            state["reason"] = clip(f"back after its {repair.recurred.get('rung')} "
                                   f"repair of {when}: {state['reason']}")
            report = True
            go(SERVICE, state["reason"])
        elif policy.repair and repair.serving and rungs and not state.get("held_by"):
            allowed = [r for r in rungs if r != remedies.REBOOT or policy.reboot]
            if not allowed:
                state["reason"] = clip(f"only a reboot clears it (onecat_repair_reboot is "
                                       f"off): {state['reason']}")
                go(HELD, state["reason"])
                return
            order = {"id": f"{now:.0f}", "rungs": allowed, "reason": state["reason"],
                     "faults": state.get("faults") or [], "fault_seen": state.get("since")}
            state["order"] = order["id"]
            state["by_operator"] = False
            go(REPAIRING, f"{allowed[0]} after: {state['reason']}")
        elif _self_clearing(state.get("faults") or []):
            state["reason"] = clip(f"out until it clears by itself: {state['reason']}")
            state["clearing"] = True
            go(HELD, state["reason"])
        else:
            state["reason"] = clip(f"{why}: {state['reason']}")
            go(HELD, state["reason"])

    blind = bool(faults) and all(f.code == CANNOT_LOOK for f in faults)
    if mode == REPAIRING:
        progress = repair.progress or {}
        current = progress.get("order") == state.get("order")
        stage = str(progress.get("step") or "ordered") if current else "ordered"
        if current and stage == "readmitted" and faults:
            # The runner's gate and burn-in passed, but the look that would readmit the node
            # finds a fault (its probe failed, the card's errors are back): it stays out, held
            # for an operator rather than ordered again (issue 47: readmit on a clean look).
            _remember(state, faults)
            state["reason"] = clip(f"faulty at the look after its repair: "
                                   f"{_clean_reason(findings)}")
            go(HELD, state["reason"])
        elif current and stage == "readmitted":
            state.update(reason="", rungs=[], service=[], faults=[])
            go(IN, f"repaired ({progress.get('rung') or 'reset'}), gated and burned in")
        elif current and stage == "service_required":
            state["reason"] = clip(str(progress.get("reason") or "service required"))
            go(SERVICE, state["reason"])
        elif current and stage == "failed":
            state["reason"] = clip(f"the repair failed: {progress.get('reason') or '?'}")
            go(HELD, state["reason"])
        elif not repair.runner_active:
            # The runner stopped before its end (it crashed, the node rebooted): it resumes.
            order = {"id": state.get("order"), "resume": True}
            transitions.append(f"{REPAIRING} -> {REPAIRING}: the repair runner is not running "
                               f"({stage}): started again")
        state["step"] = stage
    elif mode == HELD and state.get("clearing"):
        if not faults:
            state.update(clearing=False, reason="", rungs=[], service=[], held_by=[], faults=[])
            go(IN, "the condition cleared by itself")
        elif not _self_clearing([f.as_dict() for f in faults]):
            # Another fault while out: judged as any other (the ladder, or held).
            _remember(state, faults)
            state.update(clearing=False, reason=_clean_reason(findings))
            climb("a fault no restart clears, while out for one that clears by itself")
    elif mode == DRAINING and state.get("blind"):
        if blind:
            pass  # still cannot look: stay drained, nothing else to decide
        elif not faults:
            state.update(blind=False, reason="")
            go(IN, "a driver reboot is pending: the engine serves on the libraries it loaded"
               if any(f.code == REBOOT_PENDING for f in findings)
               else "the watch can look again and finds nothing wrong")
        else:
            # It can look again and sees a fault: judged from here as any other fault.
            _remember(state, faults)
            state.update(blind=False, reason=_clean_reason(findings), restartable=(
                policy.restart and not recent and state["rungs"][:1] == [remedies.RESTART]))
            transitions.append(f"{DRAINING} -> {DRAINING}: {state['reason']}")
    elif mode == IN and faults and floor_refused:
        state["floor"] = clip(f"{floor_refused}; its fault: {_clean_reason(findings)}")
        transitions.append(f"{IN} -> {IN}: kept in: {state['floor']}")
    elif mode == IN and faults:
        state["reason"] = _clean_reason(findings)
        state["blind"] = blind
        if not blind:
            _remember(state, faults)
        state["restartable"] = not blind and (
            policy.restart and not recent and state["rungs"][:1] == [remedies.RESTART]
            and not state.get("held_by") and not state.get("service"))
        go(DRAINING, state["reason"])
    elif mode == DRAINING:
        if state["restartable"]:
            restart = True
            state["restarts"] = [*recent, now]
            go(RESTARTED, f"engine restarted after: {state['reason']}")
        else:
            # The gateway's stats page shows why it is held, then what the fault was.
            climb("a second fault within the flap window" if recent
                  else "a restart cannot clear it")
    elif mode == RESTARTED:
        if probe_unreachable:
            if now - float(state["since"]) >= policy.restart_grace_s:
                grace = f"{policy.restart_grace_s:.0f} s"
                state["reason"] = f"the engine did not answer within {grace} of its restart"
                go(HELD, state["reason"])
        elif faults:
            _remember(state, faults)
            state["reason"] = _clean_reason(findings)
            climb("faulty again after the restart")
        else:
            go(IN, "clean after the restart")
    return Action(state, _repair_answer(state) or _answer(mode, state["reason"]), restart,
                  transitions, order, report)


def release(saved: dict[str, Any] | None, now: float) -> Action:
    """An operator's `--release`: the node goes back in (the next look judges it afresh)."""
    state = {**initial_state(), **(saved or {})}
    was = state["mode"]
    state.update(mode=IN, since=now, reason="", restartable=False, blind=False, clearing=False,
                 rungs=[], service=[], faults=[], order=None)
    if was == IN:
        return Action(state, "up", False, [])
    return Action(state, "up", False, [f"{was} -> {IN}: released by an operator"])


def request_repair(saved: dict[str, Any] | None, now: float, policy: Policy) -> Action:
    """An operator's `onecat repair`: the ladder from the reset, whatever the node's mode
    (a node already repairing keeps its order)."""
    state = {**initial_state(), **(saved or {})}
    was = state["mode"] if state["mode"] in MODES else IN
    if was == REPAIRING:
        return Action(state, _repair_answer(state) or _answer(REPAIRING, state["reason"]),
                      False, ["already repairing: the order stands"])
    rungs = ["reset", *(["reboot"] if policy.reboot else [])]
    order = {"id": f"{now:.0f}", "rungs": rungs, "reason": "requested by an operator",
             "faults": []}
    state.update(mode=REPAIRING, since=now, reason=order["reason"], order=order["id"],
                 rungs=rungs, service=[], faults=[], blind=False, step="ordered",
                 by_operator=was == IN)
    # A node that was in stays in until its lease (_repair_answer); one already out stays out.
    return Action(state, _repair_answer(state) or _answer(REPAIRING, state["reason"]), False,
                  [f"{was} -> {REPAIRING}: requested by an operator"
                   + (", in rotation until its repair lease" if state["by_operator"] else "")],
                  order)


def restart_failed(action: Action, failure: str, now: float,
                   what: str = "the engine restart failed") -> Action:
    """The engine restart (or the repair runner's start) `step` asked for did not happen:
    hold the node out."""
    was = action.state.get("mode", RESTARTED)
    state = {**action.state, "mode": HELD, "since": now}
    state["reason"] = clip(f"{what}: {failure}")
    transitions = [*action.transitions, f"{was} -> {HELD}: {state['reason']}"]
    return Action(state, _answer(HELD, state["reason"]), False, transitions)
