"""The gateway with a real HAProxy (Debian's package) on loopback in front of stand-in engines.

What the gateway role renders is what runs here: the role's template, HAProxy's own
validation (`haproxy -c`), its runtime API through onecat.gateway.runtime, the keys map
from onecat.gateway.keys and the servers from onecat.gateway.backends.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "standin_engine"))

from adhoc_module import run_module  # noqa: E402
from gateway_agent import agent_command  # noqa: E402
from gateway_harness import (  # noqa: E402
    Agent,
    Engine,
    base_vars,
    gateway_vars,
    haproxy,
    master_answer,
    render,
    wait_until,
)
from gateway_load import LoadClient, failed, stream_completion, truncated  # noqa: E402

from onecat.gateway import backends, keys  # noqa: E402
from onecat.gateway.runtime import (  # noqa: E402
    Runtime,
    RuntimeApiError,
    ServerStatus,
    old_workers,
    save_server_state,
    servers,
)

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy is not installed (bootstrap.sh installs it)")

MODEL = "standin-model"
# Streams long enough to be in flight while a node is drained: 40 tokens x 15 ms.
SLOW = {"STANDIN_DECODE_MS": "15"}
TOKENS = 40


@pytest.fixture
def engines(tmp_path: Path):
    started = [Engine(tmp_path, name, env=SLOW).start()
               for name in ("node-a", "node-b", "node-c")]
    yield started
    for engine in started:
        engine.stop()


def get(url: str, key: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def all_up(runtime: Runtime, count: int) -> bool:
    up = [s for s in servers(runtime.stat(), "onecat_nodes") if s.status.startswith("UP")]
    return len(up) == count


def test_rendered_config_validates_and_spreads_requests(tmp_path: Path, engines) -> None:
    variables = gateway_vars(tmp_path, engines)
    text = render(variables)
    assert "balance leastconn" in text and "retry-on conn-failure empty-response" in text
    assert text.count("maxconn 8") == 3  # from --max-num-seqs
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3)), runtime.stat()
        outcomes = [stream_completion(gw.url, MODEL, max_tokens=4) for _ in range(12)]
        assert not failed(outcomes) and not truncated(outcomes, 4)
        served = {s.server: s.total for s in servers(runtime.stat(), "onecat_nodes")}
        assert all(count > 0 for count in served.values()), served
        status, metrics = get(gw.admin_url + "/metrics")
        assert status == 200 and "haproxy_server_current_sessions" in metrics
        assert get(gw.admin_url + "/stats")[0] == 200


def test_drain_wait_restart_ready_loses_no_stream(tmp_path: Path, engines) -> None:
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        load = LoadClient(gw.url, MODEL, workers=6, max_tokens=TOKENS, max_seconds=60).start()
        try:
            time.sleep(1.0)
            for engine in engines:  # every node, one after another, as the serve stage does
                before = runtime.status("onecat_nodes", engine.name)
                runtime.set_state("onecat_nodes", engine.name, "drain")
                idle, left, waited = runtime.wait_idle("onecat_nodes", engine.name, timeout=30)
                assert idle, f"{engine.name} still has {left} session(s) after {waited:.1f} s"
                engine.stop()
                engine.start()
                runtime.set_state("onecat_nodes", engine.name, "ready")
                assert wait_until(lambda: all_up(runtime, 3), timeout=10), runtime.stat()
                assert before is not None
            time.sleep(1.0)
        finally:
            outcomes = load.stop()
    assert len(outcomes) > 30, len(outcomes)
    assert not failed(outcomes), failed(outcomes)[:3]
    assert not truncated(outcomes, TOKENS), truncated(outcomes, TOKENS)[:3]


def test_restart_without_drain_does_cut_streams(tmp_path: Path, engines) -> None:
    """The control: the load client does see what a drain prevents."""
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        load = LoadClient(gw.url, MODEL, workers=6, max_tokens=TOKENS, max_seconds=30).start()
        try:
            time.sleep(1.0)
            engines[0].process.kill()
            time.sleep(1.0)
        finally:
            outcomes = load.stop()
    assert failed(outcomes) or truncated(outcomes, TOKENS)


def test_failed_gate_keeps_the_node_in_maint_with_its_reason(tmp_path: Path, engines) -> None:
    agents = [Agent(tmp_path / f"agent-{e.name}") for e in engines]
    try:
        variables = gateway_vars(tmp_path, engines, agents)
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all_up(runtime, 3))
            reason = "gate failed: the smoke completion is one token repeated"
            agents[0].say(f"maint down #{reason}")
            runtime.set_state("onecat_nodes", "node-a", "maint")
            status = wait_until(lambda: (s := runtime.status("onecat_nodes", "node-a"))
                                and reason in s.agent and s, timeout=5)
            assert status and status.admin == "maint", runtime.status("onecat_nodes", "node-a")
            # An operator's `ready` does not bring it back while the node says maint.
            runtime.set_state("onecat_nodes", "node-a", "ready")
            time.sleep(1.0)
            assert runtime.status("onecat_nodes", "node-a").admin == "maint"
            total = runtime.status("onecat_nodes", "node-a").total
            outcomes = [stream_completion(gw.url, MODEL, max_tokens=2) for _ in range(9)]
            assert not failed(outcomes)
            assert runtime.status("onecat_nodes", "node-a").total == total
            # A later gate passes: the node says up, and ready puts it back in rotation.
            agents[0].say("up")
            runtime.set_state("onecat_nodes", "node-a", "ready")
            time.sleep(1.0)
            assert runtime.status("onecat_nodes", "node-a").admin == "ready"
    finally:
        for agent in agents:
            agent.close()


def test_the_roles_agent_readmits_on_every_check_and_keeps_the_deploys_drain(
        tmp_path: Path, engines) -> None:
    """Issue 46: the role's own agent (its unit's command) answers `ready up` on every check
    while the deploy and the watch want the node in, so a maint the node did not ask for (a
    stale server-state file, an answer the gateway missed) is lifted at the next check, even
    with the agent asked only every 5 s; the deploy's drain (deploy-drain, tasks/drain.yml)
    is answered as a drain and is not cancelled by it."""
    folder = tmp_path / "node-a-agent"
    ask = agent_command(tmp_path, folder)
    (folder / "agent-state").write_text("up\n")
    (folder / "watch-state").write_text("up\n")
    agents = [Agent(tmp_path / "agent-node-a", answer=ask),
              *(Agent(tmp_path / f"agent-{e.name}") for e in engines[1:])]
    try:
        variables = gateway_vars(tmp_path, engines, agents, gateway_agent_interval="5s")
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all_up(runtime, 3))

            def node_a() -> ServerStatus:
                return runtime.status("onecat_nodes", "node-a")

            runtime.set_state("onecat_nodes", "node-a", "maint")
            assert node_a().admin == "maint"
            # Nothing but the agent's `ready` lifts it (HAProxy's last_agt shows only "up").
            assert wait_until(lambda: node_a().admin == "ready", timeout=15), node_a()

            (folder / "deploy-drain").write_text("drain #onecat-deploy: a restart\n")
            runtime.set_state("onecat_nodes", "node-a", "drain")
            # HAProxy marks a state its agent set: "DRAIN (agent)".
            assert wait_until(lambda: node_a().status == "DRAIN (agent)", timeout=15), node_a()
            time.sleep(6)  # one more agent check
            assert node_a().admin == "drain", node_a()
            (folder / "deploy-drain").unlink()
            assert wait_until(lambda: node_a().admin == "ready", timeout=15), node_a()
    finally:
        for agent in agents:
            agent.close()


def test_the_agent_answer_needs_its_newline(tmp_path: Path, engines) -> None:
    """Why roles/gateway/tasks/node.yml ends the answer with a newline. HAProxy 2.6 looks for
    the end of the agent's line up to a NUL it does not guarantee in its reused check buffer
    (src/tcpcheck.c, tcpcheck_agent_expect_reply): without the newline the answer is ignored
    ("Ignoring incomplete line from agent") or applied, run by run, depending on what the buffer
    holds past it (both seen here). With the newline it is applied, every time."""
    agents = [Agent(tmp_path / f"agent-{e.name}") for e in engines]
    reason = ("fleet-a: the server at http://127.0.0.1:8000 failed its smoke test: the smoke "
              "completion is one token repeated ('!' x 16: '!!!!'), the garbage/NaN symptom")
    try:
        variables = gateway_vars(tmp_path, engines, agents)
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all_up(runtime, 3))
            agents[0].state_file.write_text(f"maint down #{reason}")
            seen = wait_until(lambda: (s := runtime.status("onecat_nodes", "node-a"))
                              and ("incomplete line" in s.agent or "smoke test" in s.agent)
                              and s, timeout=15)
            print(f"without the newline HAProxy said: {seen and seen.agent!r}")
            agents[0].state_file.write_text("up\n")
            assert wait_until(lambda: (s := runtime.status("onecat_nodes", "node-a"))
                              and s.agent.endswith("up") and s, timeout=15)
            agents[0].state_file.write_text(f"maint down #{reason}\n")
            # HAProxy shows the agent's text a moment before the state it sets: wait for both.
            status = wait_until(lambda: (s := runtime.status("onecat_nodes", "node-a"))
                                and "smoke test" in s.agent and s.admin == "maint" and s,
                                timeout=15)
            assert status and status.admin == "maint", runtime.status("onecat_nodes", "node-a")
    finally:
        for agent in agents:
            agent.close()


def test_client_keys_rate_limit_and_the_engine_key(tmp_path: Path) -> None:
    engine_key = "engine-secret-0123456789"
    alice, batch = "sk-alice-0123456789abcdef", "sk-batch-0123456789abcdef"
    engines = [Engine(tmp_path, n, args=["--api-key", engine_key]).start() for n in ("k1", "k2")]
    try:
        key_file = tmp_path / "keys"
        key_file.write_text(f"alice {alice}\nbatch {batch} 3\n")
        client_keys = keys.parse_keys(key_file.read_text())
        key_map = tmp_path / "keys.map"
        key_map.write_text(keys.render_key_map(client_keys))
        assert "sk-alice" not in key_map.read_text()
        # Checked on an authenticated route, so a wrong engine key shows as DOWN.
        variables = gateway_vars(tmp_path, engines, gateway_key_map_path=str(key_map),
                                 gateway_rate_limits=keys.rate_limits(client_keys),
                                 gateway_engine_api_key=engine_key,
                                 gateway_check_path="/v1/models")
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all_up(runtime, 2)), runtime.stat()
            assert stream_completion(gw.url, MODEL, 2, key=alice).status == 200
            # The scheme is case-insensitive (RFC 7235 2.1); only the token is the key.
            lower = {"authorization": f"bearer {alice}"}
            assert stream_completion(gw.url, MODEL, 2, headers=lower).status == 200
            assert stream_completion(gw.url, MODEL, 2, headers={
                "authorization": f"Basic {alice}"}).status == 401
            assert stream_completion(gw.url, MODEL, 2).status == 401
            assert stream_completion(gw.url, MODEL, 2, key="sk-wrong-" + "0" * 16).status == 401
            statuses = [stream_completion(gw.url, MODEL, 2, key=batch).status
                        for _ in range(5)]
            assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:], statuses
            assert stream_completion(gw.url, MODEL, 2, key=alice).status == 200
        (tmp_path / "w").mkdir()
        wrong = gateway_vars(tmp_path / "w", engines, gateway_check_path="/v1/models",
                             gateway_engine_api_key="not-the-engine-key-000")
        with haproxy(tmp_path / "w", wrong) as gw:
            runtime = Runtime(gw.socket)
            time.sleep(1.5)
            assert not any(s.status.startswith("UP")
                           for s in servers(runtime.stat(), "onecat_nodes"))
    finally:
        for engine in engines:
            engine.stop()


def test_bad_certificate_is_refused_and_the_running_gateway_keeps_serving(
        tmp_path: Path, engines) -> None:
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        bad_pem = tmp_path / "bad.pem"
        bad_pem.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n"
                           "-----END CERTIFICATE-----\n")
        candidate = render({**variables, "gateway_tls_pem_path": str(bad_pem)})
        check = gw.check(candidate)
        assert check.returncode != 0 and "bad.pem" in (check.stdout + check.stderr)
        assert stream_completion(gw.url, MODEL, 2).status == 200


def test_malformed_key_file_is_refused_with_line_numbers() -> None:
    with pytest.raises(keys.KeyFileError) as error:
        keys.parse_keys("alice short\nbob sk-0123456789abcdef0 many\n", "keys.txt")
    assert "keys.txt line 1" in str(error.value) and "keys.txt line 2" in str(error.value)
    assert "short" not in str(error.value).replace("short key", "")


def test_hitless_reload_keeps_streams_in_flight(tmp_path: Path, engines) -> None:
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        load = LoadClient(gw.url, MODEL, workers=4, max_tokens=TOKENS, max_seconds=30).start()
        try:
            time.sleep(0.8)
            gw.config.write_text(render({**variables, "gateway_retries": 2}))
            gw.reload()
            time.sleep(1.5)
        finally:
            outcomes = load.stop()
    assert len(outcomes) > 8
    assert not failed(outcomes) and not truncated(outcomes, TOKENS)


def test_a_drain_waits_for_the_streams_old_workers_keep_after_a_reload(tmp_path: Path,
                                                                       engines) -> None:
    # After a reload the old worker keeps its streams (up to hard-stop-after) while the admin
    # socket reaches the new worker, whose scur for the node is 0: a drain that reads only
    # the admin socket returns at once and the restart cuts those streams. The master CLI
    # (show proc, @!PID show stat) counts them.
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        # Streams of 6 s (400 tokens x 15 ms): still running in the old worker when the module,
        # started on busy cores, reads it (200 tokens ended first on a loaded CI machine).
        load = LoadClient(gw.url, MODEL, workers=3, max_tokens=400, max_requests=3,
                          max_seconds=45).start()
        try:
            time.sleep(0.8)
            gw.reload()
            assert wait_until(lambda: old_workers(master_answer(gw.master, "show proc")), 10)
            busy = [e.name for e in engines
                    if Runtime(gw.socket, master=gw.master).old_sessions(e.name) > 0]
            assert busy, "no stream in flight in the old worker"
            node = busy[0]
            runtime.set_state("onecat_nodes", node, "drain")
            # The new worker alone says idle, though a stream is still running there.
            assert runtime.wait_idle("onecat_nodes", node, timeout=0)[0]
            # The drain the serve and driver/runtime stages run (the gateway_server module).
            drained = run_module("gateway_server", {
                "socket": gw.socket, "master_socket": gw.master, "server": node,
                "state": "drain", "wait_idle": 30})
            assert drained["sessions"] == 0 and drained["waited"] > 0.3, drained
        finally:
            outcomes = load.stop()
    assert not failed(outcomes) and not truncated(outcomes, 400)


def test_the_module_names_the_last_node_in_rotation(tmp_path: Path, engines) -> None:
    # What the driver and runtime stages read before a reboot or a Docker restart
    # (roles/gateway/tasks/hold.yml): with node-a in maint and node-b draining, node-c is the
    # last server HAProxy sends requests to, and taking it out would answer every client 503.
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        runtime.set_state("onecat_nodes", "node-a", "maint")
        runtime.set_state("onecat_nodes", "node-b", "drain")
        query = {"socket": gw.socket, "master_socket": gw.master, "state": "query"}
        last = run_module("gateway_server", {**query, "server": "node-c"})
        assert last["last_in_rotation"] is True, last
        assert last["rotation"] == {"node-a": "MAINT", "node-b": "DRAIN", "node-c": "UP"}, last
        assert last["changed"] is False and last["admin"] == "ready"
        assert run_module("gateway_server", {**query, "server": "node-b"})[
            "last_in_rotation"] is False
        runtime.set_state("onecat_nodes", "node-b", "ready")
        assert run_module("gateway_server", {**query, "server": "node-c"})[
            "last_in_rotation"] is False
        # A stopped engine: HAProxy's health check takes node-b down, node-c is the last again.
        engines[1].stop()
        assert wait_until(lambda: runtime.status("onecat_nodes", "node-b").status
                          .startswith("DOWN"), timeout=20), runtime.stat()
        assert run_module("gateway_server", {**query, "server": "node-c"})[
            "last_in_rotation"] is True


def test_a_reload_keeps_drain_and_maint_and_the_config_still_wins(tmp_path: Path,
                                                                    engines) -> None:
    # Without server-state-file a reload forgets every state set through the runtime API:
    # a drained or held node would take traffic again. With it (saved right before the
    # reload, as the role's handler does) they stay; a node the new configuration holds out
    # ("disabled") stays out whatever the saved state says.
    variables = gateway_vars(tmp_path, engines)
    a, b, c = (e.name for e in engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        runtime.set_state("onecat_nodes", a, "drain")
        runtime.set_state("onecat_nodes", b, "maint")
        held = [{**s, "enabled": False, "reason": "gate failed"} if s["name"] == c else s
                for s in variables["gateway_servers"]]
        gw.config.write_text(render({**variables, "gateway_servers": held}))
        assert save_server_state(gw.socket, variables["gateway_server_state_file"]) == 3
        gw.reload()

        def states() -> dict[str, str]:
            return {s.server: s.admin for s in servers(Runtime(gw.socket).stat(), "onecat_nodes")}

        assert wait_until(lambda: states() == {a: "drain", b: "maint", c: "maint"}), states()
        assert oct(Path(variables["gateway_server_state_file"]).stat().st_mode & 0o777) == "0o600"


def _workers(master_pid: int) -> list[int]:
    """The master's children: its workers (the current one, and old ones after a reload)."""
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    return [int(pid) for pid in children]


