"""The repair lease server as a real process on loopback, for the tests that drive it
(tests/integration/test_repair_lease_server.py, test_fleet_floor.py)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gateway_harness import free_port

REPO = Path(__file__).resolve().parents[1]
SECRET = "s3cret-for-tests-0123456789abcdefghijklmnop"


def token(node: str) -> str:
    """The token scheme, computed here independently of the server's code."""
    return hmac.new(SECRET.encode(), node.encode(), hashlib.sha256).hexdigest()


class LeaseServer:
    """One server process; restart() starts another on the same port, state and secret."""

    def __init__(self, folder: Path, max_parallel: int = 1, fleet_size: int = 0,
                 extra: tuple[str, ...] = ()) -> None:
        self.folder = folder
        self.secret = folder / "secret"
        self.secret.write_text(SECRET + "\n")
        self.secret.chmod(0o600)
        self.state = folder / "leases.json"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.max_parallel = max_parallel
        self.fleet_size = fleet_size
        self.extra = extra
        self.log = folder / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LeaseServer:
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "onecat.repair.lease_server", "serve",
                 "--listen", f"127.0.0.1:{self.port}", "--state", str(self.state),
                 "--secret-file", str(self.secret), "--max-parallel", str(self.max_parallel),
                 "--fleet-size", str(self.fleet_size), "--min-ttl", "1", *self.extra],
                cwd=REPO, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            time.sleep(0.05)
        raise AssertionError("the lease server did not listen: " + self.log.read_text())

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # a crash: no chance to save anything more
            self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def request(self, method: str, path: str, body: bytes | dict | None = None,
                auth: str | None = None, headers: dict | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        sent = {**({"Authorization": f"Bearer {auth}"} if auth else {}), **(headers or {})}
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return response.status, json.loads(raw)

    def events(self) -> str:
        return self.log.read_text()
