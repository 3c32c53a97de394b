"""playbooks/status.yml through real Ansible: a node that answers, one that does not, and the
newest rollout's reason for a node it held (what `onecat status` prints); and each gateway's
own view, from a real HAProxy on loopback (the role's rendered configuration), flagged where it
disagrees with the node's watch."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from gateway_harness import base_vars, haproxy, wait_until  # noqa: E402

from onecat.gateway.runtime import Runtime, rotation  # noqa: E402


def test_status_names_unreachable_and_held_nodes(tmp_path: Path) -> None:
    state = tmp_path / "gateway-state"
    state.mkdir()
    (state / "node.json").write_text(json.dumps({"serving": True, "in_rotation": True}))
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"verdict": "healthy", "mode": "in", "findings": []}))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "ansible_become": False, "watch_verdict_file": str(verdict),
             "onecat_gateway_state_dir": str(state)}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"v100": {"hosts": {
        "node-a": local,
        # Held at health by the last rollout: nothing of the watch or the serve stage on it.
        "node-c": {**local, "watch_verdict_file": str(tmp_path / "none.json"),
                   "onecat_gateway_state_dir": str(tmp_path / "none")},
        # Nothing listens on port 1: refused at once, as a node that is down.
        "node-b": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                   "ansible_host_key_checking": False, "ansible_ssh_timeout": 5},
    }}}}}))
    rollouts = tmp_path / "results"
    (rollouts / "20261204T1400-abc").mkdir(parents=True)
    (rollouts / "20261204T1400-abc" / "rollout.json").write_text(json.dumps({
        "run_id": "20261204T1400-abc", "hosts": [
            {"host": "node-a", "stage": "serve", "status": "ok", "reasons": []},
            {"host": "node-c", "stage": "health", "status": "held at health",
             "reasons": ["GPU 1 has 1 uncorrectable ECC error since the driver loaded"]}]}))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(REPO / "playbooks" / "status.yml"), "-e", f"onecat_results_dir={tmp_path}",
         "-e", f"onecat_status_rollouts_dir={rollouts}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    # node-b does not answer: the run says so (exit 4) and the table still comes.
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
    document = json.loads((tmp_path / "status.json").read_text())
    assert document["node-b"] == {"reached": False}
    # No gateway group in this inventory: the gateway play skips, no gateway entry.
    assert json.loads((tmp_path / "gateways.json").read_text()) == {}
    table = subprocess.run(
        [sys.executable, "-m", "onecat.watch.status", str(tmp_path / "status.json"),
         "--results", str(rollouts)], cwd=REPO, capture_output=True, text=True, check=True,
        timeout=60).stdout
    rows = {line.split()[0]: line for line in table.splitlines()[1:] if line.startswith("node-")}
    assert rows["node-a"].split()[1:5] == ["healthy", "in", "yes", "in"], table
    assert rows["node-b"].split()[1] == "unreachable", table
    assert "held at health" in rows["node-c"] and "not installed (the rollout stopped" \
        in rows["node-c"] and "1 uncorrectable ECC error" in rows["node-c"], table
    assert "(held at a stage: as the newest rollout, 20261204T1400-abc, left them)" in table
    assert "(no gateway asked: the inventory has no gateway group" in table, table


def _playbook(inventory: Path, results: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(REPO / "playbooks" / "status.yml"), "-e", f"onecat_results_dir={results}",
         "-e", f"onecat_status_rollouts_dir={results}", *options],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def health() -> Iterator[int]:
    """An engine's /health on loopback that answers 200: HAProxy's check takes it UP."""
    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(shutil.which("haproxy") is None,
                    reason="haproxy is not installed (bootstrap.sh installs it)")
def test_status_shows_each_gateways_own_view_and_flags_disagreement(tmp_path: Path,
                                                                    health: int) -> None:
    """node-a: its watch says in, HAProxy has it in maint (set through the runtime API, as an
    operator or a stage that never readmitted it would): flagged. node-d: its watch holds it out,
    HAProxy still has it UP (its agent is not heard): flagged. node-c: held at health, disabled in
    the configuration, MAINT: they agree. A gateway whose HAProxy is not running and one that
    does not answer are entries that say so; the play does not fail for them."""
    in_rotation = json.dumps({"serving": True, "in_rotation": True})
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "ansible_become": False}
    hosts = {}
    for name, mode in (("node-a", "in"), ("node-d", "held")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "node.json").write_text(in_rotation)
        (tmp_path / name / "verdict.json").write_text(json.dumps(
            {"verdict": "healthy" if mode == "in" else "unhealthy", "mode": mode,
             "findings": []}))
        hosts[name] = {**local, "watch_verdict_file": str(tmp_path / name / "verdict.json"),
                       "onecat_gateway_state_dir": str(tmp_path / name)}
    # A verdict file that is not JSON: the node answered, its row says what is wrong.
    (tmp_path / "node-x").mkdir()
    (tmp_path / "node-x" / "verdict.json").write_text("{not json")
    hosts["node-x"] = {**local, "watch_verdict_file": str(tmp_path / "node-x" / "verdict.json"),
                       "onecat_gateway_state_dir": str(tmp_path / "node-x")}
    hosts["node-c"] = {**local, "watch_verdict_file": str(tmp_path / "none.json"),
                       "onecat_gateway_state_dir": str(tmp_path / "none")}
    variables = base_vars(tmp_path)
    variables["gateway_servers"] = [
        {"name": name, "address": "127.0.0.1", "port": health, "maxconn": 4,
         "enabled": name != "node-c", "reason": "held at health" if name == "node-c" else "",
         "agent_port": 0} for name in ("node-a", "node-c", "node-d")]
    gateways = {
        "gw1": {**local, "onecat_gateway_admin_socket": variables["gateway_admin_socket"]},
        # No HAProxy runs there: no admin socket.
        "gw-idle": {**local, "onecat_gateway_admin_socket": str(tmp_path / "absent.sock")},
        # HAProxy stopped and left its socket file behind: the socket refuses.
        "gw-stale": {**local, "onecat_gateway_admin_socket": str(tmp_path / "stale.sock")},
        # Nothing listens on port 1: a gateway that does not answer.
        "gw-gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                    "ansible_host_key_checking": False, "ansible_ssh_timeout": 5}}
    (tmp_path / "stale.sock").write_text("")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "v100": {"hosts": hosts}, "gateway": {"hosts": gateways}}}}))
    results = tmp_path / "results"
    (results / "20261204T1400-abc").mkdir(parents=True)
    (results / "20261204T1400-abc" / "rollout.json").write_text(json.dumps({
        "run_id": "20261204T1400-abc", "hosts": [
            {"host": "node-c", "stage": "health", "status": "held at health",
             "reasons": ["GPU 1 has 1 uncorrectable ECC error since the driver loaded"]}]}))
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: rotation(runtime.stat(), "onecat_nodes") == {
            "node-a": "UP", "node-c": "MAINT", "node-d": "UP"}), runtime.stat()
        runtime.set_state("onecat_nodes", "node-a", "maint")
        done = _playbook(inventory, results)
        # gw-gone does not answer (exit 4); the table still comes, with every gateway.
        assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
        seen = json.loads((results / "gateways.json").read_text())
        assert seen["gw-gone"] == {"reached": False}, seen
        assert "absent.sock is absent" in seen["gw-idle"]["error"], seen
        assert seen["gw-idle"]["servers"] == {}
        assert "does not answer" in seen["gw-stale"]["error"], seen
        assert seen["gw1"]["error"] == "" and {
            name: server["status"] for name, server in seen["gw1"]["servers"].items()} == {
            "node-a": "MAINT", "node-c": "MAINT", "node-d": "UP"}, seen
        assert all("agent" in server for server in seen["gw1"]["servers"].values()), seen
        # Read only, and so in check mode: HAProxy's states are as they were.
        checked = _playbook(inventory, results, "--check")
        assert checked.returncode == 4, checked.stdout[-3000:] + checked.stderr[-2000:]
        assert rotation(runtime.stat(), "onecat_nodes") == {
            "node-a": "MAINT", "node-c": "MAINT", "node-d": "UP"}
    recap = {line.split()[0]: line for line in done.stdout.split("PLAY RECAP")[1].splitlines()
             if " : " in line}
    assert all("failed=0" in recap[gw] for gw in ("gw1", "gw-idle", "gw-stale")), recap
    assert "unreachable=1" in recap["gw-gone"] and "failed=0" in recap["node-x"], recap
    text = subprocess.run(
        [sys.executable, "-m", "onecat.watch.status", str(results / "status.json"),
         "--results", str(results)],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60).stdout
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("node-")}
    assert rows["node-a"].split()[1:5] == ["healthy", "in", "yes", "in"], text
    assert "gw1 MAINT, 3 not read" in rows["node-a"], text
    assert "gw1 UP, 3 not read" in rows["node-d"], text
    assert "gw1 MAINT, 3 not read" in rows["node-c"], text
    assert "gw1 absent, 3 not read" in rows["node-x"], text
    assert "its verdict file or node.json is not JSON" in rows["node-x"], text
    assert "gateway gw1: 1 of 3 node(s) in rotation" in text, text
    assert "gateway gw-gone: HAProxy's view not read: did not answer now" in text, text
    flags = [line for line in text.splitlines() if line.startswith("!! ")]
    assert flags == [
        "!! node-a: watch: in, gateway gw1: MAINT — out of rotation at the gateway while its "
        "watch says in",
        "!! node-d: watch: held, gateway gw1: UP — in rotation at the gateway while its watch "
        "holds it out (the gateway does not hear its agent)"], text
