"""One client address cannot hold every connection of the gateway (issue 49, item 6): a real
HAProxy on loopback with the role's own template and `gateway_max_connections_per_source`.

Loopback has a whole /8, so a second client is 127.0.0.2: its requests go through while
127.0.0.1 is at its limit.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "standin_engine"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from gateway_harness import Engine, base_vars, haproxy, render, wait_until  # noqa: E402

from onecat.gateway import backends  # noqa: E402
from onecat.gateway.runtime import Runtime  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy is not installed (bootstrap.sh installs it)")

LIMIT = 3
REQUEST = b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"


def limited_vars(tmp_path: Path, engine: Engine, limit: int) -> dict:
    variables = base_vars(tmp_path)
    states = {engine.name: {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                            "port": engine.port, "max_num_seqs": 8, "agent_port": 0}}
    variables["gateway_servers"] = [s.as_dict() for s in backends.select(states).servers]
    variables["gateway_max_connections_per_source"] = limit
    return variables


def answer(port: int, source: str, conn: socket.socket | None = None) -> bytes:
    """The first bytes the gateway answers a request with (b"" when it closed the connection
    without a word, as a refusal at accept does)."""
    try:
        if conn is None:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5,
                                            source_address=(source, 0))
        with conn:
            conn.sendall(REQUEST)
            return conn.recv(64)
    except (ConnectionResetError, BrokenPipeError):
        return b""


@pytest.fixture
def engine(tmp_path: Path):
    started = Engine(tmp_path, "node-a").start()
    yield started
    started.stop()


def test_one_address_holds_at_most_its_limit_and_others_still_get_in(
        tmp_path: Path, engine: Engine) -> None:
    variables = limited_vars(tmp_path, engine, LIMIT)
    with haproxy(tmp_path, variables) as gw:
        port = int(gw.url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port), timeout=5,
                                         source_address=("127.0.0.1", 0)) for _ in range(LIMIT)]
        try:
            # HAProxy accepts after the kernel did: wait until its table counts them.
            table = Runtime(gw.socket)
            assert wait_until(lambda: f"conn_cur={LIMIT}" in table.command("show table onecat"))
            # One more from the same address: closed at accept, no answer.
            assert answer(port, "127.0.0.1") == b""
            # Another address is not counted with it.
            assert answer(port, "127.0.0.2").startswith(b"HTTP/1.1 200"), "127.0.0.2 refused"
            # The held connections are served.
            assert answer(port, "127.0.0.1", held.pop()).startswith(b"HTTP/1.1 200")
            # One slot came free once HAProxy closed that connection: the address gets in again.
            assert wait_until(
                lambda: f"conn_cur={LIMIT - 1}" in table.command("show table onecat"))
            assert answer(port, "127.0.0.1").startswith(b"HTTP/1.1 200")
        finally:
            for conn in held:
                conn.close()


def test_zero_is_no_limit(tmp_path: Path, engine: Engine) -> None:
    assert "track-sc1 src" in render(limited_vars(tmp_path, engine, LIMIT))
    assert "track-sc1" not in render(limited_vars(tmp_path, engine, 0))


def test_the_role_refuses_a_limit_out_of_range(tmp_path: Path) -> None:
    from test_gateway_role import SERVING, run_role

    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    proc = run_role(tmp_path, {"n1": SERVING}, "-e",
                    json.dumps({"onecat_gateway_max_connections_per_source": -1}))
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert ("gateway_max_connections_per_source -1 is refused: set it to a whole number from 0 "
            "to 1000000") in output, output[-2000:]
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"
