"""Which nodes the gateway sends traffic to, and how much at once.

Input is each node's serving state as the serve stage recorded it (the node's state file
/var/lib/onecat-gateway/node.json, or this run's facts), never the inventory alone:

    {"serving": true, "in_rotation": true, "reason": "", "address": "10.0.0.11",
     "port": 8000, "max_num_seqs": 64, "image_id": "sha256:..."}

A node without that state never passed a gate and gets no server line. A node that serves
but failed its last gate (it was rolled back) is listed disabled, so the stats page shows
it and its reason, and it never receives traffic until a later gate passes.

maxconn per server is the engine's --max-num-seqs: the engine runs at most that many
sequences at once and queues the rest where no other node can take them; HAProxy queues
the excess instead and hands each queued request to the first node with a free slot.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..text import one_line
from ..validate import address as address_kind

# vLLM's default --max-num-seqs, for an engine whose unit does not say.
DEFAULT_MAX_NUM_SEQS = 256
# The most sequences a node may claim (node.json comes from the node: `1e12` would become
# `maxconn 1000000000000`, `1e400` is inf and int() of it raises): far above what a 2xV100
# engine runs at once, far below what HAProxy's int fields hold.
MAX_NUM_SEQS_CAP = 65536
SERVER_NAME = re.compile(r"[^A-Za-z0-9_.:-]")
# HAProxy's consistent hash places a server's points on the ring at full_hash(id * 4096 + n)
# (src/lb_chash.c, init_server_tree; 4096 is SRV_EWGHT_RANGE), where id is the server's `id`,
# by default its position in the backend. Position ids move every server after a node that
# joins or leaves the list (a node that fails its gate is left out), and with them their
# conversations; two gateways whose lists differ for a moment disagree on every such server.
# An id taken from the node's own name keeps its points wherever the others are. Ids below
# 2**20: ids equal modulo 2**20 would put two servers' points in the same places (4096 * 2**20
# wraps a 32-bit key).
HASH_ID_SPACE = 1 << 20


class NoBackendError(ValueError):
    """No node can take traffic: the gateway would only answer 503."""


@dataclass(frozen=True)
class Server:
    name: str
    address: str
    port: int
    maxconn: int
    enabled: bool
    reason: str = ""
    agent_port: int = 0  # 0: the gateway's default agent port
    hash_id: int = 0  # HAProxy's `id` for the server (0: its position); see HASH_ID_SPACE

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "port": self.port,
                "maxconn": self.maxconn, "enabled": self.enabled, "reason": self.reason,
                "agent_port": self.agent_port, "hash_id": self.hash_id}


@dataclass
class Selection:
    servers: list[Server] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> list[Server]:
        return [s for s in self.servers if s.enabled]


def server_name(host: str) -> str:
    return SERVER_NAME.sub("_", host)


def hash_ids(names: list[str]) -> dict[str, int]:
    """A server id per name from the name alone (1 to HASH_ID_SPACE - 1), so a node keeps its
    place on every gateway's ring whichever other nodes are listed. Two names that meet on one
    id (about 2 % at 200 nodes) are told apart in name order, the later taking the next id."""
    ids: dict[str, int] = {}
    taken: set[int] = set()
    span = HASH_ID_SPACE - 1
    if len(set(names)) > span:
        raise ValueError(f"{len(set(names))} servers: more servers than ids ({span})")
    for name in sorted(set(names)):
        value = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % span + 1
        while value in taken:
            value = value % span + 1
        taken.add(value)
        ids[name] = value
    return ids


def whole(value: Any, low: int, high: int) -> int | None:
    """`value` as a whole number from `low` to `high`, None for anything else: a bool, inf, NaN,
    a fraction, a number out of range, text that is not digits (node.json is the node's word)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.isascii() and text.isdigit() and len(text) < 12 else None
    if isinstance(value, float):
        value = int(value) if value.is_integer() else None  # inf and NaN are not integers
    if not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def maxconn(state: Mapping[str, Any], override: int = 0, factor: float = 1.0) -> int:
    """Concurrent requests HAProxy sends to one node: --max-num-seqs x factor, or override.
    A max_num_seqs that is no whole number from 1 to MAX_NUM_SEQS_CAP counts as vLLM's
    default (select() leaves such a node out first, with the reason)."""
    if override > 0:
        return int(override)
    raw = state.get("max_num_seqs")
    seqs = whole(raw, 1, MAX_NUM_SEQS_CAP) if raw not in (None, "") else None
    return max(1, int((seqs or DEFAULT_MAX_NUM_SEQS) * factor))


def address_problem(address: str) -> str | None:
    """Why `address` cannot go into a server line (None: an IP literal or a host name, the
    rule of onecat.validate). node.json comes from the node: anything else (a newline, a
    space, an IPv6 zone index, which Python's ipaddress takes with any text after its "%")
    could add lines to the gateway's configuration."""
    if address_kind(address) is None:
        return None
    return (f"its recorded address {address[:80]!r} is neither an IP address nor a host name "
            "(node.json on the node; set onecat_gateway_address for it)")


def _port(value: Any) -> int:
    return whole(value, 1, 65535) or 0


def select(nodes: Mapping[str, Mapping[str, Any] | None], maxconn_override: int = 0,
           maxconn_factor: float = 1.0) -> Selection:
    """Servers for every node that passed a serve gate; the others with the reason why not."""
    selection = Selection()
    for host in sorted(nodes):
        state = nodes[host] or {}
        if not isinstance(state, Mapping):  # node.json is written on the node: untrusted here
            selection.excluded[host] = ("its node.json is not a JSON object: run the serve stage "
                                        "on it again")
            continue
        if not state:
            selection.excluded[host] = ("no serving state on the node: it never passed the "
                                        "serve gate")
            continue
        if not state.get("serving"):
            selection.excluded[host] = ("not serving: " + one_line(str(
                state.get("reason") or "its server failed the gate")))
            continue
        address = str(state.get("address") or "").strip()
        if not address:
            selection.excluded[host] = ("no address known for the node: set "
                                        "onecat_gateway_address for it")
            continue
        problem = address_problem(address)
        if problem:
            selection.excluded[host] = problem
            continue
        port = _port(state.get("port"))
        if not port:
            selection.excluded[host] = (f"invalid serve port {one_line(repr(state.get('port')))}"
                                        " in its node.json: run the serve stage on it again")
            continue
        for key, low, high in (("max_num_seqs", 1, MAX_NUM_SEQS_CAP), ("agent_port", 0, 65535)):
            if state.get(key) not in (None, "") and whole(state.get(key), low, high) is None:
                selection.excluded[host] = (
                    f"its node.json's {key} {one_line(repr(state.get(key)))[:40]} is not a "
                    f"whole number from {low} to {high}: run the serve stage on it again")
                break
        else:
            selection.servers.append(_server(host, address, port, state, maxconn_override,
                                              maxconn_factor))
    ids = hash_ids([s.name for s in selection.servers])
    selection.servers = [replace(s, hash_id=ids[s.name]) for s in selection.servers]
    return selection


def _server(host: str, address: str, port: int, state: Mapping[str, Any],
            maxconn_override: int, maxconn_factor: float) -> Server:
    in_rotation = bool(state.get("in_rotation", True))
    return Server(
        name=server_name(host), address=address, port=port,
        maxconn=maxconn(state, maxconn_override, maxconn_factor), enabled=in_rotation,
        reason="" if in_rotation else one_line(str(state.get("reason") or
                                                    "held out of rotation")),
        agent_port=_port(state.get("agent_port")),
    )


def require_backend(selection: Selection, gateway: str = "the gateway") -> None:
    """Refuse a gateway that would only answer 503, naming why each node is out."""
    if selection.enabled:
        return
    why = "; ".join(f"{host}: {reason}" for host, reason in selection.excluded.items())
    held = "; ".join(f"{s.name}: {s.reason}" for s in selection.servers)
    details = "; ".join(filter(None, [why, held])) or "no node in the inventory group"
    raise NoBackendError(
        f"{gateway} has no serving back end, so it would answer every request with 503 "
        f"({details}): run the serve stage first (site.yml or playbooks/serve.yml) and fix "
        "the nodes it holds out")
