"""The repair lease server on the gateway host: the fleet's book of repair leases over HTTP.

    python3 -m onecat.repair.lease_server serve --listen 192.0.2.10:8043 \
        --state /var/lib/onecat-gateway/repair-lease/leases.json \
        --secret-file /var/lib/onecat-gateway/repair-lease/secret --max-parallel 0 --fleet-size 24
    python3 -m onecat.repair.lease_server token --secret-file FILE --node gpu-node-01
    python3 -m onecat.repair.lease_server token --secret-file FILE --admin

The API (JSON in and out; stdlib only, roles/gateway installs it as onecat-repair-lease.service):

    POST /v1/lease    {"node": N, "reason": TEXT, "ttl_s": S}
                      200 {"granted": true, "expires": EPOCH, "holders": [...], "max_parallel": M}
                      409 {"granted": false, "expires": null, "holders": [...], "max_parallel": M}
    POST /v1/release  {"node": N}            200 {"released": true|false}
    GET  /v1/leases                          200 {"holders": [...], "max_parallel": M}
    POST /v1/out      {"node": N, "reason": TEXT, "ttl_s": S}
                      200 {"granted": true, "floor": F, "in_rotation": [...], "why": TEXT}
                      409 {"granted": false, ...}: the fleet's floor keeps the node in

/v1/out is the fleet's floor (floor.py, issue 46): a node's watch asks before it drains for a
cause that does not make answers wrong. The server reads which nodes the gateway on this host
has in rotation (HAProxy's admin socket) and grants unless the node's leaving would leave
fewer than the floor there, counting the nodes granted a moment ago that the gateway may not
show out yet (their grant lasts ttl_s, in memory: a restart forgets them, and HAProxy shows
them out by then). A rotation it cannot read refuses (503): the node keeps serving.

Each node has its own token, HMAC-SHA256(secret, node name) in hex, sent as
`Authorization: Bearer TOKEN` (after a rotation, the retiring secret's tokens open too, until
the next run retires it: --retiring-secret-file); the node in the body must be the token's.
GET /v1/leases takes the admin token (HMAC of "@admin"), or a node's token with its name in
`X-Onecat-Node`; the admin token may also release any node. Answers: 400 a body that is not
a JSON object of the right fields, 401 no or a wrong token (nothing more said), 404/405 another
path or method, 411 a POST without Content-Length, 413 a body over 4 KiB, 503 the book could
not be saved (the change is not made: the caller fails closed).

One lock around the book; it is saved (temporary file, fsync, rename) after every change and
loaded at start, so a restart of the server or a reboot of the host keeps every lease. One
line on stderr (the journal) per grant, renewal, release, refusal and expiry.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import socket
import stat
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from onecat.gateway import runtime
from onecat.gateway.share import fetch_stats

from . import floor, lease

MAX_BODY = 4096
# A connection that sends nothing for this long is closed: a slow client holds a thread,
# never the book's lock (the body is read before the lock is taken).
SOCKET_TIMEOUT_S = 10.0
# A connection lives at most this long in all (a client that trickles a byte at a time).
CONNECTION_MAX_S = 30.0
# Connections served at once, and from one address; more are closed at once (each holds a
# thread until its timeout).
MAX_CONNECTIONS = 64
MAX_CONNECTIONS_PER_ADDRESS = 8
MAX_SECRET_BYTES = 4096
MIN_SECRET_CHARS = 32
ADMIN = "@admin"
TOKEN_HEX = 64
PATHS = {"/v1/lease": "POST", "/v1/release": "POST", "/v1/leases": "GET", "/v1/out": "POST"}


def token_for(secret: bytes, node: str) -> str:
    """A node's token (or the admin's, for "@admin"): HMAC-SHA256(secret, name) in hex."""
    return hmac.new(secret, node.encode("ascii"), hashlib.sha256).hexdigest()


def read_secret(path: str) -> bytes:
    """The shared secret of an owner-only regular file; ValueError (one line) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise ValueError(f"cannot open the secret file {path}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"the secret file {path} is not a regular file")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ValueError(f"the secret file {path} is readable or writable by others "
                             f"(mode {stat.S_IMODE(info.st_mode):04o}): chmod 600 it")
        data = handle.read(MAX_SECRET_BYTES + 1).strip()
    if len(data) > MAX_SECRET_BYTES or len(data) < MIN_SECRET_CHARS:
        raise ValueError(f"the secret file {path} must hold {MIN_SECRET_CHARS} to "
                         f"{MAX_SECRET_BYTES} bytes")
    return data


