"""The watch asks its gateway agent on every look and fails closed when it cannot be heard
(issue 49 item 1): onecat/watch/agent_check.py against a real socket on loopback."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import yaml

from onecat.watch import agent_check

REPO = Path(__file__).resolve().parents[2]


def _agent(answer: bytes | None) -> tuple[int, threading.Event]:
    """A listener on loopback that answers each connection with `answer` (None: accept and
    close at once, as a socket whose service fails)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                if answer is not None:
                    connection.sendall(answer)
        server.close()
    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], stop


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_agent_line_is_heard_and_silence_is_not() -> None:
    port, stop = _agent(b"ready up\n")
    try:
        assert agent_check.answers("127.0.0.1", port) == (True, "ready up")
    finally:
        stop.set()
    port, stop = _agent(None)
    try:
        heard, why = agent_check.answers("127.0.0.1", port)
        assert not heard and why.endswith("closed without a line"), why
    finally:
        stop.set()
    heard, why = agent_check.answers("127.0.0.1", _closed_port())
    assert not heard and "cannot be reached" in why and "refused" in why.lower(), why


def test_the_target_is_node_jsons_address_and_agent_port(tmp_path: Path) -> None:
    node = tmp_path / "node.json"
    node.write_text(json.dumps({"address": "10.0.0.5", "agent_port": 8003, "port": 8000}))
    assert agent_check.target(node) == ("10.0.0.5", 8003)
    for bad in ({"address": "10.0.0.5", "agent_port": 0}, {"address": "", "agent_port": 8003},
                {"address": "10.0.0.5", "agent_port": True}, [1], "x"):
        node.write_text(json.dumps(bad))
        assert agent_check.target(node) is None, bad
    node.write_text("{not json")
    assert agent_check.target(node) is None
    assert agent_check.target(tmp_path / "absent.json") is None


def test_heard_after_a_socket_restart_holds_nothing(tmp_path: Path) -> None:
    answers = iter([(False, "the gateway agent on 10.0.0.5:8003 closed without a line"),
                    (True, "up")])
    restarts = []
    lines = agent_check.keep_heard(lambda: next(answers), lambda: restarts.append(1) or True,
                                   tmp_path / "hold")
    assert restarts == [1] and not (tmp_path / "hold").exists()
    assert lines == ["the gateway agent on 10.0.0.5:8003 closed without a line: its socket was "
                     "restarted and it answers again"]


def test_unheard_after_the_restart_fails_closed_then_lifts(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    silent = (False, "the gateway agent on 10.0.0.5:8003 cannot be reached: Connection refused")
    lines = agent_check.keep_heard(lambda: silent, lambda: True, hold)
    assert "the node fails closed" in lines[0] and str(hold) in lines[0]
    assert hold.read_text().startswith("the gateway agent on 10.0.0.5:8003 cannot be reached")
    assert hold.stat().st_mode & 0o777 == 0o644  # the engine's container reads it
    # The next look: still unheard, one line that says so; then heard, and the hold is lifted.
    assert agent_check.keep_heard(lambda: silent, lambda: False, hold) == [
        "still failing closed: the gateway agent on 10.0.0.5:8003 cannot be reached: "
        "Connection refused (its socket could not be restarted)"]
    assert agent_check.keep_heard(lambda: (True, "up"), lambda: True, hold) == [
        "the gateway agent answers again: the health check's hold is lifted"]
    assert not hold.exists()
    assert agent_check.keep_heard(lambda: (True, "up"), lambda: True, hold) == []


def test_without_a_guard_folder_it_says_the_node_cannot_fail_closed(tmp_path: Path) -> None:
    lines = agent_check.keep_heard(lambda: (False, "silent"), lambda: True,
                                   tmp_path / "absent" / "hold")
    assert len(lines) == 1 and "cannot fail closed" in lines[0], lines


def test_the_watchs_hold_file_is_in_the_folder_the_engine_mounts() -> None:
    watch = yaml.safe_load((REPO / "roles/watch/defaults/main.yml").read_text())
    tasks = yaml.safe_load((REPO / "roles/vllm_serve/tasks/validate.yml").read_text())
    guard_dirs = [task["ansible.builtin.set_fact"]["__vllm_serve_guard_dir"] for task in tasks
                  if "__vllm_serve_guard_dir" in (task.get("ansible.builtin.set_fact") or {})]
    assert guard_dirs and watch["watch_guard_hold_file"] == f"{guard_dirs[0]}/hold"


def test_the_fleets_floor_keeps_an_unheard_node_serving_and_says_so(tmp_path: Path) -> None:
    # Every node's agent silent at once (a bad unit, a firewall rule pushed everywhere): the
    # last nodes in rotation stay in rather than empty the gateway.
    hold = tmp_path / "hold"
    asked: list[str] = []

    def floor(why: str) -> tuple[bool, str]:
        asked.append(why)
        return False, "the fleet's floor keeps n1 in: 0 other node(s) in rotation"

    lines = agent_check.keep_heard(lambda: (False, "silent"), lambda: True, hold, floor)
    assert asked == ["silent"] and not hold.exists()
    assert lines == ["silent: kept in by the fleet's floor (the fleet's floor keeps n1 in: 0 "
                     "other node(s) in rotation): its drains cannot reach the gateway until "
                     "the agent answers"]
    # Granted: the hold is written; a hold already there is not asked about again.
    assert "fails closed" in agent_check.keep_heard(lambda: (False, "silent"), lambda: True,
                                                    hold, lambda why: (True, "2 stay"))[0]
    assert agent_check.keep_heard(lambda: (False, "silent"), lambda: True, hold,
                                  floor)[0].startswith("still failing closed")
    assert asked == ["silent"]
