"""Which rung of the repair ladder can clear which fault: the table of docs/repair.md.

The rungs, lowest first: restart the engine (the watch does it in place), reset the GPUs the
engine uses (`nvidia-smi -r`, with the engine stopped: a reset is refused while a process holds
a GPU), reboot the node (opt-in: a bare-metal reboot can take close to 30 minutes). A fault
no rung can clear (heat, a display, a foreign process, a PCIe link trained low) is an
operator's: the node is held out as before. A card past its memory's end of life (too many
retired pages, a failed row remap) needs no ladder: service required at once.

Sources: NVIDIA's Xid catalog (immediate action: RESTART_APP, RESET_GPU, RESTART_BM), the
field notes (a pending retirement takes effect at a reset or driver reload; a reset clears the
volatile ECC counters), the seed (section 2.1: reset, run a while, check whether uncorrectable
errors return; if they do, replace the card), NVSentinel (drain, reset, reboot, service).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RESTART, RESET, REBOOT = "restart", "reset", "reboot"
RUNGS = (RESTART, RESET, REBOOT)


@dataclass(frozen=True)
class Remedy:
    """The rungs that can clear a fault, lowest first; none: an operator's; `service`: the
    card is done, no rung is tried."""

    rungs: tuple[str, ...]
    why: str
    service: bool = False


_ALL = (RESTART, RESET, REBOOT)
_CARD = (RESET, REBOOT)
_NONE: tuple[str, ...] = ()

# Finding codes (the health judge's checks and the watch's own) -> remedy.
BY_CODE: dict[str, Remedy] = {
    "quality": Remedy(_ALL, "answers went bad: a restart clears the engine's state; a reset "
                            "the GPU's (the seed's pitfall 5.5)"),
    "engine_hung": Remedy(_ALL, "a stuck engine (a collective or CUDA call that never returns): "
                                "a restart ends it; a reset if the GPUs keep it stuck"),
    "ecc_volatile_uncorrected": Remedy(_CARD, "a reset clears the counters since the driver "
                                              "loaded; errors that return mean a bad card"),
    "ecc_uncorrected": Remedy(_CARD, "new uncorrectable errors: reset, run, check for repeats"),
    "retired_pages_pending": Remedy(_CARD, "a pending retirement takes effect at a GPU reset "
                                           "or a driver reload"),
    "pages_retired_double_bit": Remedy(_CARD, "a page newly retired for double-bit errors: "
                                              "a reset makes it take effect"),
    "remapped_rows": Remedy(_CARD, "a pending row remap takes effect at a reset (a failed one "
                                   "stays: every rung fails, service required)"),
    "gpu_lost": Remedy(_CARD, "a GPU the driver lost: a reset may bring it back, else a reboot"),
    "gpu_unreadable": Remedy(_CARD, "NVML cannot read the GPU: a reset, else a reboot"),
    "nvml_read": Remedy(_CARD, "NVML calls fail on the GPU: a reset, else a reboot"),
    "gpu_count": Remedy((REBOOT,), "fewer GPUs than expected: only a reboot re-enumerates the bus"),
    "retired_pages": Remedy(_NONE, "the card retired as many pages as it can: replace it",
                            service=True),
}

# Fatal Xid codes (onecat/health/xid.py) -> remedy: NVIDIA's catalog's immediate action.
BY_XID: dict[int, Remedy] = {
    48: Remedy(_ALL, "a double-bit error the driver contained: restart, then reset "
                     "(catalog: WORKFLOW_XID_48)"),
    46: Remedy(_CARD, "GPU stopped processing (catalog: RESET_GPU)"),
    61: Remedy(_CARD, "micro-controller breakpoint: reset (the Debug Guidelines)"),
    62: Remedy(_CARD, "micro-controller halt (catalog: RESET_GPU)"),
    64: Remedy(_NONE, "a page retirement or row remap failed: replace the card", service=True),
    74: Remedy(_CARD, "NVLink error: reset; reseat the bridge if it returns"),
    79: Remedy(_CARD, "fell off the bus (catalog: RESTART_BM): a reset rarely recovers it"),
    95: Remedy(_CARD, "uncontained ECC error (catalog: RESET_GPU)"),
    119: Remedy(_CARD, "GSP RPC timeout (catalog: RESET_GPU)"),
}
# A fatal Xid not in the table: the watch's old rule, a restart first, then up the ladder.
_XID_DEFAULT = Remedy(_ALL, "a fatal Xid: restart, then reset")


def remedy(code: str, xid: int | None = None) -> Remedy:
    """The remedy of one error finding (its code, and its Xid for an "xid" finding)."""
    if code == "xid":
        return BY_XID.get(xid or -1, _XID_DEFAULT)
    return BY_CODE.get(code, Remedy(_NONE, "no restart, reset or reboot clears it"))


@dataclass(frozen=True)
class Plan:
    """What the ladder may try for a look's faults: the rungs every fault allows from the
    highest first rung among them; `service` when one fault needs the card replaced;
    `held_by` the faults no rung clears (an operator's)."""

    rungs: tuple[str, ...]
    service: tuple[str, ...] = ()
    held_by: tuple[str, ...] = ()

    @property
    def repairable(self) -> bool:
        return bool(self.rungs) and not self.service and not self.held_by


def plan(faults: Iterable[tuple[str, int | None]]) -> Plan:
    """The plan for error findings given as (code, xid) pairs."""
    start, service, held = 0, [], []
    remedies = []
    for code, xid in faults:
        found = remedy(code, xid)
        label = f"Xid {xid}" if code == "xid" else code
        if found.service:
            service.append(label)
        elif not found.rungs:
            held.append(label)
        else:
            remedies.append(found)
            start = max(start, RUNGS.index(found.rungs[0]))
    if not remedies:
        return Plan((), tuple(service), tuple(held))
    rungs = tuple(r for r in RUNGS[start:] if all(r in m.rungs for m in remedies))
    return Plan(rungs, tuple(service), tuple(held))


def table() -> list[tuple[str, str, str]]:
    """(fault, rungs, why) rows for docs and `--help`."""
    rows = [(code, " -> ".join(r.rungs) or ("service" if r.service else "operator"), r.why)
            for code, r in BY_CODE.items()]
    rows += [(f"Xid {code}", " -> ".join(r.rungs) or ("service" if r.service else "operator"),
              r.why) for code, r in sorted(BY_XID.items())]
    return rows