def printable(text: object, limit: int = 200) -> str:
    return "".join(c if " " <= c <= "~" else "?" for c in str(text)[:limit])


def save_atomically(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}."
                                     f"{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


class Service:
    """The book, its lock and its file; `handle` answers one request (no socket: testable)."""

    def __init__(self, state_path: str, secret: bytes, max_parallel: int,
                 min_ttl_s: float = lease.MIN_TTL_S, clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] | None = None,
                 save: Callable[[str, str], None] = save_atomically, min_in_rotation: int = 0,
                 rotation: Callable[[], set[str]] | None = None,
                 retiring: bytes | None = None,
                 other_gateways: list[tuple[str, Callable[[], set[str]]]] | None = None) -> None:
        self.state_path = state_path
        # The floor (/v1/out): the fewest nodes an automatic drain leaves in rotation, and
        # what reads the rotation (None: no gateway here, every way out is granted).
        self.min_in_rotation = min_in_rotation
        self.rotation = rotation
        # Each other gateway's rotation (its stats page), by the name the log and the answer
        # give it: the floor holds at every gateway, since each has its own clients and may see
        # a node another does not (a network path down between one gateway and one node).
        self.other_gateways = list(other_gateways or [])
        self.going_out = lease.Book()
        self.max_parallel = max_parallel
        self.min_ttl_s = min_ttl_s
        self.clock = clock
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.save = save
        self.lock = threading.Lock()
        # The secret a rotation replaced: its tokens still open until the next run retires it,
        # so a node keeps its leases until it has the new token (roles/gateway, rotate).
        self.secrets = [secret] + ([retiring] if retiring and retiring != secret else [])
        self.book = self._load()

    def _load(self) -> lease.Book:
        try:
            with open(self.state_path, "rb") as handle:
                data = handle.read(16 * 1024 * 1024)
        except FileNotFoundError:
            self.log(f"no state file {self.state_path} yet: starting with no lease")
            return lease.Book()
        except OSError as error:
            self.log(f"cannot read the state file {self.state_path} ({error.strerror}): "
                     "starting with no lease")
            return lease.Book()
        book, problem = lease.loads(data, self.clock())
        if problem:
            self.log(f"the state file {self.state_path} is garbled: {printable(problem, 400)}")
            if not book.leases:
                try:
                    os.replace(self.state_path, self.state_path + ".garbled")
                    self.log(f"kept it as {self.state_path}.garbled")
                except OSError:
                    pass
        for held in book.leases:
            self.log(f"loaded node={held.node} reason={held.reason!r} "
                     f"expires={held.expires:.0f}")
        return book

    # Authentication ----------------------------------------------------------------------

    @staticmethod
    def bearer(authorization: str | None) -> str | None:
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or len(token) != TOKEN_HEX:
            return None
        return token

    def _opens(self, token: str, name: str) -> bool:
        given = token.encode("ascii", "replace")
        # Every secret compared (no early exit): the time says nothing of which one matched.
        matches = [hmac.compare_digest(given, token_for(secret, name).encode("ascii"))
                   for secret in self.secrets]
        return any(matches)

    def is_node(self, token: str, node: str) -> bool:
        return self._opens(token, node)

    def is_admin(self, token: str) -> bool:
        return self._opens(token, ADMIN)

    # The book ------------------------------------------------------------------------------

    def _commit(self, book: lease.Book) -> bool:
        """Save `book` and make it the book; False (the old book kept) when it cannot be saved."""
        if book == self.book:
            return True
        try:
            self.save(self.state_path, lease.dumps(book))
        except OSError as error:
            self.log(f"cannot save the state file {self.state_path} ({error.strerror}): "
                     "the change is not made")
            return False
        self.book = book
        return True

    def _expire(self, now: float) -> lease.Book:
        book, gone = lease.drop_expired(self.book, now)
        for held in gone:
            self.log(f"expired node={held.node} reason={held.reason!r} "
                     f"held {now - held.since:.0f} s")
        return book

    def take(self, node: str, reason: str, ttl_s: float) -> tuple[int, dict[str, Any]]:
        ttl = lease.clamp_ttl(ttl_s, self.min_ttl_s, lease.MAX_TTL_S)
        with self.lock:
            now = self.clock()
            book = self._expire(now)
            renewing = book.holder(node) is not None
            book, answer = lease.take(book, node, reason, ttl, now, self.max_parallel)
            if not self._commit(book):
                return 503, {**lease.Answer(False, None, self.book.holders(),
                                            self.max_parallel).as_dict(),
                             "error": "the lease server cannot save its state"}
        held = book.holder(node)
        shown = held.reason if held else lease.clean_reason(reason)
        if answer.granted:
            self.log(f"{'renewed' if renewing else 'granted'} node={node} reason={shown!r} "
                     f"ttl={ttl:.0f} s holders={len(answer.holders)}/{answer.max_parallel}")
            return 200, answer.as_dict()
        self.log(f"refused node={node} reason={shown!r}: all {answer.max_parallel} place(s) "
                 "held by " + ", ".join(h["node"] for h in answer.holders))
        return 409, answer.as_dict()

    def release(self, node: str, by_admin: bool) -> tuple[int, dict[str, Any]]:
        with self.lock:
            now = self.clock()
            book = self._expire(now)
            held = book.holder(node)
            book, released = lease.release(book, node, now)
            if not self._commit(book):
                return 503, {"released": False, "error": "the lease server cannot save its state"}
        if released and held is not None:
            self.log(f"released node={node} reason={held.reason!r} held "
                     f"{now - held.since:.0f} s{' (by the admin token)' if by_admin else ''}")
        return 200, {"released": released}

    def holders(self) -> tuple[int, dict[str, Any]]:
        with self.lock:
            book = self._expire(self.clock())
            self._commit(book)
            return 200, {"holders": book.holders(), "max_parallel": self.max_parallel}

    def out(self, node: str, reason: str, ttl_s: float) -> tuple[int, dict[str, Any]]:
        """The floor's answer to a node that wants out of rotation (floor.decide)."""
        ttl = lease.clamp_ttl(ttl_s, self.min_ttl_s, lease.MAX_TTL_S)
        shown = lease.clean_reason(reason)
        answer: dict[str, Any] = {"granted": True, "floor": self.min_in_rotation,
                                  "in_rotation": [], "why": "no floor: no gateway on this host"}
        floored = self.rotation is not None and self.min_in_rotation > 0
        # Read before the lock, every gateway at once: a gateway that does not answer costs
        # one read's timeout (under the node's own), and never stalls the leases meanwhile.
        views = self._read_views() if floored else []
        with self.lock:
            now = self.clock()
            self.going_out, _ = lease.drop_expired(self.going_out, now)
            if floored:
                others = {held.node for held in self.going_out.leases if held.node != node}
                for gateway, serving in views:
                    at = f" at gateway {gateway}" if gateway else ""
                    if isinstance(serving, Exception):
                        whose = f"the rotation{at}" if gateway else "the gateway's rotation"
                        why = f"{whose} cannot be read: {printable(serving)}"
                        self.log(f"refused out node={node} reason={shown!r}: {why}")
                        return 503, {**answer, "granted": False, "why": why, "error": why}
                    granted, why = floor.decide(node, serving, others, self.min_in_rotation)
                    if not gateway:
                        answer["in_rotation"] = sorted(serving)
                    answer.update(granted=granted, why=why + at)
                    if not granted:
                        break
            if answer["granted"]:
                self.going_out, _ = lease.take(self.going_out, node, reason, ttl, now,
                                               len(self.going_out.leases) + 1)
        self.log(f"{'granted' if answer['granted'] else 'refused'} out node={node} "
                 f"reason={shown!r}: {answer['why']}")
        return (200 if answer["granted"] else 409), answer

    def _read_views(self) -> list[tuple[str, set[str] | Exception]]:
        """This gateway's rotation ("") and each other gateway's, read side by side; a view
        that cannot be read is its error."""
        readers = [("", self.rotation), *self.other_gateways] if self.rotation else []

        def read(reader: Callable[[], set[str]]) -> set[str] | Exception:
            try:
                return reader()
            except (OSError, ValueError, runtime.RuntimeApiError) as error:
                return error

        if len(readers) == 1:
            return [("", read(readers[0][1]))]
        with ThreadPoolExecutor(max_workers=len(readers)) as pool:
            results = list(pool.map(read, [reader for _, reader in readers]))
        return [(name, result) for (name, _), result in zip(readers, results, strict=True)]

    # One request -------------------------------------------------------------------------

    def handle(self, method: str, path: str, authorization: str | None, body: bytes | None,
               node_header: str | None = None) -> tuple[int, dict[str, Any]]:
        """(status, JSON answer) of one request whose body was read (None: no body)."""
        path = path.split("?", 1)[0]
        if path not in PATHS:
            return 404, {"error": "not found"}
        if method != PATHS[path]:
            return 405, {"error": "method not allowed"}
        token = self.bearer(authorization)
        if token is None:
            return 401, {"error": "unauthorized"}
        if method == "GET":
            if self.is_admin(token) or (
                    isinstance(node_header, str) and lease.NODE.fullmatch(node_header)
                    and self.is_node(token, node_header)):
                return self.holders()
            return 401, {"error": "unauthorized"}
        if body is None:
            return 411, {"error": "a JSON body with Content-Length is required"}
        if len(body) > MAX_BODY:
            return 413, {"error": f"the body is over {MAX_BODY} bytes"}
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return 400, {"error": "the body is not JSON"}
        if not isinstance(data, dict):
            return 400, {"error": "the body is not a JSON object"}
        node = data.get("node")
        try:
            lease.check_node(node)
        except ValueError as error:
            return 400, {"error": str(error)}
        admin = path == "/v1/release" and self.is_admin(token)
        if not (admin or self.is_node(token, node)):
            return 401, {"error": "unauthorized"}
        if path == "/v1/release":
            return self.release(node, admin)
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            return 400, {"error": "reason must be text"}
        try:
            lease.clamp_ttl(data.get("ttl_s"))
        except ValueError as error:
            return 400, {"error": str(error)}
        if path == "/v1/out":
            return self.out(node, reason, data["ttl_s"])
        return self.take(node, reason, data["ttl_s"])


