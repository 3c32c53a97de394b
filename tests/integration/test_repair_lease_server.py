"""The repair lease server as it runs on the gateway host: the real process on loopback.

`python3 -m onecat.repair.lease_server serve` with a temporary secret and state file, driven
through onecat/repair/lease_client.py (what the node's repair ladder calls) and raw HTTP. The
bound holds across a crash and a restart of the server (the book is on disk), hostile requests
get a status and a short JSON answer, a slow client does not stop the others, and the client
fails closed when nothing (or garbage) answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import jinja2
import pytest

from onecat import validate
from onecat.repair import lease_client, lease_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway_harness import free_port
from lease_harness import SECRET, LeaseServer, token

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(tmp_path):
    started = LeaseServer(tmp_path).start()
    yield started
    started.kill()


def test_one_lease_is_granted_the_second_refused_naming_the_first(server) -> None:
    first = lease_client.take(server.url, "gpu-node-01", token("gpu-node-01"), "reset: Xid 79",
                              600)
    assert first.granted and first.error == "" and first.max_parallel == 1
    assert first.expires == pytest.approx(time.time() + 600, abs=5)
    second = lease_client.take(server.url, "gpu-node-02", token("gpu-node-02"), "reboot", 600)
    assert not second.granted and second.error == "" and second.expires is None
    assert [(h["node"], h["reason"]) for h in second.holders] == [("gpu-node-01", "reset: Xid 79")]
    saved = json.loads(server.state.read_text())
    assert [entry["node"] for entry in saved["leases"]] == ["gpu-node-01"]
    assert server.state.stat().st_mode & 0o777 == 0o600
    log = server.events()
    assert "granted node=gpu-node-01 reason='reset: Xid 79'" in log
    assert "refused node=gpu-node-02 reason='reboot': all 1 place(s) held by gpu-node-01" in log


def test_the_holder_renews_and_a_release_frees_the_place(server) -> None:
    first = lease_client.take(server.url, "n1", token("n1"), "reset", 600)
    renewed = lease_client.take(server.url, "n1", token("n1"), "reset, second try", 1200)
    assert renewed.granted and renewed.expires > first.expires
    assert renewed.holders[0]["since"] == first.holders[0]["since"]
    assert "renewed node=n1 reason='reset, second try'" in server.events()
    assert lease_client.release(server.url, "n1", token("n1")) is True
    assert lease_client.release(server.url, "n1", token("n1")) is False
    assert json.loads(server.state.read_text())["leases"] == []
    assert "released node=n1" in server.events()
    assert lease_client.take(server.url, "n2", token("n2"), "reboot", 600).granted


def test_an_unrenewed_lease_expires_and_frees_the_place(server) -> None:
    assert lease_client.take(server.url, "n1", token("n1"), "reset", 1).granted
    assert not lease_client.take(server.url, "n2", token("n2"), "reset", 1).granted
    time.sleep(1.3)
    assert lease_client.take(server.url, "n2", token("n2"), "reset", 600).granted
    assert "expired node=n1 reason='reset'" in server.events()


def test_the_ttl_is_clamped_to_the_servers_floor_and_a_day(tmp_path) -> None:
    proc = LeaseServer(tmp_path)
    proc.start()
    try:
        answer = lease_client.take(proc.url, "n1", token("n1"), "reset", 10**9)
        assert answer.expires == pytest.approx(time.time() + 86400, abs=5)
    finally:
        proc.kill()


def test_a_crash_and_restart_of_the_server_keeps_the_lease(server) -> None:
    assert lease_client.take(server.url, "n1", token("n1"), "reboot", 600).granted
    server.restart()  # SIGKILL, then a new process on the same state file
    refused = lease_client.take(server.url, "n2", token("n2"), "reset", 600)
    assert not refused.granted and [h["node"] for h in refused.holders] == ["n1"]
    status, listed = server.request("GET", "/v1/leases", auth=token("@admin"))
    assert status == 200 and [h["node"] for h in listed["holders"]] == ["n1"]
    assert "loaded node=n1 reason='reboot'" in server.events()


def test_max_parallel_zero_is_ten_percent_of_the_fleet(tmp_path) -> None:
    proc = LeaseServer(tmp_path, max_parallel=0, fleet_size=25)
    proc.start()
    try:
        granted = [lease_client.take(proc.url, f"n{i}", token(f"n{i}"), "reset", 600).granted
                   for i in range(4)]
        assert granted == [True, True, False, False]
    finally:
        proc.kill()


def test_wrong_tokens_are_401_without_detail(server) -> None:
    body = {"node": "n1", "reason": "reset", "ttl_s": 600}
    for auth in (None, "0" * 64, token("n2"), token("@admin"), token("n1")[:-1], "x" * 64):
        status, answer = server.request("POST", "/v1/lease", body, auth=auth)
        assert (status, answer) == (401, {"error": "unauthorized"}), auth
    status, _ = server.request("POST", "/v1/lease", body, headers={"Authorization":
                                                                   f"Basic {token('n1')}"})
    assert status == 401
    answer = lease_client.take(server.url, "n1", token("n2"), "reset", 600)
    assert not answer.granted and answer.error == "the lease server answered HTTP 401: unauthorized"
    # Another node's token cannot release n1's lease either; the admin token can.
    assert lease_client.take(server.url, "n1", token("n1"), "reset", 600).granted
    assert lease_client.release(server.url, "n1", token("n2")) is None
    assert lease_client.release(server.url, "n1", token("@admin")) is True
    assert "released node=n1 reason='reset' held" in server.events()
    assert "(by the admin token)" in server.events()


def test_the_list_takes_the_admin_token_or_a_node_token_with_its_name(server) -> None:
    assert server.request("GET", "/v1/leases", auth=token("@admin"))[0] == 200
    assert server.request("GET", "/v1/leases", auth=token("n1"),
                          headers={"X-Onecat-Node": "n1"}) == (200, {"holders": [],
                                                                     "max_parallel": 1})
    assert server.request("GET", "/v1/leases", auth=token("n1"))[0] == 401
    assert server.request("GET", "/v1/leases", auth=token("n1"),
                          headers={"X-Onecat-Node": "n2"})[0] == 401


def test_hostile_requests_get_a_status_and_a_short_answer(server) -> None:
    auth = token("n1")
    assert server.request("POST", "/v1/lease", b"x" * 5000, auth=auth)[0] == 413
    assert server.request("POST", "/v1/lease", b"{garbage", auth=auth)[0] == 400
    assert server.request("POST", "/v1/lease", b"\xff\xfe\x00\x01", auth=auth)[0] == 400
    assert server.request("POST", "/v1/lease", b"[1, 2]", auth=auth)[0] == 400
    assert server.request("POST", "/v1/lease", b"[" * 2000 + b"]" * 2000, auth=auth)[0] == 400
    for ttl in (b"NaN", b"Infinity", b'"600"', b"null", b"true"):
        body = b'{"node": "n1", "reason": "r", "ttl_s": ' + ttl + b"}"
        assert server.request("POST", "/v1/lease", body, auth=auth)[0] == 400, ttl
    bad_node = {"node": "n1\nfrontend x", "reason": "r", "ttl_s": 600}
    assert server.request("POST", "/v1/lease", bad_node, auth=auth)[0] == 400
    assert server.request("POST", "/v1/lease", {"node": "n1", "reason": 5, "ttl_s": 600},
                          auth=auth)[0] == 400
    assert server.request("GET", "/v1/lease", auth=auth)[0] == 405
    assert server.request("DELETE", "/v1/leases", auth=auth)[0] == 405
    assert server.request("POST", "/v2/anything", b"{}", auth=auth)[0] == 404
    assert server.request("BREW", "/v1/lease", auth=auth)[0] == 405
    # A reason with escapes and newlines is logged and listed as one printable line.
    hostile = {"node": "n1", "reason": "reset\n\x1b[2J" + "y" * 500, "ttl_s": 600}
    status, answer = server.request("POST", "/v1/lease", hostile, auth=auth)
    assert status == 200 and answer["holders"][0]["reason"] == "reset??[2J" + "y" * 190
    assert "Traceback" not in server.events()
    assert all(line.isprintable() for line in server.events().splitlines())


def test_a_body_announced_over_the_limit_is_refused_without_reading_it(server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/lease HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n"
                     b"Authorization: Bearer " + token("n1").encode() + b"\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413")


def test_a_malformed_request_line_gets_no_traceback(server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01garbage that is not http\r\n\r\n")
        answer = sock.recv(4096)
    # What is not HTTP/1.x is answered as HTTP/0.9 would be: the short JSON body alone.
    assert answer.endswith(b'{"error": "400"}') and b"Traceback" not in answer
    assert server.proc.poll() is None and "Traceback" not in server.events()


def test_a_slow_client_does_not_stop_the_others(server) -> None:
    slow = []
    for _ in range(4):  # headers sent, body promised and never finished
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(b"POST /v1/lease HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n"
                     b"Authorization: Bearer " + token("n9").encode() + b"\r\n\r\n{\"node\"")
        slow.append(sock)
    half = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    half.sendall(b"POST /v1/lease HTTP/1.1\r\nHost: x\r\n")  # headers never end
    slow.append(half)
    try:
        started = time.monotonic()
        answer = lease_client.take(server.url, "n1", token("n1"), "reset", 600, timeout_s=3)
        assert answer.granted, answer.error
        assert lease_client.release(server.url, "n1", token("n1"), timeout_s=3) is True
        assert time.monotonic() - started < 3
    finally:
        for sock in slow:
            sock.close()


def test_a_garbled_state_file_starts_an_empty_book_and_is_kept_aside(tmp_path) -> None:
    proc = LeaseServer(tmp_path)
    proc.state.write_text('{"leases": [{"node": 5}')
    proc.start()
    try:
        assert lease_client.take(proc.url, "n1", token("n1"), "reset", 600).granted
        assert "is garbled: not JSON" in proc.events()
        assert (tmp_path / "leases.json.garbled").read_text() == '{"leases": [{"node": 5}'
    finally:
        proc.kill()


def test_the_token_command_prints_the_nodes_hmac_and_refuses_an_open_secret(tmp_path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "onecat.repair.lease_server", "token",
                               "--secret-file", str(secret), *args], capture_output=True,
                              text=True, cwd=REPO, check=False, timeout=60)

    assert run("--node", "gpu-node-01").stdout == token("gpu-node-01") + "\n"
    assert run("--admin").stdout == token("@admin") + "\n"
    bad = run("--node", "a b")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stdout == ""
    secret.chmod(0o644)
    opened = run("--node", "n1")
    assert opened.returncode == 2 and "chmod 600" in opened.stderr and opened.stdout == ""


# The client's failures: it never raises, the caller fails closed -------------------------


def test_the_client_fails_closed_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    answer = lease_client.take(url, "n1", token("n1"), "reset", 600, timeout_s=2)
    assert not answer.granted and answer.error.startswith("cannot reach the lease server")
    assert "\n" not in answer.error
    assert lease_client.release(url, "n1", token("n1"), timeout_s=2) is None
    for bad_url in ("file:///etc/passwd", "", "not a url", "http://"):
        answer = lease_client.take(bad_url, "n1", token("n1"), "reset", 600)
        assert not answer.granted and answer.error


@contextlib.contextmanager
def answering(reply: bytes | None):
    """A one-shot TCP server that answers `reply` to every connection (None: never answers)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        held = []
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError):
                conn.recv(65536)
                if reply is not None:
                    conn.sendall(reply)
                    conn.close()
                else:
                    held.append(conn)
        for conn in held:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nnot json",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]",
    b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{"granted": true}',
    b'HTTP/1.1 409 Conflict\r\nContent-Length: 16\r\n\r\n{"granted": true',
    b'HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n{"granted": false}',
    b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 302 Found\r\nLocation: http://10.6.6.6/\r\nContent-Length: 2\r\n\r\n{}",
    b"garbage, not http\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{",
    b"",
])
def test_the_client_fails_closed_on_garbage_answers(reply: bytes) -> None:
    with answering(reply) as url:
        answer = lease_client.take(url, "n1", token("n1"), "reset", 600, timeout_s=2)
        assert not answer.granted and answer.error and "\n" not in answer.error
        assert lease_client.release(url, "n1", token("n1"), timeout_s=2) is None


