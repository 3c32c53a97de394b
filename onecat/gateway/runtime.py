"""HAProxy's runtime API, over its admin socket: drain, maint, ready, and waiting for idle.

    set server BACKEND/SERVER state drain|maint|ready
    show stat            (CSV: one row per proxy and server; scur = current sessions)
    show servers state   (what a reload loads back: server-state-file)

Drain stops new requests to a server and lets the ones in flight finish; the serve stage
drains a node, waits until its `scur` is 0 (bounded), restarts it, gates it and only then
sets it ready. After a reload the old workers keep their streams (up to hard-stop-after) and
the admin socket reaches the new worker only: the wait also counts the old workers' sessions
through the master CLI (Debian's unit starts HAProxy with `-S /run/haproxy-master.sock`):

    show proc            (the workers, and under "# old workers" those still finishing)
    @!PID show stat      (one worker's show stat)

Stdlib only: this file runs on the gateway host inside an Ansible module.
"""

from __future__ import annotations

import csv
import io
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

STATES = ("ready", "drain", "maint")
# Seconds a drain keeps asking a master CLI that does not answer before it counts no old
# sessions (HAProxy's master re-executes on every reload).
MASTER_GRACE_S = 5.0


class RuntimeApiError(RuntimeError):
    """The admin socket is unreachable or HAProxy refused the command."""


def _check(command: str) -> None:
    if "\n" in command or ";" in command:
        raise RuntimeApiError(f"refusing a runtime command with a newline or ';': {command!r}")


def execute(address: str, command: str, timeout: float = 5.0) -> str:
    """Send one command and return HAProxy's answer. The write side is closed after the
    command: the admin socket closes after one command anyway, the master CLI only then."""
    _check(command)
    try:
        if address.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: object = address
        else:
            host, _, port = address.rpartition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target = (host or "127.0.0.1", int(port))
        with sock:
            sock.settimeout(timeout)
            sock.connect(target)
            sock.sendall(command.encode() + b"\n")
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
    except (OSError, ValueError) as error:
        raise RuntimeApiError(f"HAProxy's admin socket {address} does not answer: {error}")\
            from None
    return b"".join(chunks).decode("utf-8", "replace")


def save_server_state(address: str, dest: str, timeout: float = 5.0) -> int:
    """Write `show servers state` to `dest` (0600, atomically) for the next reload to load
    (HAProxy's server-state-file: without it a reload forgets every drain and maint set
    through this API, and a dead server starts UP). Returns the number of server lines."""
    text = execute(address, "show servers state", timeout)
    if not text.startswith("1\n"):  # the format version line, then '# be_id ...' and rows
        raise RuntimeApiError(f"HAProxy's admin socket {address} answered 'show servers "
                              f"state' with {text[:60]!r}")
    tmp = f"{dest}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, dest)
    return sum(1 for line in text.splitlines()[1:] if line and not line.startswith("#"))


def parse_stat(text: str) -> list[dict[str, str]]:
    """Rows of `show stat` (CSV whose header line starts with '# ')."""
    text = text.lstrip()
    if not text.startswith("# "):
        raise RuntimeApiError(f"unexpected answer to 'show stat': {text[:200]!r}")
    reader = csv.DictReader(io.StringIO(text[2:]))
    return [{k: (v or "") for k, v in row.items() if k} for row in reader]


def admin_state(row: dict[str, str]) -> str:
    """ready, drain or maint, from a server row's status column."""
    status = row.get("status", "").upper()
    if status.startswith("MAINT"):
        return "maint"
    if status.startswith("DRAIN"):
        return "drain"
    return "ready"


@dataclass
class ServerStatus:
    backend: str
    server: str
    status: str  # HAProxy's status column: UP, DOWN, DRAIN, MAINT, ...
    sessions: int  # scur
    total: int  # stot: sessions since start
    queued: int  # qcur
    check: str  # check_desc / last_chk
    agent: str  # last_agt (the node's own word, with its reason)

    @property
    def admin(self) -> str:
        return admin_state({"status": self.status})


def server_status(rows: list[dict[str, str]], backend: str, server: str) -> ServerStatus | None:
    for row in rows:
        if row.get("pxname") == backend and row.get("svname") == server:
            return ServerStatus(
                backend, server, row.get("status", ""), _int(row.get("scur")),
                _int(row.get("stot")), _int(row.get("qcur")),
                row.get("last_chk", "") or row.get("check_desc", ""), row.get("last_agt", ""))
    return None