class Handler(BaseHTTPRequestHandler):
    """HTTP framing around Service.handle; every method reaches it (404/405 there)."""

    server_version = "onecat-repair-lease"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S
    error_content_type = "application/json"
    error_message_format = '{"error": "%(code)d"}'
    service: Service  # set on the subclass the server makes

    def version_string(self) -> str:
        return self.server_version

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def setup(self) -> None:
        super().setup()
        # A whole connection lives at most this long, however slowly its bytes come.
        self._deadline = threading.Timer(CONNECTION_MAX_S, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _dispatch(self) -> None:
        try:
            status, answer = self._answer()
        except (TimeoutError, ConnectionError):
            self.close_connection = True  # a client that stopped sending: nothing to answer
            return
        except Exception as error:  # no traceback reaches a client
            self.service.log(f"internal error on {printable(self.command, 16)} "
                             f"{printable(self.path, 64)}: {type(error).__name__}")
            status, answer = 500, {"error": "internal error"}
        self._send(status, answer)

    def _answer(self) -> tuple[int, dict[str, Any]]:
        body: bytes | None = None
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return 411, {"error": "send the body with Content-Length"}
        if length is not None:
            if not length.strip().isdigit() or not length.isascii():
                self.close_connection = True
                return 400, {"error": "bad Content-Length"}
            size = int(length)
            if size > MAX_BODY:
                self.close_connection = True  # its body is not read
                return 413, {"error": f"the body is over {MAX_BODY} bytes"}
            body = self.rfile.read(size)
            if len(body) < size:
                self.close_connection = True
                return 400, {"error": "the body ended early"}
        return self.service.handle(self.command, self.path, self.headers.get("Authorization"),
                                   body, self.headers.get("X-Onecat-Node"))

    def _send(self, status: int, answer: dict[str, Any]) -> None:
        data = (json.dumps(answer) + "\n").encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per lease event instead (Service.log)

    def log_message(self, format: str, *args: Any) -> None:
        self.service.log(f"{self.client_address[0]}: {printable(format % args, 300)}")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[Handler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.counting = threading.Lock()
        self.open: dict[str, int] = {}
        super().__init__(address, handler)

    def _enter(self, host: str) -> bool:
        with self.counting:
            if sum(self.open.values()) >= MAX_CONNECTIONS \
                    or self.open.get(host, 0) >= MAX_CONNECTIONS_PER_ADDRESS:
                return False
            self.open[host] = self.open.get(host, 0) + 1
            return True

    def _leave(self, host: str) -> None:
        with self.counting:
            self.open[host] -= 1
            if not self.open[host]:
                del self.open[host]

    def process_request(self, request: Any, client_address: Any) -> None:
        host = str(client_address[0])
        if not self._enter(host):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._leave(host)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._leave(str(client_address[0]))


def make_server(listen: tuple[str, int], service: Service) -> Server:
    handler = type("BoundHandler", (Handler,), {"service": service})
    return Server(listen, handler)


def _serving(rows: list[dict[str, str]], backend: str) -> set[str]:
    """The back end's servers HAProxy sends requests to (UP, not DRAIN/MAINT/DOWN)."""
    return {name for name, status in runtime.rotation(rows, backend).items()
            if runtime.in_rotation(status)}


def haproxy_rotation(socket_path: str, backend: str) -> Callable[[], set[str]]:
    """What reads the servers this host's HAProxy sends requests to, from its socket."""
    return lambda: _serving(runtime.Runtime(socket_path).stat(), backend)


def stats_rotation(url: str, backend: str) -> Callable[[], set[str]]:
    """What reads another gateway's rotation from its stats page (onecat_admin's /stats, CSV):
    the servers it sends requests to. OSError or ValueError when it cannot be read."""
    # 3 s: under the 5 s a node waits for its answer (onecat/repair/lease_client.py).
    return lambda: _serving(runtime.parse_stat(fetch_stats(url, timeout=3.0)), backend)


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT or [IPV6]:PORT; argparse's error otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{printable(text, 80)!r} is not HOST:PORT")
    return host, int(port)


def _stats_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{printable(text, 80)!r} is not an http(s) URL of a "
                                         "gateway's stats page (http://GATEWAY:8404/stats)")
    return text


def _count(text: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise argparse.ArgumentTypeError(f"{printable(text, 20)!r} is not a whole number >= 0")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= lease.MAX_TTL_S):
        raise argparse.ArgumentTypeError(f"{printable(text, 20)!r} is not a number of seconds "
                                         f"above 0 and at most {lease.MAX_TTL_S:g}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m onecat.repair.lease_server",
                                     description="The fleet's repair leases (issue 31).")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="answer the lease API")
    serve.add_argument("--listen", type=parse_listen, required=True, help="HOST:PORT")
    serve.add_argument("--state", required=True, help="the book's file (saved on every change)")
    serve.add_argument("--secret-file", required=True, help="owner-only file of the secret")
    serve.add_argument("--retiring-secret-file", default="",
                       help="owner-only file of the secret a rotation replaced, whose tokens "
                            "still open (absent: none)")
    serve.add_argument("--max-parallel", type=_count, default=0,
                       help="nodes in repair at once; 0: 10%% of --fleet-size, at least 1")
    serve.add_argument("--fleet-size", type=_count, default=0,
                       help="nodes of the fleet (for --max-parallel 0)")
    serve.add_argument("--min-ttl", type=_seconds, default=lease.MIN_TTL_S,
                       help="shortest lease granted (seconds; lower only in tests)")
    serve.add_argument("--min-in-rotation", default="0", metavar="N|P%",
                       help="the fleet's floor: nodes an automatic drain leaves in rotation "
                            "(a count, or a share of --fleet-size); 0: no floor")
    serve.add_argument("--admin-socket", default="",
                       help="this host's HAProxy admin socket, read for the rotation")
    serve.add_argument("--backend", default="onecat_nodes", help="the nodes' back end")
    serve.add_argument("--other-gateway-stats", action="append", default=[], metavar="URL",
                       type=_stats_url,
                       help="another gateway's stats page (http://GW:8404/stats): the floor "
                            "must hold there too (repeat for each)")
    token = commands.add_parser("token", help="print a node's (or the admin's) token")
    token.add_argument("--secret-file", required=True)
    who = token.add_mutually_exclusive_group(required=True)
    who.add_argument("--node")
    who.add_argument("--admin", action="store_true")
    args = parser.parse_args(argv)
    try:
        secret = read_secret(args.secret_file)
    except ValueError as error:
        print(f"onecat repair lease: {error}", file=sys.stderr)
        return 2
    if args.command == "token":
        if args.admin:
            print(token_for(secret, ADMIN))
            return 0
        try:
            print(token_for(secret, lease.check_node(args.node)))
        except ValueError as error:
            print(f"onecat repair lease: --node {printable(args.node, 60)!r}: {error}",
                  file=sys.stderr)
            return 2
        return 0
    bound = lease.max_parallel_for(args.fleet_size, args.max_parallel)
    try:
        minimum = floor.count(args.min_in_rotation, args.fleet_size)
    except ValueError as error:
        print(f"onecat repair lease: --min-in-rotation: {error}", file=sys.stderr)
        return 2
    retiring = None
    if args.retiring_secret_file and os.path.lexists(args.retiring_secret_file):
        try:
            retiring = read_secret(args.retiring_secret_file)
        except ValueError as error:
            print(f"onecat repair lease: the retiring secret is not used: {error}",
                  file=sys.stderr)
    service = Service(args.state, secret, bound, min_ttl_s=args.min_ttl,
                      min_in_rotation=minimum, retiring=retiring,
                      rotation=haproxy_rotation(args.admin_socket, args.backend)
                      if args.admin_socket else None,
                      other_gateways=[(urllib.parse.urlsplit(url).netloc or url,
                                       stats_rotation(url, args.backend))
                                      for url in args.other_gateway_stats])
    try:
        server = make_server(args.listen, service)
    except OSError as error:
        print(f"onecat repair lease: cannot listen on {args.listen[0]}:{args.listen[1]}: "
              f"{error.strerror}", file=sys.stderr)
        return 1
    service.log(f"listening on {args.listen[0]}:{args.listen[1]}, at most {bound} node(s) "
                f"in repair at once, {len(service.book.leases)} lease(s) held, a floor of "
                f"{minimum} node(s) in rotation"
                + (f" at {args.admin_socket}" if args.admin_socket else " (no gateway read)")
                + "".join(f" and at {url}" for url in args.other_gateway_stats)
                + (", the retiring secret's tokens still open" if retiring else ""))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
