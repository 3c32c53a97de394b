"""What each card went through: the repairs the ladder made, by card serial, and the report a
card gets when its fault returns within the recurrence window ("service required").

The seed (section 2.1): reset the card, run it a while, check whether uncorrectable errors
return; if they return, the card is not fit for quantized inference. A swapped card has
another serial, so its history starts empty; `--release` forgets a card's history too.
Pure: the files are read and written by run.py and the watch.
"""

from __future__ import annotations

import re
import time
from typing import Any

from onecat.health.nvml import bus_key

# The outcomes a repair ends in (node_exporter counts them: onecat_repairs_total{outcome}).
READMITTED, SERVICE_REQUIRED, FAILED = "readmitted", "service_required", "failed"
OUTCOMES = (READMITTED, SERVICE_REQUIRED, FAILED)
# How many repairs a node keeps (its cards' history is short; a bad card ends in service).
KEEP = 50
# The faults that count as a repaired card's fault coming back (issue 47): uncorrectable ones a
# card makes, found on a named card. Not bad answers (the engine's, no card's), not a page
# pending retirement (an ageing V100 retires single-bit pages routinely, and DCGM fails a card
# only at its page budget: the health judge's retired_pages, service at once), not heat.
RECURS = frozenset({"ecc_volatile_uncorrected", "ecc_uncorrected", "pages_retired_double_bit",
                    "gpu_lost", "xid", "remapped_rows"})


