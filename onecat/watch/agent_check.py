"""Whether the gateway can still hear this node's agent, and failing closed when it cannot
(issue 49 item 1): pure logic and one socket read, stdlib only.

The watch speaks to the gateway through the node agent (onecat-gateway-agent.socket): every
drain it decides, a drain for garbage answers too, is an answer HAProxy's agent check reads.
A socket systemd failed (its trigger limit, before the role turned it off), stopped or never
started leaves HAProxy with the agent's last word, usually `ready up`: every later drain goes
unheard while the node takes traffic. So on every look the watch asks the agent as HAProxy
does (connect to the address and port of node.json, read one line). When it gets no line it
restarts the socket once and asks again; still nothing, and the node fails closed through the
one channel left, the gateway's health check: the watch writes the engine's key guard a hold
file, and the guard answers the gateway's check 503 with its reason until the agent answers
again (onecat/serve/guard.py). Requests in flight finish; the serve gate's and the watch's own
/health do not carry the gateway's header and are answered as always.

    check = lambda: answers("10.0.0.5", 8003)
    lines = keep_heard(check, restart_socket, Path("/usr/local/lib/onecat/guard/hold"))
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

from onecat.files import write_atomic

# The most of an answer read: an agent line is a few words ("maint down #reason ...").
MAX_ANSWER = 1024


def target(node_file: Path) -> tuple[str, int] | None:
    """The agent's address and port from the gateway's node.json; None without an agent
    (no file, an agent port of 0, or a file the gateway stage did not write)."""
    try:
        state = json.loads(node_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    address, port = state.get("address"), state.get("agent_port")
    if not isinstance(address, str) or not address or isinstance(port, bool):
        return None
    if not isinstance(port, int) or not 0 < port < 65536:
        return None
    return address, port


def answers(address: str, port: int, timeout_s: float = 3.0) -> tuple[bool, str]:
    """(True, the agent's line) when the agent answers one line as HAProxy reads it, else
    (False, why)."""
    where = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as connection:
            data = b""
            while b"\n" not in data and len(data) < MAX_ANSWER:
                chunk = connection.recv(MAX_ANSWER - len(data))
                if not chunk:
                    break
                data += chunk
    except TimeoutError:
        return False, f"the gateway agent on {where} did not answer in {timeout_s:g} s"
    except OSError as error:
        return False, (f"the gateway agent on {where} cannot be reached: "
                       f"{error.strerror or type(error).__name__}")
    line = data.split(b"\n", 1)[0].decode("ascii", "replace").strip()
    if b"\n" not in data or not line:
        return False, f"the gateway agent on {where} closed without a line"
    return True, line


def keep_heard(check: Callable[[], tuple[bool, str]], restart: Callable[[], bool],
               hold_file: Path,
               may_hold: Callable[[str], tuple[bool, str]] | None = None) -> list[str]:
    """Ask the agent; restart its socket once when it does not answer; hold the node out
    through the health check when it still does not, lift that hold once it answers. The
    journal lines of what changed (none when the agent answers and nothing was held).

    `may_hold(why)` is the fleet's floor (floor.py): an agent nobody hears does not make
    answers wrong, so when every node's agent goes silent at once (a bad unit, a firewall rule
    pushed everywhere) the floor keeps its nodes serving, and says so, instead of emptying the
    gateway. None: no floor to ask (none configured, or the node's own faults make its answers
    wrong: 503 beats garbage)."""
    heard, said = check()
    if heard:
        return [_lift(hold_file)] if hold_file.exists() else []
    restarted = restart()
    heard_again, said_again = check()
    if heard_again:
        lines = [f"{said}: its socket was restarted and it answers again"]
        return lines + ([_lift(hold_file)] if hold_file.exists() else [])
    why = said_again if restarted else f"{said_again} (its socket could not be restarted)"
    held = hold_file.exists()
    if not hold_file.parent.is_dir():
        return [f"{why}, and the node cannot fail closed: there is no key guard folder "
                f"{hold_file.parent} for the hold file (an engine without a key?): its drains "
                "go unheard until the agent answers"]
    if not held and may_hold is not None:
        granted, floor_why = may_hold(why)
        if not granted:
            return [f"{why}: kept in by the fleet's floor ({floor_why}): its drains cannot "
                    "reach the gateway until the agent answers"]
    try:  # 0644: the engine's container reads it; it holds no secret
        write_atomic(hold_file, f"{why}: its drains cannot reach the gateway\n", 0o644)
    except OSError as error:
        return [f"{why}, and the node cannot fail closed: the hold file {hold_file} cannot be "
                f"written ({error.strerror or type(error).__name__}; no key guard on this "
                "node?): its drains go unheard until the agent answers"]
    if held:
        return [f"still failing closed: {why}"]
    return [f"{why}, even after its socket was restarted: the node fails closed, the gateway's "
            "health check is answered 503 until the agent answers again "
            f"(the engine's key guard, {hold_file})"]


def _lift(hold_file: Path) -> str:
    hold_file.unlink(missing_ok=True)
    return "the gateway agent answers again: the health check's hold is lifted"

