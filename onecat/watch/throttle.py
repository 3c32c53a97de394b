"""Sustained hardware slowdown: the one throttling rule that fails a node.

One sample of a slowdown is a warning (the health judge's `throttle` check, on every look):
NVML's HW_SLOWDOWN bit (0x8) is set for heat and for the power brake alike, and "may be also
reported during PState or clock change" (nvml.h, nvmlClocksEventReasons); DCGM rates thermal
and power violations as warnings. A node fails only when the slowdown is sustained, by
gpud's rule (leptonai/gpud at 039ee750, components/accelerator/nvidia/hw-slowdown/
component.go: DefaultStateHWSlowdownEvaluationWindow = 10 minutes and
DefaultStateHWSlowdownEventsThresholdFrequencyPerMinute = 0.6; it counts the distinct minutes
with a slowdown event in the window): at 0.6 per minute or more (6 of the last 10 minutes) it
is unhealthy.
The cause is told apart (nvml.h): HW_POWER_BRAKE_SLOWDOWN (0x80) is the system's power supply
asserting the brake, HW_THERMAL_SLOWDOWN (0x40) is heat; HW_SLOWDOWN alone names neither.

The watch looks once an interval (60 s by default), so a minute is one look; the history
lives in the watch's state folder (`throttle-history.json`) with a count per cause for the
metrics (`onecat_gpu_slowdown_looks_total`).

A slowdown clears by itself (the room cools, the supply recovers), so a node it failed comes
back by itself (issue 46; act.py readmits it): once sustained, a cause stays failed until
QUIET_S passed without a single slowdown minute of it. Half of gpud's window: long enough that
a node whose cooling flaps is not readmitted between two hot spells (a new failure needs six
hot minutes again, so it flaps at most once every ~11 minutes), short enough that a cooled node
is back within minutes, without an operator.
"""

from __future__ import annotations

import math
from typing import Any

from onecat.health.judge import ERROR

from .deltas import Finding, gpu_key, is_lost

# gpud's rule (see above): minutes with a slowdown per minute of the window.
WINDOW_S = 600.0
EVENTS_PER_MINUTE = 0.6
# Once sustained, a cause holds until this long passed without a slowdown minute of it.
QUIET_S = 300.0
# The causes, most specific first: (NVML reason name, cause, what to check).
CAUSES = (
    ("hw_power_brake_slowdown", "power_brake",
     "the power brake (the system's power supply asserts it): check the PSU and the GPU's "
     "power cables"),
    ("hw_thermal_slowdown", "thermal", "heat: check the airflow, fans and inlet temperature"),
    ("hw_slowdown", "hw_slowdown",
     "hardware slowdown with no thermal or power-brake bit: check cooling and power"),
)
CAUSE_NAMES = tuple(cause for _, cause, _ in CAUSES)


def cause(reasons: list[str] | None) -> str | None:
    """The slowdown's cause from a GPU's active clock-event reasons, or None."""
    active = set(reasons or [])
    return next((name for reason, name, _ in CAUSES if reason in active), None)


def _minute(now: float) -> int:
    return math.floor(now / 60)


def record(history: dict[str, Any] | None, readings: dict[str, Any],
           now: float) -> dict[str, Any]:
    """The history with this look added: per GPU and cause, the minutes with a slowdown in
    the window, how many looks saw it (a counter, never pruned), and the causes sustained now
    (the minute each became so), kept until QUIET_S without a slowdown minute of them."""
    history = history if isinstance(history, dict) else {}
    minutes = history.get("minutes") if isinstance(history.get("minutes"), dict) else {}
    counts = history.get("looks") if isinstance(history.get("looks"), dict) else {}
    before = history.get("sustained") if isinstance(history.get("sustained"), dict) else {}
    oldest = _minute(now - WINDOW_S)
    kept: dict[str, dict[str, list[int]]] = {}
    for key, by_cause in minutes.items():
        if not isinstance(by_cause, dict):
            continue
        for name, seen in by_cause.items():
            recent = sorted({m for m in seen if isinstance(m, int) and oldest < m <= _minute(now)}
                            ) if isinstance(seen, list) else []
            if recent:
                kept.setdefault(str(key), {})[str(name)] = recent
    for gpu in readings.get("gpus") or []:
        if is_lost(gpu):
            continue
        name = cause(gpu.get("throttle_reasons"))
        if name is None:
            continue
        key = gpu_key(gpu)
        seen = kept.setdefault(key, {}).setdefault(name, [])
        if _minute(now) not in seen:
            seen.append(_minute(now))
        by_gpu = counts.setdefault(key, {})
        by_gpu[name] = int(by_gpu.get(name) or 0) + 1
    return {"minutes": kept, "looks": counts, "sustained": _sustained(kept, before, now)}


def _sustained(kept: dict[str, dict[str, list[int]]], before: dict[str, Any],
               now: float) -> dict[str, dict[str, int]]:
    """Per GPU and cause, the minute it became sustained: at gpud's rate now, or sustained
    before and not yet quiet for QUIET_S. Minutes without a look count as quiet (as for the
    rate): a stretch that passed unwatched is not brought back by one slowdown minute now."""
    quiet = round(QUIET_S / 60)
    current = _minute(now)
    out: dict[str, dict[str, int]] = {}
    for key, by_cause in kept.items():
        earlier = before.get(key) if isinstance(before.get(key), dict) else {}
        for name, seen in by_cause.items():
            was = earlier.get(name)
            was = was if isinstance(was, int) and not isinstance(was, bool) else None
            previous = max((m for m in seen if m < current), default=None)
            last = current if current in seen else previous
            held = (was is not None and previous is not None and current - previous <= quiet
                    and last is not None and current - last < quiet)
            if len(seen) / (WINDOW_S / 60) >= EVENTS_PER_MINUTE:
                out.setdefault(key, {})[name] = current if was is None else was
            elif held and was is not None:
                out.setdefault(key, {})[name] = was
    return out


def findings(history: dict[str, Any], readings: dict[str, Any], now: float) -> list[Finding]:
    """An error per GPU and cause whose slowdown is sustained by gpud's rule, or was and has
    not been quiet for QUIET_S yet (record keeps which)."""
    out = []
    window_minutes = WINDOW_S / 60
    oldest = _minute(now - WINDOW_S)
    sustained = history.get("sustained") if isinstance(history.get("sustained"), dict) else {}
    for gpu in readings.get("gpus") or []:
        by_cause = (history.get("minutes") or {}).get(gpu_key(gpu)) or {}
        held = sustained.get(gpu_key(gpu)) if isinstance(sustained.get(gpu_key(gpu)), dict) \
            else {}
        for _, name, advice in CAUSES:
            minutes = [m for m in by_cause.get(name) or [] if oldest < m <= _minute(now)]
            rate = len(minutes) / window_minutes
            at = f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id') or gpu_key(gpu)})"
            cut = (f"{at}: clocks cut by {name.replace('_', ' ')} in {len(minutes)} of the last "
                   f"{window_minutes:.0f} minutes")
            if rate >= EVENTS_PER_MINUTE:
                out.append(Finding(
                    ERROR, "throttle_sustained", at,
                    f"{cut} ({rate:.1f}/min, limit {EVENTS_PER_MINUTE}/min, gpud's rule): "
                    f"{advice}"))
            elif name in held and minutes:
                ago = _minute(now) - max(minutes)
                out.append(Finding(
                    ERROR, "throttle_sustained", at,
                    f"{cut}, the last {ago} minute(s) ago: out until {QUIET_S / 60:.0f} minutes "
                    f"pass without it: {advice}"))
    return out
