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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onecat.health.judge import ERROR

from .deltas import Finding

IN, DRAINING, RESTARTED, HELD = "in", "draining", "restarted", "held"
MODES = (IN, DRAINING, RESTARTED, HELD)
# Events an engine restart can clear: a channel the driver reset (a fatal Xid), answers that
# went bad (the seed's pitfall 5.5). A condition (a state the health judge reports on every
# look) is never restartable: the GPU's state outlives the engine.
RESTARTABLE = frozenset(("xid", "quality"))
# The look itself could not complete (NVML failed, an exception): the watch is blind. It
# fails closed: the node drains and stays drained while the watch cannot look, and comes
# back by itself once a complete look finds nothing (no restart, no hold for blindness alone).
CANNOT_LOOK = "cannot_look"


@dataclass(frozen=True)
class Policy:
    """The watch's action settings (the role's watch_* variables)."""

    # Restart the engine after a fault it can clear; false holds the node out at once.
    restart: bool = True
    # A second fault within this many seconds of a restart holds the node out.
    flap_window_s: float = 3600.0
    # How long a restarted engine may take to answer again before the node is held out.
    restart_grace_s: float = 900.0


@dataclass
class Action:
    """What one step decided: the agent's answer, an engine restart, a log line."""

    state: dict[str, Any]
    answer: str
    restart_engine: bool = False
    transitions: list[str] = field(default_factory=list)


def initial_state() -> dict[str, Any]:
    return {"mode": IN, "since": None, "reason": "", "restartable": False, "restarts": [],
            "blind": False}


def _clean_reason(findings: list[Finding]) -> str:
    worst = [f for f in findings if f.severity == ERROR] or findings
    text = "; ".join(f.message for f in worst[:3])
    return "".join(ch if " " <= ch <= "~" else " " for ch in text)[:180]


def _answer(mode: str, reason: str, readmitted: bool) -> str:
    """The agent check's reply line (HAProxy: `ready` cancels a drain or maint it set)."""
    if mode == IN:
        return "ready up" if readmitted else "up"
    if mode == DRAINING:
        return f"drain #onecat-watch: {reason}"
    return f"maint down #onecat-watch {mode}: {reason}"


def step(
    saved: dict[str, Any] | None,
    findings: list[Finding],
    now: float,
    policy: Policy | None = None,
    probe_unreachable: bool = False,
) -> Action:
    """One look's decision.

    `probe_unreachable`: the quality probe could not reach the server at all (an engine
    still loading after a restart): not back yet. A server that does not answer is the
    gateway's own health check's business (look.py makes it a warning), not a fault here."""
    policy = policy or Policy()
    state = {**initial_state(), **(saved or {})}
    if state["mode"] not in MODES:
        state = initial_state()
    recent = [t for t in state["restarts"] if now - float(t) < policy.flap_window_s]
    state["restarts"] = recent
    faults = [f for f in findings if f.severity == ERROR]
    mode, transitions, restart, readmitted = state["mode"], [], False, False

    def go(new_mode: str, why: str) -> None:
        nonlocal mode
        transitions.append(f"{mode} -> {new_mode}: {why}")
        mode = new_mode
        state.update(mode=new_mode, since=now)

    blind = bool(faults) and all(f.code == CANNOT_LOOK for f in faults)
    if mode == DRAINING and state.get("blind"):
        if blind:
            pass  # still cannot look: stay drained, nothing else to decide
        elif not faults:
            state.update(blind=False, reason="")
            readmitted = True
            go(IN, "the watch can look again and finds nothing wrong")
        else:
            # It can look again and sees a fault: judged from here as any other fault.
            state.update(blind=False, reason=_clean_reason(findings), restartable=(
                policy.restart and not recent and all(f.code in RESTARTABLE for f in faults)))
            transitions.append(f"{DRAINING} -> {DRAINING}: {state['reason']}")
    elif mode == IN and faults:
        state["reason"] = _clean_reason(findings)
        state["blind"] = blind
        state["restartable"] = not blind and (
            policy.restart and not recent and all(f.code in RESTARTABLE for f in faults)
        )
        go(DRAINING, state["reason"])
    elif mode == DRAINING:
        if state["restartable"]:
            restart = True
            state["restarts"] = [*recent, now]
            go(RESTARTED, f"engine restarted after: {state['reason']}")
        else:
            why = "a second fault within the flap window" if recent else "a restart cannot clear it"
            # The gateway's stats page shows why it is held, then what the fault was.
            state["reason"] = f"{why}: {state['reason']}"[:180]
            go(HELD, state["reason"])
    elif mode == RESTARTED:
        if probe_unreachable:
            if now - float(state["since"]) >= policy.restart_grace_s:
                grace = f"{policy.restart_grace_s:.0f} s"
                state["reason"] = f"the engine did not answer within {grace} of its restart"
                go(HELD, state["reason"])
        elif faults:
            state["reason"] = f"faulty again after the restart: {_clean_reason(findings)}"
            go(HELD, state["reason"])
        else:
            readmitted = True
            go(IN, "clean after the restart")
    return Action(state, _answer(mode, state["reason"], readmitted), restart, transitions)


def release(saved: dict[str, Any] | None, now: float) -> Action:
    """An operator's `--release`: the node goes back in (the next look judges it afresh)."""
    state = {**initial_state(), **(saved or {})}
    was = state["mode"]
    state.update(mode=IN, since=now, reason="", restartable=False, blind=False)
    if was == IN:
        return Action(state, "up", False, [])
    return Action(state, "ready up", False, [f"{was} -> {IN}: released by an operator"])


def restart_failed(action: Action, failure: str, now: float) -> Action:
    """The engine restart `step` asked for did not happen: hold the node out."""
    state = {**action.state, "mode": HELD, "since": now}
    state["reason"] = "".join(
        ch if " " <= ch <= "~" else " " for ch in f"the engine restart failed: {failure}"
    )[:180]
    transitions = [*action.transitions, f"{RESTARTED} -> {HELD}: {state['reason']}"]
    return Action(state, _answer(HELD, state["reason"], False), False, transitions)
