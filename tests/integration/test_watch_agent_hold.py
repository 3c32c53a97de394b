"""A node whose gateway agent cannot be heard fails closed (issue 49 item 1), end to end: the
watch as its timer runs it (the NVML double, `--act --agent-node-file --guard-hold-file`) finds
nothing answering on its agent's address and port, cannot restart the socket (no systemd
here, as a socket systemd refuses to restart), and writes the key guard's hold file; the
stand-in engine, loading the serve role's guard, answers the gateway's health check 503 with the
reason, and a real HAProxy takes the node out on it while the other node serves every request.
Once the agent answers, the next look lifts the hold and the node is back."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import nvml_double_harness as double
from gateway_harness import Agent, Engine, free_port, gateway_vars, haproxy, wait_until
from lease_harness import LeaseServer, token

from onecat.gateway.runtime import Runtime, rotation

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "haproxy"], capture_output=True, check=False).returncode != 0,
    reason="haproxy is not installed (bootstrap.sh installs it)")

REPO = Path(__file__).resolve().parents[2]
KEY = "k" * 32
GUARD = {"PYTHONPATH": f"{REPO / 'roles' / 'vllm_serve' / 'files'}:"
                       f"{REPO / 'tests' / 'standin_engine'}",
         "VLLM_API_KEY": KEY, "ONECAT_METRICS_KEY": "m" * 32}


def _look(libdir: Path, folder: Path, node_file: Path, hold: Path,
          floor_url: str = "") -> str:
    """One look of the node's watch, as its timer runs it, with the agent check (and the
    fleet's floor at `floor_url`, asked as node-a)."""
    (folder / "textfile").mkdir(parents=True, exist_ok=True)
    floor = []
    if floor_url:
        (folder / "lease.token").write_text(token("node-a") + "\n")
        floor = ["--floor-url", floor_url, "--floor-token-file", str(folder / "lease.token"),
                 "--node", "node-a"]
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(folder / "state"),
         "--verdict-file", str(folder / "verdict.json"),
         "--metrics-file", str(folder / "textfile" / "onecat.prom"),
         "--kernel-log", str(double.kernel_log("healthy_pcie_pair")), "--act",
         "--agent-file", str(folder / "watch-state"), "--interval", "60s",
         "--agent-node-file", str(node_file), "--guard-hold-file", str(hold),
         "--agent-socket-unit", "onecat-test-absent.socket", *floor],
        env=double.double_env(libdir, "healthy_pcie_pair"), capture_output=True, text=True,
        check=False, cwd=REPO, timeout=120)
    return done.stdout + done.stderr


def _guarded(tmp_path: Path, hold: Path) -> list[Engine]:
    """node-a and node-b, stand-in engines that load the serve role's key guard; node-a's
    guard reads `hold`."""
    return [Engine(tmp_path, name, env={**GUARD, "ONECAT_GUARD_HOLD_FILE": str(
                hold if name == "node-a" else tmp_path / f"hold-{name}")},
                   args=["--middleware", "onecat_guard.Guard"])
            for name in ("node-a", "node-b")]


def _start(engines: list[Engine]) -> None:
    for engine in engines:
        # /health open for the harness's keyless readiness poll: the hold answers the
        # gateway's check whether the path needs the key or not (test_guard_hold.py).
        engine.start(env={"ONECAT_GUARD_OPEN_PATHS": "/health"})


def test_an_unheard_agent_takes_the_node_out_on_the_health_check_until_it_answers(
        libdir: Path, tmp_path: Path) -> None:
    hold = tmp_path / "guard-a" / "hold"
    hold.parent.mkdir()
    engines = _guarded(tmp_path, hold)
    agent = Agent(tmp_path / "agent-state")
    try:
        _start(engines)
        variables = gateway_vars(tmp_path, engines, gateway_engine_api_key=KEY)
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)

            def states() -> dict[str, str]:
                return rotation(runtime.stat(), "onecat_nodes")

            assert wait_until(lambda: all(s.startswith("UP") for s in states().values())), \
                states()
            node_file = tmp_path / "node-a.json"
            node_file.write_text(json.dumps({"address": "127.0.0.1", "agent_port": free_port()}))
            said = _look(libdir, tmp_path / "watch-a", node_file, hold)
            assert "the node fails closed" in said, said[-3000:]
            assert "could not be restarted" in hold.read_text(), hold.read_text()
            assert wait_until(lambda: states()["node-a"].startswith("DOWN"), timeout=15), \
                states()
            assert states()["node-b"].startswith("UP"), states()
            for _ in range(6):  # every request reaches node-b
                request = urllib.request.Request(
                    gw.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
                with urllib.request.urlopen(request, timeout=10) as answer:
                    assert answer.status == 200
            # The agent answers again: the next look lifts the hold, the check passes.
            node_file.write_text(json.dumps({"address": "127.0.0.1", "agent_port": agent.port}))
            said = _look(libdir, tmp_path / "watch-a", node_file, hold)
            assert "the health check's hold is lifted" in said, said[-3000:]
            assert not hold.exists()
            assert wait_until(lambda: states()["node-a"].startswith("UP"), timeout=15), \
                states()
    finally:
        agent.close()
        for engine in engines:
            engine.stop()


def test_the_fleets_floor_keeps_an_unheard_node_serving(libdir: Path, tmp_path: Path) -> None:
    """Every node's agent silent at once must not empty the gateway: an agent nobody hears does
    not make answers wrong, so the watch asks the fleet's floor (the real lease server reading
    HAProxy's read-only socket, a floor of two) before it holds the node out; refused, node-a
    keeps serving and the journal says why."""
    hold = tmp_path / "guard-a" / "hold"
    hold.parent.mkdir()
    engines = _guarded(tmp_path, hold)
    try:
        _start(engines)
        variables = gateway_vars(tmp_path, engines, gateway_engine_api_key=KEY)
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all(
                s.startswith("UP") for s in rotation(runtime.stat(), "onecat_nodes").values()))
            (tmp_path / "lease").mkdir()
            server = LeaseServer(tmp_path / "lease", extra=(
                "--min-in-rotation", "2", "--admin-socket",
                gw.vars["gateway_read_socket"])).start()
            try:
                node_file = tmp_path / "node-a.json"
                node_file.write_text(json.dumps({"address": "127.0.0.1",
                                                 "agent_port": free_port()}))
                said = _look(libdir, tmp_path / "watch-a", node_file, hold, server.url)
                assert "kept in by the fleet's floor" in said, said[-3000:]
                assert not hold.exists()
                assert "refused out node=node-a reason='the gateway cannot hear its agent" in \
                    server.events()
            finally:
                server.kill()
            assert rotation(runtime.stat(), "onecat_nodes")["node-a"].startswith("UP")
    finally:
        for engine in engines:
            engine.stop()