def recurring(faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The faults (as_dict) that count as a recurrence: RECURS codes on a named card."""
    return [f for f in faults if f.get("code") in RECURS and f.get("gpu")]


def empty() -> dict[str, Any]:
    return {"repairs": [], "counts": {outcome: 0 for outcome in OUTCOMES}}


def load(document: Any) -> dict[str, Any]:
    """A history read from disk, any shape (a garbled file is an empty history)."""
    history = empty()
    if not isinstance(document, dict):
        return history
    repairs = document.get("repairs")
    if isinstance(repairs, list):
        history["repairs"] = [r for r in repairs if isinstance(r, dict)][-KEEP:]
    counts = document.get("counts")
    if isinstance(counts, dict):
        for outcome in OUTCOMES:
            value = counts.get(outcome)
            if isinstance(value, int) and value >= 0:
                history["counts"][outcome] = value
    return history


def _bus(label: Any) -> tuple[int, int, int] | None:
    """The bus of a finding's GPU label ("GPU 1 (00000000:5E:00.0)", "PCI:0000:5e:00")."""
    if not isinstance(label, str) or not label:
        return None
    inner = label[label.find("(") + 1:label.rfind(")")] if "(" in label else label
    return bus_key(inner.removeprefix("PCI:"))


def card(gpu: dict[str, Any]) -> dict[str, Any]:
    """What names a card in a report and a ticket."""
    return {key: gpu.get(key) for key in ("index", "serial", "uuid", "pci_bus_id", "name")}


_INDEX = re.compile(r"GPU (\d+)\b")


def cards_of(faults: list[dict[str, Any]], readings: dict[str, Any]) -> list[dict[str, Any]]:
    """The cards a look's error findings (as_dict) point at, by bus id, else by the index in
    their label (a lost GPU's bus is unknown: "GPU 1 (bus unknown, ...)"); every GPU of the
    node when one points at none (bad answers come from the engine, which uses all of them)."""
    gpus = [g for g in readings.get("gpus") or [] if isinstance(g, dict)]
    by_bus = {_bus(gpu.get("pci_bus_id")): gpu for gpu in gpus}
    by_bus.pop(None, None)
    by_index = {gpu.get("index"): gpu for gpu in gpus}
    chosen: list[dict[str, Any]] = []
    for fault in faults:
        label = fault.get("gpu")
        bus = _bus(label)
        gpu = by_bus.get(bus) if bus is not None else None
        if gpu is None and isinstance(label, str) and (found := _INDEX.match(label)):
            gpu = by_index.get(int(found.group(1)))
        if gpu is None:
            return [card(g) for g in gpus]
        if card(gpu) not in chosen:
            chosen.append(card(gpu))
    return chosen or [card(g) for g in gpus]


def fill_ids(cards: list[dict[str, Any]], *readings: dict[str, Any] | None
             ) -> list[dict[str, Any]]:
    """The cards with what NVML could not read now (a lost GPU has no serial) taken from other
    readings of the same index (the watch's previous look, the look after the repair)."""
    filled = []
    for item in cards:
        item = dict(item)
        for other in readings:
            if all(item.get(k) for k in ("serial", "uuid", "pci_bus_id")):
                break
            same = next((g for g in (other or {}).get("gpus") or []
                         if isinstance(g, dict) and g.get("index") == item.get("index")), None)
            for key, value in card(same or {}).items():
                if value and not item.get(key):
                    item[key] = value
        filled.append(item)
    return filled


def _ids(cards: list[dict[str, Any]]) -> set[str]:
    return {str(c.get(k)) for c in cards for k in ("serial", "uuid") if c.get(k)}


def recurred(history: dict[str, Any], cards: list[dict[str, Any]], now: float,
             window_s: float) -> dict[str, Any] | None:
    """The repair of one of these cards that readmitted the node within the window (the
    fault came back: service required), or None."""
    ids = _ids(cards)
    for repair in reversed(history.get("repairs") or []):
        try:
            at = float(repair.get("at"))
        except (TypeError, ValueError):
            continue
        if repair.get("outcome") != READMITTED or now - at > window_s:
            continue
        if ids & _ids([c for c in repair.get("cards") or [] if isinstance(c, dict)]):
            return repair
    return None


def record(history: dict[str, Any], *, at: float, cards: list[dict[str, Any]], fault: str,
           tried: list[dict[str, Any]], outcome: str) -> dict[str, Any]:
    """The history with one more repair (and its outcome counted)."""
    history = load(history)
    history["repairs"] = [*history["repairs"], {
        "at": at, "cards": cards, "fault": fault, "tried": tried, "outcome": outcome,
        "rung": tried[-1]["rung"] if tried else None}][-KEEP:]
    history["counts"][outcome] = history["counts"].get(outcome, 0) + 1
    return history


def forget(history: dict[str, Any], serials: set[str] | None = None) -> dict[str, Any]:
    """The history without these cards' repairs (all repairs when None): after a card swap,
    or an operator's release. The counters stay (they count what happened)."""
    history = load(history)
    history["repairs"] = [] if serials is None else [
        r for r in history["repairs"]
        if not _ids([c for c in r.get("cards") or [] if isinstance(c, dict)]) & serials]
    return history


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def report(*, node: str, now: float, reason: str, cards: list[dict[str, Any]],
           readings: dict[str, Any], earlier: dict[str, Any] | None,
           tried: list[dict[str, Any]]) -> dict[str, Any]:
    """The service-required report: what a replacement ticket needs (the card's serial and
    bus id, its counters, its Xid history, what was tried and when)."""
    buses = {_bus(c.get("pci_bus_id")) for c in cards}
    gpus = {_bus(g.get("pci_bus_id")): g for g in readings.get("gpus") or []
            if isinstance(g, dict)}
    detail = []
    for item in cards:
        gpu = gpus.get(_bus(item.get("pci_bus_id"))) or {}
        detail.append({**item, "ecc": gpu.get("ecc"), "retired_pages": gpu.get("retired_pages"),
                       "remapped_rows": gpu.get("remapped_rows")})
    xids = [e for e in readings.get("xid_events") or []
            if isinstance(e, dict) and _bus(e.get("pci_bus_id")) in buses]
    steps = [*((earlier or {}).get("tried") or []), *tried]
    names = ", ".join(f"GPU {c.get('index')} serial {c.get('serial') or '?'} "
                      f"({c.get('pci_bus_id') or '?'})" for c in cards)
    return {"node": node, "at": _stamp(now), "status": "service required", "cards": detail,
            "reason": reason, "xid_events": xids, "tried": steps,
            "earlier_repair": None if earlier is None else {
                "at": _stamp(float(earlier["at"])), "fault": earlier.get("fault"),
                "rung": earlier.get("rung")},
            "summary": f"service required: {names}: {reason}",
            "action": "replace the card(s) named here, then `onecat repair -i INVENTORY --limit "
                      f"{node} --release` to put the node back through gate and burn-in"}
