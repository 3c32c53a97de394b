"""HAProxy's read-only runtime socket (gateway_read_socket, issue 49 item 7): the repair lease
server's floor reads the rotation through it without root, and nothing sent through it changes
a server. A real HAProxy on loopback with the role's template."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway_harness import Engine, gateway_vars, haproxy, wait_until

from onecat.gateway.runtime import Runtime, execute, rotation

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "haproxy"], capture_output=True, check=False).returncode != 0,
    reason="haproxy is not installed (bootstrap.sh installs it)")


def test_the_read_socket_shows_the_rotation_and_changes_nothing(tmp_path: Path) -> None:
    engines = [Engine(tmp_path, name) for name in ("node-a", "node-b")]
    try:
        for engine in engines:
            engine.start()
        variables = gateway_vars(tmp_path, engines)
        with haproxy(tmp_path, variables) as gw:
            read = variables["gateway_read_socket"]
            assert (Path(read).stat().st_mode & 0o777) == 0o660
            states = wait_until(lambda: rotation(Runtime(read).stat(), "onecat_nodes"))
            assert set(states) == {"node-a", "node-b"}, states
            for command in ("disable server onecat_nodes/node-a",
                            "set server onecat_nodes/node-a state maint",
                            "set server onecat_nodes/node-a agent-send drain",
                            "shutdown sessions server onecat_nodes/node-a"):
                answer = execute(read, command)
                assert "Permission denied" in answer, (command, answer)
            admin = rotation(Runtime(gw.socket).stat(), "onecat_nodes")
            assert admin["node-a"].startswith("UP"), admin
    finally:
        for engine in engines:
            engine.stop()