def _logged(sink: socket.socket, seconds: float = 5.0) -> list[str]:
    """The syslog lines that reached the jail's /dev/log within `seconds` (after the first)."""
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    sink.settimeout(seconds)
    while time.monotonic() < deadline:
        try:
            lines.append(sink.recv(65536).decode(errors="replace"))
        except TimeoutError:
            break
        sink.settimeout(0.3)
    return lines


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
def test_a_jailed_gateway_logs_and_a_reload_keeps_a_drained_node_drained(
        tmp_path: Path, engines) -> None:
    # gateway_chroot: each worker runs in the jail; its `log /dev/log` is the jail's dev/log
    # (the distribution's unit binds the host's /dev/log there; here a syslog socket of the
    # test's own stands in), and the server-state file, outside the jail, is still loaded by
    # the new process of a reload: it reads it before its chroot.
    jail = tmp_path / "jail"
    (jail / "dev").mkdir(parents=True)
    variables = gateway_vars(tmp_path, engines, gateway_chroot=str(jail))
    assert not str(variables["gateway_server_state_file"]).startswith(str(jail))
    text = render(variables)
    assert f"\n    chroot {jail}\n" in text
    candidate = tmp_path / "candidate.cfg"
    candidate.write_text(text)
    checked = subprocess.run(["haproxy", "-c", "-f", str(candidate)], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    a = engines[0].name
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sink:
        sink.bind(str(jail / "dev" / "log"))
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all_up(runtime, 3)), runtime.stat()
            first = _workers(gw.process.pid)
            assert [os.readlink(f"/proc/{pid}/root") for pid in first] == [str(jail)]
            outcomes = [stream_completion(gw.url, MODEL, max_tokens=4) for _ in range(3)]
            assert not failed(outcomes)
            assert any("onecat onecat_nodes/" in line for line in _logged(sink)), "no log"

            runtime.set_state("onecat_nodes", a, "drain")
            assert save_server_state(gw.socket, variables["gateway_server_state_file"]) == 3
            gw.reload()

            def new_worker() -> list[int]:
                return [pid for pid in _workers(gw.process.pid) if pid not in first]

            assert wait_until(new_worker), "no new worker after the reload"
            assert [os.readlink(f"/proc/{pid}/root") for pid in new_worker()] == [str(jail)]

            def states() -> dict[str, str]:
                try:
                    rows = Runtime(gw.socket).stat()
                except (OSError, RuntimeApiError):
                    return {}
                return {s.server: s.admin for s in servers(rows, "onecat_nodes")}

            assert wait_until(lambda: states().get(a) == "drain"), states()
            # The drained node takes no new request; the new, jailed worker still logs.
            before = {s.server: s.total for s in servers(Runtime(gw.socket).stat(),
                                                          "onecat_nodes")}
            outcomes = [stream_completion(gw.url, MODEL, max_tokens=4) for _ in range(6)]
            assert not failed(outcomes)
            after = {s.server: s.total for s in servers(Runtime(gw.socket).stat(),
                                                         "onecat_nodes")}
            assert after[a] == before[a], (before, after)
            assert any("onecat onecat_nodes/" in line for line in _logged(sink)), "no log"
            assert states()[a] == "drain"


