"""The fleet's floor end to end (issue 46): a real HAProxy on loopback with two stand-in engines in
rotation, the real lease server reading that HAProxy's rotation from its read-only socket (level
user, as the role's unit runs it), and the watch as its timer runs it (the NVML double, `--act
--floor-url`). A node whose power brake lasts (a cause that does not make answers wrong) stays
in while its leaving would break the floor, says so in its verdict, its metrics and its journal
lines, and drains once the floor lets it go; a lost GPU drains whatever the floor says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import nvml_double_harness as double
from gateway_harness import Engine, gateway_vars, haproxy, wait_until
from lease_harness import LeaseServer, token

from onecat.gateway.runtime import Runtime, in_rotation, rotation

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "haproxy"], capture_output=True, check=False).returncode != 0,
    reason="haproxy is not installed (bootstrap.sh installs it)")


def _look(libdir: Path, scenario: str, folder: Path, lease_url: str,
          node: str) -> tuple[int, str, dict]:
    """One look of `node`'s watch, as its timer runs it, asking the floor at `lease_url`."""
    (folder / "textfile").mkdir(parents=True, exist_ok=True)
    token_file = folder / "lease.token"
    token_file.write_text(token(node) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(folder / "state"),
         "--verdict-file", str(folder / "verdict.json"),
         "--metrics-file", str(folder / "textfile" / "onecat.prom"),
         "--kernel-log", str(double.kernel_log(scenario)), "--act", "--agent-file",
         str(folder / "watch-state"), "--interval", "60s", "--floor-url", lease_url,
         "--floor-token-file", str(token_file), "--node", node],
        env=double.double_env(libdir, scenario), capture_output=True, text=True, check=False,
        cwd=double.REPO, timeout=120)
    return (done.returncode, done.stdout + done.stderr,
            json.loads((folder / "verdict.json").read_text()))


def _braked_for_six_minutes(folder: Path) -> None:
    """Five earlier braked minutes, as earlier looks recorded them (the look adds the sixth)."""
    history_file = folder / "state" / "throttle-history.json"
    history = json.loads(history_file.read_text())
    (_, by_cause), = history["minutes"].items()
    minute = by_cause["power_brake"][0]
    by_cause["power_brake"] = [minute - 5, minute - 4, minute - 3, minute - 2, minute - 1]
    history_file.write_text(json.dumps(history))


def test_a_power_brake_on_the_last_nodes_keeps_them_in_a_lost_gpu_does_not(
        libdir: Path, tmp_path: Path) -> None:
    engines = [Engine(tmp_path, name).start() for name in ("node-a", "node-b")]
    try:
        variables = gateway_vars(tmp_path, engines)
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)

            def serving() -> set[str]:
                states = rotation(runtime.stat(), "onecat_nodes")
                return {name for name, status in states.items() if in_rotation(status)}

            assert wait_until(lambda: serving() == {"node-a", "node-b"}), serving()
            (tmp_path / "lease").mkdir()
            (tmp_path / "lease-1").mkdir()
            server = LeaseServer(tmp_path / "lease", extra=(
                "--min-in-rotation", "2", "--admin-socket", gw.vars["gateway_read_socket"])).start()
            try:
                a = tmp_path / "node-a"
                assert _look(libdir, "power_brake", a, server.url, "node-a")[0] == 1
                _braked_for_six_minutes(a)
                _, out, verdict = _look(libdir, "power_brake", a, server.url, "node-a")
                assert verdict["mode"] == "in" and verdict["floor_held"] is True, out
                assert verdict["reason"].startswith(
                    "kept in by the fleet's floor: the fleet's floor keeps node-a in: 1 other "
                    "node(s) in rotation (node-b), the floor is 2")
                assert "watch: in -> in: kept in:" in out
                assert (a / "watch-state").read_text() == "up\n"
                metrics = (a / "textfile" / "onecat.prom").read_text()
                assert "onecat_node_floor_held 1" in metrics
                assert "onecat_node_in_rotation 1" in metrics
                assert "refused out node=node-a" in server.events()

                # An operator's repair order for node-b, in rotation: refused by the floor,
                # nothing changed on the node; with --ignore-floor (onecat repair --all) it
                # goes through.
                b = tmp_path / "node-b"
                order = [sys.executable, "-m", "onecat.watch", "--repair", "--state-dir",
                         str(b / "state"), "--act", "--agent-file", str(b / "watch-state"),
                         "--repair-unit", "onecat-no-such-runner.service", "--repair-dir",
                         str(b / "repair"), "--floor-url", server.url, "--floor-token-file",
                         str(a / "node-b.token"), "--node", "node-b"]
                (a / "node-b.token").write_text(token("node-b") + "\n")
                refused = subprocess.run(order, capture_output=True, text=True, check=False,
                                         cwd=double.REPO, timeout=60)
                assert refused.returncode == 1, refused.stdout + refused.stderr
                assert "the repair of" in refused.stderr and "is refused: the fleet's floor " \
                    "keeps node-b in" in refused.stderr and "onecat repair --all" in refused.stderr
                assert not (b / "state" / "action.json").exists()
                forced = subprocess.run([*order, "--ignore-floor"], capture_output=True,
                                        text=True, check=False, cwd=double.REPO, timeout=60)
                assert "in -> repairing: requested by an operator" in forced.stdout, forced
                (b / "state" / "action.json").unlink()

                # A lost GPU makes answers wrong: it drains whatever the floor says.
                assert _look(libdir, "healthy_pcie_pair", b, server.url, "node-b")[0] == 0
                asked = server.events().count("out node=node-b")
                _, out, verdict = _look(libdir, "gpu_lost", b, server.url, "node-b")
                assert verdict["mode"] == "draining" and not verdict["floor_held"], out
                assert server.events().count("out node=node-b") == asked  # not even asked
            finally:
                server.kill()
            # A floor of one: node-a may go while node-b serves.
            server = LeaseServer(tmp_path / "lease-1", extra=(
                "--min-in-rotation", "1", "--admin-socket", gw.vars["gateway_read_socket"])).start()
            try:
                _, out, verdict = _look(libdir, "power_brake", a, server.url, "node-a")
                assert verdict["mode"] == "draining" and not verdict["floor_held"], out
                assert "granted out node=node-a" in server.events()
                assert "onecat_node_floor_held 0" in (a / "textfile" / "onecat.prom").read_text()
            finally:
                server.kill()
    finally:
        for engine in engines:
            engine.stop()