def sessions_everywhere(rows: list[dict[str, str]], server: str) -> int:
    """The server's sessions in every back end: with affinity routing the same node is also a
    server of onecat_keyless (tracking its onecat_nodes namesake), and a drain of the node
    must wait for the requests in flight there too."""
    return sum(_int(r.get("scur")) for r in rows
               if r.get("svname") == server and r.get("pxname") not in (None, ""))


def proc_pids(show_proc: str, section: str) -> list[int]:
    """The PIDs the master CLI's `show proc` lists under "# <section>" ("workers", ...)."""
    pids, current = [], ""
    for line in show_proc.splitlines():
        if line.startswith("#"):
            current = line.strip("# ").lower()
        elif current == section and line.split() and line.split()[0].isdigit():
            pids.append(int(line.split()[0]))
    return pids


def old_workers(show_proc: str) -> list[int]:
    """The PIDs the master CLI's `show proc` lists under "# old workers"."""
    return proc_pids(show_proc, "old workers")


def servers(rows: list[dict[str, str]], backend: str) -> list[ServerStatus]:
    names = [r["svname"] for r in rows
             if r.get("pxname") == backend and r.get("svname") not in ("FRONTEND", "BACKEND")]
    return [s for s in (server_status(rows, backend, n) for n in names) if s]


def in_rotation(status: str) -> bool:
    """Whether HAProxy sends the server new requests: UP (also "UP 1/3", a server failing its
    checks but not down yet) or "no check". DRAIN, MAINT, DOWN and NOLB take none."""
    status = status.strip().upper()
    return status.startswith("UP") or status == "NO CHECK"


def rotation(rows: list[dict[str, str]], backend: str) -> dict[str, str]:
    """Each server of the back end and its status column, in the configuration's order."""
    return {s.server: s.status for s in servers(rows, backend)}


def last_in_rotation(states: dict[str, str], server: str) -> bool:
    """Given a back end's `rotation`: the server takes requests and no other server does, so
    taking it out leaves the back end with no server (HAProxy answers 503 to every client)."""
    return (server in states and in_rotation(states[server])
            and not any(in_rotation(status) for name, status in states.items()
                        if name != server))


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


class Runtime:
    """One HAProxy process's admin socket."""

    def __init__(self, address: str, timeout: float = 5.0,
                 execute_fn: Callable[[str, str, float], str] = execute,
                 master: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self._execute = execute_fn
        # The master CLI, when HAProxy runs one: old workers' sessions count in a drain.
        self.master = master

    def command(self, command: str) -> str:
        _check(command)
        return self._execute(self.address, command, self.timeout)

    def old_sessions(self, server: str) -> int:
        """The server's sessions still open in the old workers of the last reloads (0 without
        a master CLI)."""
        if not self.master:
            return 0
        pids = old_workers(self._execute(self.master, "show proc", self.timeout))
        return sum(sessions_everywhere(parse_stat(self._execute(
            self.master, f"@!{pid} show stat", self.timeout)), server) for pid in pids)

    def stat(self) -> list[dict[str, str]]:
        return parse_stat(self.command("show stat"))

    def status(self, backend: str, server: str) -> ServerStatus | None:
        return server_status(self.stat(), backend, server)

    def set_state(self, backend: str, server: str, state: str) -> None:
        if state not in STATES:
            raise RuntimeApiError(f"state must be one of {', '.join(STATES)}, not {state!r}")
        answer = self.command(f"set server {backend}/{server} state {state}").strip()
        if answer:
            raise RuntimeApiError(f"HAProxy refused 'set server {backend}/{server} state "
                                  f"{state}': {answer}")

    def wait_idle(self, backend: str, server: str, timeout: float, interval: float = 0.5,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[bool, int, float]:
        """Wait until the server has no session in any back end (it is drained in `backend`,
        servers of other back ends that track it follow): (idle, sessions left, seconds waited)."""
        started = clock()
        master_down_since: float | None = None
        while True:
            rows = self.stat()
            sessions = (sessions_everywhere(rows, server)
                        if server_status(rows, backend, server) else 0)
            if sessions == 0 and self.master:
                try:
                    sessions = self.old_sessions(server)
                    master_down_since = None
                except RuntimeApiError:
                    # The master re-executes right after a reload and refuses or resets
                    # connections for a moment: asked again; one that stays silent for
                    # MASTER_GRACE_S (a stale socket file) counts no old sessions, as before.
                    master_down_since = master_down_since or clock()
                    sessions = 0 if clock() - master_down_since >= MASTER_GRACE_S else 1
            waited = clock() - started
            if sessions == 0:
                return True, 0, waited
            if waited >= timeout:
                return False, sessions, waited
            sleep(min(interval, max(0.0, timeout - waited)))