def test_stat_rows_parse(tmp_path: Path, engines) -> None:
    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        rows = Runtime(gw.socket).stat()
        assert {"pxname", "svname", "scur", "stot", "status"} <= set(rows[0])
        json.dumps(rows)


def test_bench_through_the_gateway_and_the_report_shows_each_nodes_share(
        tmp_path: Path, engines) -> None:
    from onecat.cli import main as onecat

    variables = gateway_vars(tmp_path, engines)
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all_up(runtime, 3))
        run = tmp_path / "run"
        status = onecat(["bench", "--url", gw.url, "--out", str(run / "gateway"),
                         "--concurrency", "1,3", "--input-len", "16", "--output-len", "4",
                         "--requests-per-level", "6", "--warmup", "2", "--quiet",
                         "--gateway-stats", gw.admin_url + "/stats"])
        assert status == 0
    share = json.loads((run / "gateway" / "gateway-share.json").read_text())
    assert sorted(share["servers"]) == ["node-a", "node-b", "node-c"]
    # The timed requests only: not the probe, the /tokenize calls that built the prompts or the
    # warm-up (the stand-in counts those too, so a share taken too early would be larger).
    assert share["timed_requests"] == 12
    assert share["total"] == 12, share
    assert all(row["requests"] > 0 for row in share["servers"].values()), share
    assert onecat(["report", str(run), "--no-plots"]) == 0
    report = (run / "report.md").read_text()
    assert "## Through the gateway" in report and "| node-b | " in report
    # A run through the gateway is the fleet as one endpoint, not a node.
    assert "No node was benchmarked on its own in this run" in report
    assert "## Results per node" not in report and "| gateway |" not in report


