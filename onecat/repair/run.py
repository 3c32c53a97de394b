"""The ladder on one node: what onecat-repair.service does with the watch's repair order.

    lease -> stop the engine -> reset its GPUs -> judge them -> start -> gate -> burn in -> readmit
                                  | the reset fails, or the fault stays
                                  v
                                reboot (opt-in) -> (after the boot) judge -> start -> gate -> ...

Each step is written to the progress file before it is taken (the watch reads it, `onecat
status` shows it, the journal keeps a line per step), so the runner resumes where it was after
a crash or the reboot it asked for. The node is out of rotation from its lease on (the runner
drains it, then the watch answers `maint` while it repairs; a node an operator ordered stays in
until its lease is granted); only the watch readmits it, on the runner's "readmitted".

Every side effect goes through `Host` (run's __main__ gives the real one: systemctl,
nvidia-smi, NVML, the lease server, the burn-in), so the ladder's order is tested on its own.

The ladder blames a card only for what the card did (issue 47): a reset refused by the card's
environment (a monitor that opened the device meanwhile: NVSentinel #1690, #1243, microsoft/lisa
#4716, "In use by another client") is tried again after a backoff; after a boot the runner waits
for the driver (its module, nvidia-persistenced) before it judges, and a driver that never
comes (a kernel that unattended-upgrades installed without its module) ends the repair as
failed, the card's history untouched, never as "service required".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from onecat.health.judge import ERROR

from . import history
from .remedies import REBOOT, RESET

# A look that could not read NVML because the driver is not there (not loaded, its library
# missing, a userspace newer than the module): the node's, never the card's.
DRIVER_UNAVAILABLE = "driver_unavailable"
# Tries of a reset the GPUs' environment refused, and the waits between them. Only a refusal
# for a device in use is tried again (nvidia-smi: "In use by another client", "... because
# it's being used by some other process"; the runner adds "held by" with the holders): a lost
# GPU ("GPU is lost. Reboot the system to recover this GPU") does not come back by waiting.
RESET_BACKOFF_S = (15.0, 60.0)
IN_USE = re.compile(r"in use|being used|held by|busy", re.IGNORECASE)
# How long the runner waits after a boot for the driver to read the GPUs (DKMS may build the
# module for a new kernel first: minutes).
DRIVER_WAIT_S = 600.0

# The steps, in the order the progress file names them.
LEASE, DRAINING, STOPPING, RESETTING, JUDGING, STARTING, GATING, BURNING_IN = (
    "waiting for the lease", "waiting for requests in flight", "stopping the engine",
    "resetting", "judging", "starting", "gating", "burning in")
REBOOTING = "rebooting"
READMITTED, SERVICE_REQUIRED, FAILED = "readmitted", "service_required", "failed"
TERMINAL = (READMITTED, SERVICE_REQUIRED, FAILED)


class Host(Protocol):
    """The node as the ladder uses it; every method reports, none raises."""

    def take_lease(self, reason: str) -> tuple[bool, str]: ...
    def release_lease(self) -> None: ...
    def take_out(self, reason: str) -> None: ...
    def wait_idle(self) -> str | None: ...
    def stop_engine(self) -> str | None: ...
    def start_engine(self) -> str | None: ...
    def reset_gpus(self, indices: list[int]) -> tuple[bool, str]: ...
    def look(self) -> tuple[dict[str, Any], list[dict[str, Any]]]: ...
    def gate(self) -> tuple[bool, str]: ...
    def burn_in(self) -> tuple[bool, str, list[dict[str, Any]]]: ...
    def reboot(self) -> str | None: ...
    def admit(self) -> None: ...
    def boot_id(self) -> str | None: ...
    def wait_driver(self, timeout_s: float) -> str | None: ...


@dataclass
class Ladder:
    """One run of the ladder: the order, the progress, and how to save and say it."""

    host: Host
    progress: dict[str, Any]
    save: Callable[[dict[str, Any]], None]
    say: Callable[[str], None]
    node: str = ""
    lease_poll_s: float = 30.0
    lease_wait_s: float = 86400.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    history: dict[str, Any] = field(default_factory=history.empty)
    save_history: Callable[[dict[str, Any]], None] = lambda _history: None
    report: Callable[[dict[str, Any]], None] = lambda _report: None
    # The last look's readings (the cards' names after the repair).
    last_readings: dict[str, Any] | None = None
    reset_backoff_s: tuple[float, ...] = RESET_BACKOFF_S
    driver_wait_s: float = DRIVER_WAIT_S

    def _at(self, step: str, detail: str = "") -> None:
        now = self.clock()
        self.progress.update(step=step, since=now)
        # Every step with its time: the benchmark's fault-to-readmission breakdown.
        self.progress.setdefault("steps", []).append(
            {"step": step, "at": now, **({"detail": detail[:300]} if detail else {})})
        if detail:
            self.progress["detail"] = detail
        self.save(self.progress)
        self.say(f"repair: {step}" + (f": {detail}" if detail else ""))
        if self.progress.get("leased") and step not in TERMINAL:
            # Renewed at every step: a crashed runner's lease expires; a working one's not.
            granted, why = self.host.take_lease(str(self.progress.get("fault") or "repair"))
            if not granted:
                self.say(f"repair: the lease was not renewed: {why}")

    def _tried(self, rung: str, outcome: str) -> None:
        self.progress.setdefault("tried", []).append(
            {"rung": rung, "at": self.clock(), "outcome": outcome[:300]})
        self.save(self.progress)

    def _end(self, step: str, reason: str, readings: dict[str, Any] | None = None) -> str:
        """The last step: history, report, lease back."""
        now = self.clock()
        # A card lost at the order has its serial again once a reset or a boot brought it back.
        cards = history.fill_ids(self.progress.get("cards") or [], readings, self.last_readings)
        self.progress["cards"] = cards
        tried = self.progress.get("tried") or []
        self.progress["reason"] = reason
        outcome = {READMITTED: history.READMITTED, SERVICE_REQUIRED: history.SERVICE_REQUIRED
                   }.get(step, history.FAILED)
        self.history = history.record(self.history, at=now, cards=cards,
                                      fault=str(self.progress.get("fault") or ""), tried=tried,
                                      outcome=outcome)
        self.save_history(self.history)
        if step == SERVICE_REQUIRED:
            document = history.report(node=self.node, now=now, reason=reason, cards=cards,
                                      readings=readings or {}, earlier=None, tried=tried)
            self.progress["reason"] = document["summary"]
            self.report(document)
        if step == READMITTED:
            self.host.admit()
        self.host.release_lease()
        self._at(step, self.progress["reason"])
        return step

    def _lease(self) -> bool:
        """Wait for the fleet's repair lease (the node stays out meanwhile)."""
        deadline = self.clock() + self.lease_wait_s
        while True:
            granted, why = self.host.take_lease(str(self.progress.get("fault") or "repair"))
            if granted:
                self.progress["leased"] = True
                return True
            self._at(LEASE, why)
            if self.clock() >= deadline:
                return False
            self.sleep(self.lease_poll_s)

    def _faults(self, findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [f for f in findings if f.get("severity") == ERROR]

    def _after_clearing(self, rung: str) -> str:
        """Judge, start, gate, burn in: the rest of the ladder after a reset or a boot."""
        self._at(JUDGING, f"after the {rung}")
        readings, findings = self.host.look()
        self.last_readings = readings
        faults = self._faults(findings)
        if faults and all(f.get("code") == DRIVER_UNAVAILABLE for f in faults):
            why = "; ".join(str(f.get("message")) for f in faults[:1])
            self._tried(rung, f"the driver is not there: {why}")
            return self._end(FAILED, f"the driver is not there after the {rung}: {why}: the "
                                     "node's, not the card's (no service asked)")
        if faults:
            why = "; ".join(str(f.get("message")) for f in faults[:3])
            self._tried(rung, f"did not clear it: {why}")
            return self._next(rung, f"the {rung} did not clear it: {why}", readings)
        self._tried(rung, "cleared")
        self._at(STARTING)
        failure = self.host.start_engine()
        if failure:
            return self._end(FAILED, f"the engine did not start after the {rung}: {failure}")
        self._at(GATING)
        passed, why = self.host.gate()
        if not passed:
            return self._end(FAILED, f"the gate failed after the {rung}: {why}")
        self._at(BURNING_IN)
        passed, why, card_faults = self.host.burn_in()
        if not passed:
            if card_faults:
                # The seed's test: the card ran a while and its errors came back.
                return self._end(SERVICE_REQUIRED, f"the fault returned under load after the "
                                                   f"{rung}: {why}", self.host.look()[0])
            return self._end(FAILED, f"the burn-in failed after the {rung}: {why}")
        return self._end(READMITTED, f"{rung}, gate and burn-in passed")

    def _next(self, after: str, why: str, readings: dict[str, Any]) -> str:
        """The rung after `after`, or the ladder's end."""
        rungs = list(self.progress.get("rungs") or [])
        later = rungs[rungs.index(after) + 1:] if after in rungs else []
        if REBOOT in later:
            return self._reboot(why)
        if after == REBOOT:
            # A reset and a reboot could not clear it: the card is done.
            return self._end(SERVICE_REQUIRED, f"{why} (every rung tried)", readings)
        return self._end(FAILED, f"{why}; a reboot may clear it (onecat_repair_reboot is off)")

    def _reboot(self, why: str) -> str:
        self.progress["rung"] = REBOOT
        self.progress["boot_before"] = self.host.boot_id()
        self._at(REBOOTING, why)
        failure = self.host.reboot()
        if failure:
            return self._end(FAILED, f"the reboot failed: {failure}")
        return REBOOTING

    def run(self) -> str:
        """Climb from where the progress file says; returns the step it stopped at."""
        step = self.progress.get("step")
        if step in TERMINAL:
            return str(step)
        if step == REBOOTING:
            if self.host.boot_id() == self.progress.get("boot_before"):
                # Asked for, not happened yet (systemd is stopping us): nothing to do.
                return REBOOTING
            self._tried(REBOOT, "the node booted")
            if not self._lease():
                return self._end(FAILED, "no repair lease after the reboot")
            self._at(JUDGING, "waiting for the driver after the boot")
            missing = self.host.wait_driver(self.driver_wait_s)
            if missing:
                return self._end(FAILED, (
                    f"the driver did not come back within {self.driver_wait_s:.0f} s of the "
                    f"boot: {missing}: the node's, not the card's (a kernel without its module? "
                    "`dkms status`); no service asked"))
            return self._after_clearing(REBOOT)
        rungs = list(self.progress.get("rungs") or [])
        if not rungs:
            return self._end(FAILED, "the order names no rung")
        if not self._lease():
            return self._end(FAILED, "no repair lease within the wait")
        # The gateway sends the node nothing new; the streams it still runs finish first. A
        # node the watch took out is out already; one an operator ordered was kept in until now.
        self.host.take_out(f"repairing: {self.progress.get('fault') or 'ordered'}")
        self._at(DRAINING)
        late = self.host.wait_idle()
        if late:
            self.say(f"repair: {late}")
        if rungs[0] == REBOOT:
            self._at(STOPPING)
            self.host.stop_engine()
            return self._reboot("only a reboot clears it")
        self._at(STOPPING)
        failure = self.host.stop_engine()
        if failure:
            return self._end(FAILED, f"the engine did not stop: {failure}")
        indices = sorted({int(c["index"]) for c in self.progress.get("reset_cards") or []
                          if isinstance(c, dict) and isinstance(c.get("index"), int)})
        self.progress["rung"] = RESET
        self._at(RESETTING, "GPU " + ", ".join(str(i) for i in indices))
        done, output = self.host.reset_gpus(indices)
        for wait in self.reset_backoff_s:
            if done or not IN_USE.search(output):
                break
            # Refused by the GPUs' environment as often as by the card: once more, later.
            self._tried(RESET, f"refused: {output}; again in {wait:.0f} s")
            self._at(RESETTING, f"again in {wait:.0f} s after: {output}")
            self.sleep(wait)
            done, output = self.host.reset_gpus(indices)
        if not done:
            self._tried(RESET, f"failed: {output}")
            return self._next(RESET, f"the reset failed: {output}", self.host.look()[0])
        return self._after_clearing(RESET)


def new_progress(order: dict[str, Any], readings: dict[str, Any], now: float) -> dict[str, Any]:
    """The progress file of a new order: its rungs, its fault, the cards it is about (every
    GPU the engine uses when the fault names none: a TP pair is reset together)."""
    faults = [f for f in order.get("faults") or [] if isinstance(f, dict)]
    # The watch names the cards (with what its previous look read of a GPU lost now).
    named = [c for c in order.get("cards") or [] if isinstance(c, dict)]
    # An order whose faults name no card (bad answers) names none (the watch sends "cards": []);
    # one from an older watch, or an operator's, is about every GPU the fault points at.
    cards = history.fill_ids(named if "cards" in order and faults else
                             named or history.cards_of(faults, readings), readings)
    engine = [history.card(g) for g in readings.get("gpus") or [] if isinstance(g, dict)]
    rungs = [r for r in order.get("rungs") or [] if r in (RESET, REBOOT)]
    return {"order": order.get("id"), "step": "ordered", "rungs": rungs,
            "fault": str(order.get("reason") or ""), "faults": faults, "cards": cards,
            # The reset takes every GPU the engine holds (both of a TP pair).
            "reset_cards": engine or cards, "started": now, "since": now, "tried": [],
            # When the watch first saw the fault (it drained the node then).
            "fault_seen": order.get("fault_seen")}
