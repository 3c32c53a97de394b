"""The fleet-wide bound of the repair ladder: a book of leases (pure, no I/O).

At most `max_parallel` nodes of the fleet are in GPU repair (a reset or a reboot) at once.
A node asks for a lease before it repairs and gives it back after; a lease has an expiry, so
a node whose watch crashed, or that never came back from its reboot, frees its place when the
lease runs out. The book lives on the gateway host (onecat/repair/lease_server.py), which
saves it after every change: a crash of a node's watch, a reboot of the node or of the
gateway host keep every lease.

    book, answer = take(Book(), "gpu-node-01", "reset: Xid 79", ttl_s=1800, now=t,
                        max_parallel=1)
    answer.granted                     -> True (the one place)
    take(book, "gpu-node-02", ..., now=t, max_parallel=1)[1].granted   -> False: node-01 holds it
    take(book, "gpu-node-01", ..., now=t + 60, ...)                   -> renewed (same since)
    release(book, "gpu-node-01", now=t + 120)                          -> (Book(), True)

Every call drops the leases that expired (`expires <= now`) first.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

# A node's name: the inventory host name the token is made for (a DNS name's length).
NODE = re.compile(r"[A-Za-z0-9._-]{1,253}")
# The holder's reason is shown to operators and logged: one printable ASCII line.
REASON_MAX = 200
# The server clamps the asked time to live to this range (a test may lower the floor).
MIN_TTL_S = 60.0
MAX_TTL_S = 86400.0
# Without a configured bound: this share of the fleet, at least one node.
DEFAULT_SHARE = 0.10
STATE_VERSION = 1


@dataclass(frozen=True)
class Lease:
    node: str
    reason: str
    since: float
    expires: float

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "reason": self.reason, "since": self.since,
                "expires": self.expires}


@dataclass(frozen=True)
class Book:
    """The leases held, oldest first (one per node)."""

    leases: tuple[Lease, ...] = ()

    def holder(self, node: str) -> Lease | None:
        return next((lease for lease in self.leases if lease.node == node), None)

    def holders(self) -> list[dict[str, Any]]:
        return [lease.as_dict() for lease in self.leases]


@dataclass
class Answer:
    """What the lease server answered (or, with `error`, why the client has no answer: the
    caller fails closed, no repair without `granted`)."""

    granted: bool
    expires: float | None = None
    holders: list[dict[str, Any]] = field(default_factory=list)
    max_parallel: int = 0
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"granted": self.granted, "expires": self.expires, "holders": self.holders,
                "max_parallel": self.max_parallel}


def check_node(node: object) -> str:
    """The node's name, or ValueError (a name the token and the log can carry)."""
    if not isinstance(node, str) or not NODE.fullmatch(node):
        raise ValueError("node must be 1 to 253 letters, digits or . _ - characters")
    return node


def clean_reason(reason: object) -> str:
    """One printable ASCII line of at most REASON_MAX characters (other characters become
    '?'; a reason that is not text is empty)."""
    if not isinstance(reason, str):
        return ""
    text = "".join(c if " " <= c <= "~" else "?" for c in reason[:REASON_MAX])
    return text.strip()