def test_the_client_gives_up_at_its_timeout() -> None:
    with answering(None) as url:
        started = time.monotonic()
        answer = lease_client.take(url, "n1", token("n1"), "reset", 600, timeout_s=0.5)
        assert not answer.granted and "timed out" in answer.error
        assert time.monotonic() - started < 3


# The unit the role installs runs the server -------------------------------------------------


def test_the_roles_unit_runs_the_server_it_describes(tmp_path) -> None:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(REPO / "roles" / "gateway" / "templates")),
        trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["onecat_bare_address"] = validate.bare_address
    env.tests["match"] = lambda value, pattern: re.match(pattern, value) is not None
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    port = free_port()
    unit = env.get_template("onecat-repair-lease.service.j2").render(
        gateway_repair_lease_max_parallel=0, __fleet_size=30, gateway_repair_lease_port=port,
        gateway_repair_lease_address="127.0.0.1", gateway_repair_lease_install_dir=str(REPO),
        gateway_repair_lease_python=sys.executable,
        __gateway_repair_lease_state_file=str(tmp_path / "leases.json"),
        __gateway_repair_lease_secret_file=str(secret), gateway_fleet_min_in_rotation="25%",
        __gateway_repair_lease_retiring_file=str(tmp_path / "secret.retiring"),
        gateway_read_socket=str(tmp_path / "read.sock"), gateway_repair_lease_user="onecat-lease",
        gateway_repair_lease_state_dir=str(tmp_path), gateway_group="haproxy",
        __gateway_other_stats=[{"name": "gw-2", "host": "192.0.2.11", "port": 8404}])
    lines = dict(line.split("=", 1) for line in unit.splitlines()
                 if "=" in line and not line.startswith("#"))
    assert lines["Restart"] == "on-failure" and lines["Environment"] == f"PYTHONPATH={REPO}"
    # Not root, and sandboxed: it writes only its folder, holds no capability (port >= 1024).
    assert lines["User"] == lines["Group"] == "onecat-lease"
    assert lines["SupplementaryGroups"] == "haproxy"
    assert lines["ProtectSystem"] == "strict" and lines["ReadWritePaths"] == str(tmp_path)
    assert lines["CapabilityBoundingSet"] == "" and lines["NoNewPrivileges"] == "yes"
    argv = shlex.split(lines["ExecStart"])
    assert f"127.0.0.1:{port}" in argv
    assert argv[argv.index("--min-in-rotation") + 1] == "25%"
    assert argv[argv.index("--other-gateway-stats") + 1] == "http://192.0.2.11:8404/stats"
    # The floor reads HAProxy's read-only socket, not the admin one.
    assert argv[argv.index("--admin-socket") + 1] == str(tmp_path / "read.sock")
    assert argv[argv.index("--retiring-secret-file") + 1] == str(tmp_path / "secret.retiring")
    proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        answer = lease_client.take(url, "n1", token("n1"), "reset", 600)
        while answer.error and time.monotonic() < deadline:
            time.sleep(0.1)
            answer = lease_client.take(url, "n1", token("n1"), "reset", 600)
        assert answer.granted and answer.max_parallel == 3, answer
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_book_that_cannot_be_saved_grants_nothing(tmp_path) -> None:
    # Fail closed: a lease the server could not write down would be lost by a restart.
    def full_disk(path: str, text: str) -> None:
        raise OSError(28, "No space left on device")

    lines: list[str] = []
    service = lease_server.Service(str(tmp_path / "leases.json"), SECRET.encode(), 1,
                                   log=lines.append, save=full_disk)
    body = json.dumps({"node": "n1", "reason": "reset", "ttl_s": 600}).encode()
    status, answer = service.handle("POST", "/v1/lease", f"Bearer {token('n1')}", body)
    assert status == 503 and answer["granted"] is False and answer["holders"] == []
    assert service.book.leases == ()
    assert any("cannot save the state file" in line for line in lines)
