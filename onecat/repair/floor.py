"""The fleet's floor under every automatic drain (issue 46): pure, stdlib only.

Each node's watch acts alone, and several common events reach every node at once: a hot room,
a driver update, a probe that fails on one model, a watch bug that fails every look. A drain
for a cause that does not make answers wrong (heat or the power brake, a blind watch, a card
the ladder wants to reset, a foreign process, a card past its page budget) asks the gateway
host first, and is refused while it would leave fewer than the floor of nodes in rotation
there: the node keeps serving and says so, loudly. A cause that makes answers wrong (bad
answers, uncorrectable ECC since the driver loaded, a lost GPU, a fatal Xid) drains at once,
floor or not: a 503 is better than garbage. The anchors decide the same way: Kubernetes'
PodDisruptionBudget (minAvailable) refuses an eviction below it, NVSentinel bounds its
cordons, DCGM's policy engine acts per GPU, never for the fleet.

    wrong_answers(["throttle_sustained"])            -> False: it must ask
    count("25%", fleet_size=8)                        -> 2
    decide("n1", in_rotation={"n1", "n2"}, going_out=set(), floor=1)  -> (True, ...)
    decide("n2", in_rotation={"n1", "n2"}, going_out={"n1"}, floor=1) -> (False, ...)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Finding codes (the health judge's and the watch's) whose node may answer wrong, or not at
# all: the quality probe failed, uncorrectable ECC errors since the driver loaded (volatile) or
# new ones, a page newly retired for double-bit errors, a GPU the driver lost, a fatal Xid (the
# watch reports only fatal ones as errors), a stuck engine (it took a request and generated no
# token for the probe's whole timeout: every client it gets waits for HAProxy's `timeout
# server`, where a 503 comes at once). Everything else may wait for the floor.
WRONG_ANSWERS = frozenset({"quality", "ecc_volatile_uncorrected", "ecc_uncorrected",
                           "pages_retired_double_bit", "gpu_lost", "xid", "engine_hung"})
# The default: one node stays in rotation whatever the watches see.
DEFAULT = "1"


def wrong_answers(codes: Iterable[str]) -> bool:
    """Whether any of these error findings' codes means the node may answer wrong (it drains
    whatever the floor says)."""
    return any(code in WRONG_ANSWERS for code in codes)


def count(spec: str | int, fleet_size: int) -> int:
    """The floor in nodes: a count ("1") or a share of the fleet ("25%", rounded up); 0 is no
    floor. ValueError (one line) for anything else."""
    text = str(spec).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 <= share <= 100 or math.isnan(share):
                raise ValueError
            return math.ceil(max(fleet_size, 0) * share / 100)
        nodes = int(text)
        if nodes < 0:
            raise ValueError
        return nodes
    except ValueError:
        raise ValueError(f"the floor {text[:40]!r} is neither a count of nodes (1) nor a share "
                         "of the fleet (25%)") from None


def decide(node: str, in_rotation: set[str], going_out: set[str],
           floor: int) -> tuple[bool, str]:
    """Whether `node` may leave rotation: (granted, why). `in_rotation`: the servers the
    gateway sends requests to now; `going_out`: nodes granted their way out a moment ago
    that the gateway may not show out yet (several nodes ask at once)."""
    if node not in in_rotation:
        return True, f"{node} is not in rotation at the gateway: nothing to keep"
    left = in_rotation - going_out - {node}
    if len(left) >= floor:
        return True, f"{len(left)} node(s) stay in rotation (floor {floor})"
    return False, (f"the fleet's floor keeps {node} in: {len(left)} other node(s) in rotation "
                   f"({', '.join(sorted(left)[:8]) or 'none'}), the floor is {floor} "
                   "(onecat_fleet_min_in_rotation)")