def clamp_ttl(ttl_s: object, low: float = MIN_TTL_S, high: float = MAX_TTL_S) -> float:
    """The asked time to live within [low, high], or ValueError when it is no finite number."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)):
        raise ValueError("ttl_s must be a number of seconds")
    value = float(ttl_s)
    if not math.isfinite(value):
        raise ValueError("ttl_s must be a finite number of seconds")
    return min(max(value, low), high)


def max_parallel_for(fleet_size: int, configured: int) -> int:
    """The bound: `configured` when above 0, else 10 % of the fleet (rounded down), at
    least 1."""
    if configured < 0 or fleet_size < 0:
        raise ValueError("max_parallel and the fleet's size must be 0 or more")
    if configured > 0:
        return configured
    return max(1, int(fleet_size * DEFAULT_SHARE))


def drop_expired(book: Book, now: float) -> tuple[Book, list[Lease]]:
    """The book without the leases that expired at `now`, and those leases."""
    live = tuple(lease for lease in book.leases if lease.expires > now)
    gone = [lease for lease in book.leases if lease.expires <= now]
    return Book(live), gone


def take(book: Book, node: str, reason: str, ttl_s: float, now: float,
         max_parallel: int) -> tuple[Book, Answer]:
    """Grant or renew `node`'s lease until now + ttl_s; a new node gets one only while
    fewer than `max_parallel` unexpired leases exist. ValueError for a bad name or ttl."""
    check_node(node)
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) \
            or not math.isfinite(ttl_s) or ttl_s <= 0:
        raise ValueError("ttl_s must be a finite number of seconds above 0")
    book, _ = drop_expired(book, now)
    reason = clean_reason(reason)
    held = book.holder(node)
    if held is not None:
        renewed = Lease(node, reason or held.reason, held.since, now + ttl_s)
        book = Book(tuple(renewed if lease.node == node else lease for lease in book.leases))
        return book, Answer(True, renewed.expires, book.holders(), max_parallel)
    if len(book.leases) >= max_parallel:
        return book, Answer(False, None, book.holders(), max_parallel)
    lease = Lease(node, reason, now, now + ttl_s)
    book = Book((*book.leases, lease))
    return book, Answer(True, lease.expires, book.holders(), max_parallel)


def release(book: Book, node: str, now: float) -> tuple[Book, bool]:
    """The book without `node`'s lease, and whether it held an unexpired one."""
    book, _ = drop_expired(book, now)
    if book.holder(node) is None:
        return book, False
    return Book(tuple(lease for lease in book.leases if lease.node != node)), True


# The state file ---------------------------------------------------------------------------


def dumps(book: Book) -> str:
    return json.dumps({"version": STATE_VERSION, "leases": book.holders()}, indent=1,
                      sort_keys=True) + "\n"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def loads(text: str | bytes, now: float) -> tuple[Book, str]:
    """The book of a state file, and what was wrong with it ('' when nothing was). A file
    that is not a book at all is an empty book; a lease of the wrong shape is left out; an
    expiry beyond now + MAX_TTL_S is cut to it (a garbled file cannot hold a place forever)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        return Book(), f"not JSON ({type(error).__name__}); starting with no lease"
    if not isinstance(data, dict) or not isinstance(data.get("leases"), list):
        return Book(), "not an object with a list of leases; starting with no lease"
    leases: list[Lease] = []
    problems: list[str] = []
    for index, entry in enumerate(data["leases"]):
        if not isinstance(entry, dict):
            problems.append(f"lease {index} is not an object")
            continue
        node, since, expires = entry.get("node"), entry.get("since"), entry.get("expires")
        if not isinstance(node, str) or not NODE.fullmatch(node):
            problems.append(f"lease {index} has no valid node name")
            continue
        if not (_finite(since) and _finite(expires)):
            problems.append(f"lease {index} ({node}) has no finite since/expires")
            continue
        if any(lease.node == node for lease in leases):
            problems.append(f"lease {index} ({node}) repeats a node")
            continue
        expires = min(float(expires), now + MAX_TTL_S)
        leases.append(Lease(node, clean_reason(entry.get("reason")), float(since), expires))
    return Book(tuple(leases)), "; ".join(problems)


def answer_from(data: object) -> Answer:
    """An Answer from the server's JSON, or ValueError when it has not that shape."""
    if not isinstance(data, dict) or not isinstance(data.get("granted"), bool):
        raise ValueError("the answer is not an object with a boolean 'granted'")
    expires = data.get("expires")
    if expires is not None and not _finite(expires):
        raise ValueError("the answer's 'expires' is not a number")
    if data["granted"] and expires is None:
        raise ValueError("a granted lease without 'expires'")
    holders = data.get("holders", [])
    if not isinstance(holders, list) or not all(isinstance(h, dict) for h in holders):
        raise ValueError("the answer's 'holders' is not a list of objects")
    max_parallel = data.get("max_parallel", 0)
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int):
        raise ValueError("the answer's 'max_parallel' is not a whole number")
    return Answer(data["granted"], None if expires is None else float(expires), holders,
                  max_parallel)