def test_hostile_node_states_render_a_config_haproxy_accepts_with_no_line_added(
        tmp_path: Path) -> None:
    """What a node writes into node.json cannot add a server or a frontend to the gateway
    (checked with the real `haproxy -c`), and a NUL in a reason cannot block it."""
    good = {"serving": True, "in_rotation": True, "address": "127.0.0.1", "port": 8000,
            "max_num_seqs": 8}
    selection = backends.select({
        "node-a": good,
        "node-b": {**good, "address": "127.0.0.2\n    server evil 203.0.113.9:80\n"
                                      "frontend stolen\n    bind 127.0.0.1:9"},
        "node-c": {**good, "in_rotation": False, "reason": "held\x00 out\n    server x 1.2.3.4:1"},
    })
    variables = {**base_vars(tmp_path),
                 "gateway_servers": [s.as_dict() for s in selection.servers]}
    candidate = tmp_path / "candidate.cfg"
    candidate.write_text(render(variables))
    text = candidate.read_text()
    checked = subprocess.run(["haproxy", "-c", "-f", str(candidate)], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    servers_lines = [line.split()[1] for line in text.splitlines()
                     if line.strip().startswith("server ")]
    assert servers_lines == ["node-a", "node-c"], text
    assert "evil" not in text and "stolen" not in text and "\x00" not in text
    assert "neither an IP address nor a host name" in selection.excluded["node-b"]