def test_the_floor_holds_at_a_second_gateway_read_from_its_stats_page(tmp_path: Path) -> None:
    """Issue 46: with two gateways, the lease server reads the second one's stats page (its
    onecat_admin front end, as --other-gateway-stats does). The second gateway has node-b in
    maint (its path to node-b is down, say): node-a may not leave, though the first gateway
    would keep node-b; once the second sees node-b again, node-a may."""
    from gateway_harness import Recorder, base_vars

    from onecat.gateway import backends
    from onecat.repair import lease_server

    nodes = {name: Recorder() for name in ("node-a", "node-b")}
    try:
        states = {n: {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                      "port": r.port, "max_num_seqs": 4, "agent_port": 0}
                  for n, r in nodes.items()}
        folders = [tmp_path / "gw-1", tmp_path / "gw-2"]
        variables = []
        for folder in folders:
            folder.mkdir()
            variables.append({**base_vars(folder), "gateway_servers": [
                s.as_dict() for s in backends.select(states).servers]})
        with haproxy(folders[0], variables[0]) as first, \
                haproxy(folders[1], variables[1]) as second:
            for gw in (first, second):
                runtime = Runtime(gw.socket)
                assert wait_until(lambda runtime=runtime: all(
                    in_rotation(s) for s in rotation(runtime.stat(), "onecat_nodes").values()))
            Runtime(second.socket).set_state("onecat_nodes", "node-b", "maint")
            service = lease_server.Service(
                str(tmp_path / "leases.json"), b"s" * 32, 1, min_ttl_s=1,
                log=lambda line: None, min_in_rotation=1,
                rotation=lease_server.haproxy_rotation(first.socket, "onecat_nodes"),
                other_gateways=[("gw-2", lease_server.stats_rotation(
                    second.admin_url + "/stats", "onecat_nodes"))])
            body = json.dumps({"node": "node-a", "reason": "hot", "ttl_s": 1}).encode()
            bearer = f"Bearer {lease_server.token_for(b's' * 32, 'node-a')}"
            status, answer = service.handle("POST", "/v1/out", bearer, body)
            assert status == 409 and answer["why"].endswith("at gateway gw-2"), answer
            Runtime(second.socket).set_state("onecat_nodes", "node-b", "ready")
            status, answer = service.handle("POST", "/v1/out", bearer, body)
            assert status == 200, answer
    finally:
        for node in nodes.values():
            node.close()
