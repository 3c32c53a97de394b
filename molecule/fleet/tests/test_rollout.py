"""The fleet rollout, in order: first rollout, a broken upgrade, a good upgrade, a re-run.

fleet-a (healthy PCIe pair) is the canary, fleet-b (healthy NVLink pair) the next batch and
the gateway (HAProxy on :8000, its own server on :8001), fleet-c (uncorrectable ECC on GPU 1)
is held out by the health stage every time. During both upgrades a load client on the
controller streams completions through the gateway: no request may fail or be cut.
The tests depend on each other's order, as the rollouts of a real fleet do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import testinfra
from conftest import LOADED_MODULE, PROJECT, boot_start, driver_userspace, read_lock, wait_booted

sys.path.insert(0, str(PROJECT / "tests"))
from gateway_harness import wait_until
from gateway_load import LoadClient, failed, stream_completion, truncated, ttft_ms
from prometheus_api import firing, notifications, notified, start_receiver

from onecat.gateway.runtime import parse_stat

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
SITE = "- ansible.builtin.import_playbook: @PROJECT@/site.yml"
BROKEN = json.dumps({"vllm_serve_upgrade": True,
                     "vllm_serve_image_env": {"STANDIN_BROKEN": "1"}})
# A good new image: the same engine with another version string.
GOOD_ENV = json.dumps({"vllm_serve_image_env": {"VLLM_SM70_NVFP4_TURBOMIND": "1",
                                                "STANDIN_VERSION": "0.11.1+standin"}})
MODEL = "qwen25-7b-nvfp4"
LOAD_TOKENS = 24
PROBE_LOG = "/var/tmp/onecat-probe.log"
# The node's own key (every path of a node behind the gateway needs it).
KEY_HEADER = ('-H "Authorization: Bearer $(sed -n s/^VLLM_API_KEY=//p /etc/onecat/vllm.env)"')
# A bounded probe: one /health request every 0.5 s for at most 20 minutes.
PROBE = (
    "nohup sh -c 'k=$(sed -n s/^VLLM_API_KEY=//p /etc/onecat/vllm.env); "
    "for i in $(seq 1 2400); do "
    "if curl -fsS -m 2 -o /dev/null -H \"Authorization: Bearer $k\" http://127.0.0.1:8001/health; "
    "then echo ok; else echo FAIL; fi "
    f">> {PROBE_LOG}; [ -e /var/tmp/onecat-probe.stop ] && break; sleep 0.5; done' "
    ">/dev/null 2>&1 &"
)

# Header of the drain the serve role runs right before a restart (roles/gateway/tasks/drain.yml).
DRAIN_TASK = "TASK [gateway : Drain the node at the gateway"


def rollout(results: str) -> dict:
    summary = json.loads((EPHEMERAL / "results" / results / "rollout.json").read_text())
    return {row["host"]: row for row in summary["hosts"]}


def node(name: str):
    """A testinfra handle on one node (these tests run once, not once per host)."""
    return testinfra.get_host(
        f"ansible://{name}", ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"]
    )


def node_address(name: str) -> str:
    """A node's address on the scenario's Docker network (what the other nodes reach)."""
    return subprocess.run(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
         name], capture_output=True, text=True, check=True).stdout.split()[0]


def gateway_url() -> str:
    return f"http://{node_address('fleet-b')}:8000"


def client_key() -> str:
    """The gateway's client key, generated on the controller by the gateway stage (closed by
    default: `onecat <key>` in secrets/gateway-client-keys)."""
    return (EPHEMERAL / "secrets" / "gateway-client-keys").read_text().split()[1]


def http_status(probe, url: str, key: str = "") -> int:
    """HTTP status of a GET sent from the node `probe` (0: nothing answered)."""
    auth = f"-H 'Authorization: Bearer {key}' " if key else ""
    out = probe.run(f"curl -s -m 5 -o /dev/null -w '%{{http_code}}' {auth}'{url}'").stdout
    return int(out.strip() or 0)


def gateway_servers() -> dict[str, dict[str, str]]:
    """The gateway's server rows (HAProxy's stats CSV on its localhost admin port)."""
    csv_text = node("fleet-b").check_output("curl -fsS 'http://127.0.0.1:8404/stats;csv'")
    return {r["svname"]: r for r in parse_stat(csv_text)
            if r.get("pxname") == "onecat_nodes" and r["svname"] not in ("FRONTEND", "BACKEND")}


def wait_for_servers(predicate, timeout: float = 15.0) -> dict[str, dict[str, str]]:
    """The server rows once `predicate(rows)` holds (agent and health checks run every 2 s)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = gateway_servers()
        if predicate(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def start_load(workers: int = 3, max_seconds: int = 900) -> LoadClient:
    """Clients streaming completions through the gateway with the client key, until stopped."""
    return LoadClient(gateway_url(), MODEL, key=client_key(), workers=workers,
                      max_tokens=LOAD_TOKENS, max_requests=20_000, max_seconds=max_seconds).start()


def assert_streams_whole(outcomes) -> None:
    """No stream failed (an error, a refused or reset connection) and none was cut short."""
    assert not failed(outcomes), failed(outcomes)[:3]
    assert not truncated(outcomes, LOAD_TOKENS), truncated(outcomes, LOAD_TOKENS)[:3]


def under_load(run_playbook, *args: str) -> tuple:
    """Run site.yml while 3 clients stream through the gateway; 5 s of load before it (the
    TTFT before the run, about 20 streams)."""
    load = start_load(max_seconds=1500)
    time.sleep(5)
    started = time.monotonic()
    run = run_playbook(SITE, *args)
    ended = time.monotonic()
    time.sleep(3)
    outcomes = load.stop()
    before = [o for o in outcomes if o.started < started]
    during = [o for o in outcomes if started <= o.started < ended]
    return run, outcomes, before, during


def report_load(label: str, outcomes, before, during) -> None:
    print(f"\n{label}: {len(outcomes)} streamed requests through the gateway, "
          f"{len(failed(outcomes))} failed, {len(truncated(outcomes, LOAD_TOKENS))} truncated; "
          f"TTFT before p50 {ttft_ms(before)['p50']:.0f} ms p99 {ttft_ms(before)['p99']:.0f} ms "
          f"(n={len(before)}), during p50 {ttft_ms(during)['p50']:.0f} ms "
          f"p99 {ttft_ms(during)['p99']:.0f} ms (n={len(during)})")


def test_first_rollout_holds_out_the_ecc_node_and_serves_the_others(run_playbook):
    results = str(EPHEMERAL / "results" / "first")
    run = run_playbook(SITE, "--tags", "all,bench", "-e", f"onecat_results_dir={results}")
    print(f"\nfirst rollout, 3 nodes (one held), with benchmark: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-4000:]
    assert run.recap("fleet-c")["failed"] == 1
    assert run.recap("fleet-a")["failed"] == 0
    assert run.recap("fleet-b")["failed"] == 0
    rows = rollout("first")
    assert rows["fleet-c"]["status"] == "held at health"
    assert any("uncorrectable ECC" in reason for reason in rows["fleet-c"]["reasons"]), rows
    assert rows["fleet-a"]["status"] == rows["fleet-b"]["status"] == "ok"
    assert rows["fleet-a"]["serving"] and rows["fleet-b"]["serving"]
    locked = read_lock()["engine_image"]["image_id"]
    assert rows["fleet-a"]["image"] == rows["fleet-b"]["image"] == locked
    # The benchmark ran on the serving nodes and the fleet report covers them.
    for name in ("fleet-a", "fleet-b"):
        level = json.loads((Path(results) / name / "bench-c4.json").read_text())
        assert level["completed"] == 8 and level["failed"] == 0
        assert level["output_throughput"] > 0
    # Both serving nodes burned in under load before the gateway sent them users; fleet-c,
    # held at health, never served.
    for name in ("fleet-a", "fleet-b"):
        burnin = json.loads((Path(results) / name / "burnin.json").read_text())
        assert burnin["admitted"] and burnin["verdict"] == "healthy", burnin["findings"]
        assert burnin["load"]["completed"] > 0 and burnin["load"]["failed"] == 0
        assert len(burnin["series"]) >= 5
    assert "## Burn-in" in (Path(results) / "report.md").read_text()
    assert not (Path(results) / "fleet-c").exists()
    report = (Path(results) / "report.md").read_text()
    assert "fleet-a" in report and "fleet-b" in report
    # The gateway fronts exactly the two serving nodes; fleet-c never passed a gate.
    assert rows["fleet-a"]["in_rotation"] and rows["fleet-b"]["in_rotation"]
    servers = wait_for_servers(lambda rows: all(r["status"].startswith("UP")
                                                for r in rows.values()))
    assert sorted(servers) == ["fleet-a", "fleet-b"], servers
    assert all(r["status"].startswith("UP") for r in servers.values()), servers
    assert stream_completion(gateway_url(), MODEL, max_tokens=8, key=client_key()).tokens == 8
    # Closed by default: the one port the fleet exposes answers only to the client key.
    keys_file = EPHEMERAL / "secrets" / "gateway-client-keys"
    assert oct(keys_file.stat().st_mode & 0o777) == "0o600"
    assert http_status(node("fleet-c"), gateway_url() + "/v1/models") == 401
    assert http_status(node("fleet-c"), gateway_url() + "/v1/models", client_key()) == 200
    # The nodes publish on every address for the gateway, so they share one generated key:
    # from another node, nothing answers without it; the gateway sends it.
    fleet_key = (EPHEMERAL / "secrets" / "engine-api-key")
    assert oct(fleet_key.stat().st_mode & 0o777) == "0o600"
    key = fleet_key.read_text().strip()
    assert len(key) == 43, len(key)
    for name, port in (("fleet-a", 8000), ("fleet-b", 8001)):
        env = node(name).check_output("cat /etc/onecat/vllm.env")
        assert f"VLLM_API_KEY={key}" in env.splitlines(), name
        url = f"http://{node_address(name)}:{port}"
        for path in ("/health", "/v1/models", "/tokenize", "/metrics"):
            assert http_status(node("fleet-c"), url + path) == 401, (name, path)
        assert http_status(node("fleet-c"), url + "/v1/models", key) == 200, name


def test_gateway_refuses_a_malformed_key_file_and_keeps_running(run_playbook, tmp_path):
    b = node("fleet-b")
    config = b.check_output("sha256sum /etc/haproxy/haproxy.cfg")
    keys = tmp_path / "keys"
    keys.write_text("alice sk-alice-0123456789abcdef\nbob too-short\n")
    keys.chmod(0o600)
    gateway = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/gateway.yml"
    run = run_playbook(gateway, "-e", f"onecat_gateway_keys_file={keys}")
    assert run.rc != 0
    flat = " ".join(run.output.split())
    assert "the client key file is refused" in flat and "line 2" in flat, flat[-2000:]
    assert "sk-alice" not in run.output
    assert b.check_output("sha256sum /etc/haproxy/haproxy.cfg") == config
    assert stream_completion(gateway_url(), MODEL, max_tokens=4, key=client_key()).status == 200


def test_broken_upgrade_rolls_the_canary_back_and_never_touches_b(run_playbook):
    b = node("fleet-b")
    b.run(f"rm -f {PROBE_LOG} /var/tmp/onecat-probe.stop")
    unit_b = b.file("/etc/systemd/system/vllm.service").content_string
    lock_before = read_lock()
    b.run(PROBE)
    results = str(EPHEMERAL / "results" / "upgrade")
    run, outcomes, before, during = under_load(run_playbook, "-e", BROKEN, "-e",
                                               f"onecat_results_dir={results}")
    print(f"\nbroken upgrade, canary rolled back: {run.seconds:.0f} s")
    report_load("broken upgrade", outcomes, before, during)
    b.run("touch /var/tmp/onecat-probe.stop")
    assert run.rc == 2, run.output[-4000:]
    flat = " ".join(run.output.split())
    assert "the smoke completion has degenerated" in flat
    rows = rollout("upgrade")
    assert rows["fleet-a"]["rolled_back"] is True
    assert rows["fleet-a"]["serving"] is True
    assert rows["fleet-b"]["status"] == "untouched at serve"
    assert "rollout stopped before this batch" in rows["fleet-b"]["reasons"][0]
    assert read_lock() == lock_before
    # fleet-b kept serving throughout: every probe answered, and its unit was not touched.
    samples = b.file(PROBE_LOG).content_string.split()
    assert len(samples) >= 10, samples
    assert "FAIL" not in samples
    assert b.file("/etc/systemd/system/vllm.service").content_string == unit_b
    # The canary serves the old image again, but stays out of rotation with its reason.
    assert node("fleet-a").run(f"curl -fsS {KEY_HEADER} http://127.0.0.1:8000/health").rc == 0
    assert rows["fleet-a"]["in_rotation"] is False
    servers = wait_for_servers(lambda rows: "smoke" in rows["fleet-a"]["last_agt"])
    assert servers["fleet-a"]["status"].startswith("MAINT"), servers["fleet-a"]
    assert "smoke" in servers["fleet-a"]["last_agt"], servers["fleet-a"]
    assert servers["fleet-b"]["status"].startswith("UP")
    # Clients saw nothing of it.
    assert len(during) >= 10, len(during)
    assert_streams_whole(outcomes)


FLEET_KEY = EPHEMERAL / "secrets" / "engine-api-key"  # onecat_fleet_key_file (group_vars)


def test_good_upgrade_with_a_key_rotation_drains_each_node_once_and_no_stream_fails(
        run_playbook):
    """A good upgrade that also rotates the fleet key (-e onecat_fleet_key_rotate=true; one
    rollout proves both, each node restarting once): each node restarts (drained) with the new
    image, accepting the old key and a new one while the gateway still sends the old one; the
    gateway then sends the new key. The next test's rollout retires the old key."""
    lock_before = read_lock()
    old = FLEET_KEY.read_text().strip()
    results = str(EPHEMERAL / "results" / "good-upgrade")
    run, outcomes, before, during = under_load(
        run_playbook, "-e", GOOD_ENV, "-e", "vllm_serve_upgrade=true",
        "-e", "onecat_fleet_key_rotate=true", "-e", f"onecat_results_dir={results}")
    print(f"\ngood upgrade and key rotation, canary then batch, drained at the gateway: "
          f"{run.seconds:.0f} s")
    report_load("good upgrade", outcomes, before, during)
    assert run.rc == 2, run.output[-4000:]  # fleet-c is still held out
    rows = rollout("good-upgrade")
    locked = read_lock()["engine_image"]["image_id"]
    assert locked != lock_before["engine_image"]["image_id"]
    assert rows["fleet-a"]["image"] == rows["fleet-b"]["image"] == locked
    assert rows["fleet-a"]["in_rotation"] and rows["fleet-b"]["in_rotation"]
    servers = wait_for_servers(lambda rows: all(r["status"].startswith("UP")
                                                for r in rows.values()))
    assert all(r["status"].startswith("UP") for r in servers.values()), servers
    # Both nodes restarted under load, each drained right before its restart; the drains made
    # it invisible to the clients.
    assert run.output.count(DRAIN_TASK) == 2, run.output[-4000:]
    assert len(during) >= 20, len(during)
    assert_streams_whole(outcomes)
    summary = {"before": ttft_ms(before), "during": ttft_ms(during), "requests": len(outcomes),
               "failed": len(failed(outcomes)), "seconds": round(run.seconds)}
    (Path(results) / "gateway-load.json").write_text(json.dumps(summary, indent=2))
    # The rotation: the old key kept as the retiring key; both keys open every serving node;
    # the gateway sends the new one (and recorded so); neither key is in the run's output.
    new = FLEET_KEY.read_text().strip()
    retiring = Path(f"{FLEET_KEY}.retiring")
    kept = retiring.read_text().strip() if retiring.exists() else ""
    assert new != old and kept == old, "the old key was not kept as the retiring key"
    sent = Path(f"{FLEET_KEY}.sent").read_text().strip()
    assert sent == "sha256:" + hashlib.sha256(new.encode()).hexdigest(), sent
    accepted = {(name, key): engine_status(name, key)
                for name in ("fleet-a", "fleet-b") for key in (old, new)}
    assert all(status == 200 for status in accepted.values()), accepted
    config = node("fleet-b").check_output("cat /etc/haproxy/haproxy.cfg")
    assert f"Bearer {new}" in config and f"Bearer {old}" not in config
    assert old not in run.output and new not in run.output
    ROTATION.update(old=old, new=new)


# The fleet key the good upgrade rotated: the old and the new key, for the retiring rollout.
ROTATION: dict[str, str] = {}


def engine_status(name: str, key: str, path: str = "/v1/models") -> int:
    """HTTP status of the node's own server for `path` with `key` (asked on the node)."""
    port = 8001 if name == "fleet-b" else 8000
    return http_status(node(name), f"http://127.0.0.1:{port}{path}", key)


def test_the_next_rollout_retires_the_old_key_with_no_failed_request(run_playbook):
    """The rollout after the rotation (the good upgrade's) drops the retiring key: each node
    restarts (drained) with the new key alone while clients stream through the gateway. The
    restart changes only the key, so this run skips the burn-in (`onecat_burnin=false`, as an
    operator may): the good upgrade burned each node in on this image a moment ago."""
    assert ROTATION, "the good upgrade's key rotation did not run (run the tests in order)"
    old, new = ROTATION["old"], ROTATION["new"]
    retiring = Path(f"{FLEET_KEY}.retiring")
    load = start_load(max_seconds=1500)
    try:
        time.sleep(3)
        retired = run_playbook(SITE, "-e", GOOD_ENV, "-e", "onecat_burnin=false",
                               "-e", f"onecat_results_dir={EPHEMERAL / 'results' / 'retire'}")
        time.sleep(3)
    finally:
        outcomes = load.stop()
    print(f"\nfleet key retired in {retired.seconds:.0f} s: "
          f"{len(outcomes)} streamed requests, {len(failed(outcomes))} failed")
    # After the next rollout: the old key is refused everywhere, the new one still opens.
    assert retired.rc == 2, retired.output[-4000:]  # fleet-c is still held out
    assert "the previous key is retired" in " ".join(retired.output.split())
    assert not retiring.exists() and old not in retired.output and new not in retired.output
    assert retired.output.count(DRAIN_TASK) == 2, retired.output[-4000:]
    for name in ("fleet-a", "fleet-b"):
        assert engine_status(name, old) == 401 and engine_status(name, old, "/health") == 401
        assert engine_status(name, new) == 200
        assert "ONECAT_RETIRING_API_KEYS" not in node(name).check_output(
            "cat /etc/onecat/vllm.env")
    assert len(outcomes) >= 40, len(outcomes)
    assert_streams_whole(outcomes)


# A host firewall the stages do not manage: raw nftables in fleet-a's own network namespace
# (Debian's default firewall; the node image has it installed, its service off, as a standard
# install does), dropping the node agent's port as a policy of "only what is listed" would.
NFT_DROP_AGENT = (
    "nft add table inet onecat_test && "
    "nft add chain inet onecat_test input "
    "'{ type filter hook input priority 0; policy accept; }' && "
    "nft add rule inet onecat_test input tcp dport 8003 drop")


def agent_status(row: dict[str, str]) -> str:
    """The last agent check's status of a server row ("* " marks one in progress)."""
    return row.get("agent_status", "").removeprefix("* ")


def test_a_node_firewall_that_drops_the_agent_fails_the_gateway_stage_naming_it(run_playbook):
    """HAProxy takes an agent it cannot reach as no answer, not as an error: with fleet-a's
    agent port dropped by nftables, the server stays UP while every drain and hold the agent
    would say is lost (its agent check times out). The gateway stage asks from the gateway
    host, fails naming fleet-a and the port, and keeps the running configuration; once the
    rule is gone the agent is heard again."""
    a, b = node("fleet-a"), node("fleet-b")
    config = b.check_output("sha256sum /etc/haproxy/haproxy.cfg")
    gateway = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/gateway.yml"
    a.check_output(NFT_DROP_AGENT)
    try:
        silent = wait_for_servers(
            lambda rows: agent_status(rows["fleet-a"]) in ("L4TOUT", "L4CON"), timeout=30)
        # No error at the gateway: the agent is not heard and the node still takes traffic.
        assert agent_status(silent["fleet-a"]) in ("L4TOUT", "L4CON"), silent["fleet-a"]
        assert silent["fleet-a"]["status"].startswith("UP"), silent["fleet-a"]
        run = run_playbook(gateway, "-e", "gateway_agent_reach_timeout=3")
    finally:
        a.run("nft delete table inet onecat_test")
    flat = " ".join(run.output.split())
    assert run.rc != 0, flat[-2000:]
    assert "does not answer from here" in flat, flat[-3000:]
    named = flat.split("the node agent of ", 1)[1].split(" does not answer from here", 1)[0]
    assert named == f"fleet-a ({node_address('fleet-a')}:8003)", flat[-3000:]  # fleet-a only
    assert "nft add rule inet filter input ip saddr GATEWAY_IP tcp dport 8003 accept" in flat
    assert b.check_output("sha256sum /etc/haproxy/haproxy.cfg") == config
    heard = wait_for_servers(lambda rows: agent_status(rows["fleet-a"]) == "L7OK", timeout=30)
    assert agent_status(heard["fleet-a"]) == "L7OK", heard["fleet-a"]
    assert stream_completion(gateway_url(), MODEL, max_tokens=4, key=client_key()).status == 200


# The hold the driver and runtime stages take before a reboot or a Docker restart
# (roles/gateway/tasks/hold.yml), and what the node's agent answers once it booted.
HOLD_TASK = "TASK [gateway : Hold the node in maint at every gateway until it is readmitted.]"
BOOTED = "booted since it was admitted"


DOCKER_STARTED = "systemctl show docker -p ExecMainStartTimestampMonotonic"
# fleet-a takes the kernel-module path (host_vars): the modprobe double's loaded version, and
# PID 1's start, which changes when the node (a container) booted again.
PREVIOUS_MODULE = "535.216.01"
# daemon.json without live-restore, as a hand edit leaves it: the runtime stage puts it back
# and restarts Docker, and with it the node's server (vllm.service Requires= docker.service).
DROP_LIVE_RESTORE = ("python3 -c \"import json; p='/etc/docker/daemon.json'; "
                     "d=json.load(open(p)); d.pop('live-restore', None); "
                     "json.dump(d, open(p, 'w'), indent=2)\"")


def test_a_node_that_reboots_stays_out_until_its_gate_and_burn_in(run_playbook):
    """An unplanned reboot (a real restart of fleet-a's container: /run is a tmpfs): the enabled
    unit brings the server back and HAProxy's health check finds it, but the agent answers maint
    until a rollout gates and burns the node in; that rollout readmits it under load.
    The same rollout finds a Docker restart due on fleet-b (its daemon.json lost live-restore),
    the last node in rotation while fleet-a is out: fleet-b is not taken out, it keeps serving
    and is held out of the run with the reason; no client request fails."""
    b = node("fleet-b")
    b_started = b.check_output(DOCKER_STARTED)
    b.check_output(DROP_LIVE_RESTORE)
    subprocess.run(["docker", "restart", "fleet-a"], check=True, timeout=240,
                   capture_output=True)
    wait_booted(node("fleet-a"))
    assert wait_for(lambda: node("fleet-a").run(
        f"curl -fsS -m 2 {KEY_HEADER} http://127.0.0.1:8000/health").rc == 0, timeout=300)
    servers = wait_for_servers(lambda rows: BOOTED in rows["fleet-a"]["last_agt"], timeout=30)
    assert servers["fleet-a"]["status"].startswith("MAINT"), servers["fleet-a"]
    assert BOOTED in servers["fleet-a"]["last_agt"], servers["fleet-a"]
    assert servers["fleet-b"]["status"].startswith("UP"), servers["fleet-b"]

    results = str(EPHEMERAL / "results" / "after-reboot")
    run, outcomes, before, during = under_load(
        run_playbook, "-e", GOOD_ENV, "-e", "onecat_driver_batch=1",
        "-e", f"onecat_results_dir={results}")
    print(f"\nrollout after fleet-a rebooted, a Docker restart due on fleet-b: {run.seconds:.0f} s")
    report_load("after an unplanned reboot", outcomes, before, during)
    assert run.rc == 2, run.output[-4000:]  # fleet-c is still held out, fleet-b too
    flat = " ".join(run.output.split())
    assert "fleet-a: burn-in: it booted since it was admitted" in flat, run.output[-4000:]
    servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"))
    assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]
    assert node("fleet-a").file("/run/onecat-gateway/admitted").exists
    assert rollout("after-reboot")["fleet-a"]["in_rotation"]
    # fleet-b: refused before anything was done to it, so its Docker and daemon.json are as
    # they were, it never left the rotation, and the next run restarts Docker (next test).
    refused = re.search(r"fleet-b is held out of the rollout: fleet-b is the last node in "
                        r"rotation at gateway fleet-b \(([^)]*)\): taking it out \(for: the "
                        r"runtime stage restarts Docker, and its server with it\) would leave "
                        r"every client without a server\.", flat)
    assert refused, run.output[-4000:]
    assert "fleet-a MAINT" in refused.group(1) and "fleet-b UP" in refused.group(1), refused[0]
    assert HOLD_TASK not in run.output, run.output[-4000:]
    assert b.check_output(DOCKER_STARTED) == b_started
    assert "live-restore" not in b.file("/etc/docker/daemon.json").content_string
    assert servers["fleet-b"]["status"].startswith("UP"), servers["fleet-b"]
    assert len(during) >= 20, len(during)
    assert_streams_whole(outcomes)


def test_a_rollout_reboots_one_node_and_restarts_docker_on_the_other_with_no_failed_stream(
        run_playbook):
    """One rollout with two disruptions under load, one batch at a time: the driver stage
    reboots fleet-a itself (its kernel still runs the previous build; its host_vars set
    nvidia_driver_reboot), and the runtime stage restarts Docker on fleet-b (the one refused
    above; the gateway's host too, HAProxy is a host service), which restarts its server. Each
    node is drained and held at the gateway first, then gated, burned in and readmitted in its
    own batch, so fleet-a serves again before fleet-b is taken out and the last-node guard lets
    it go."""
    a, b = node("fleet-a"), node("fleet-b")
    installed = driver_userspace(a)
    a.check_output(f"echo {PREVIOUS_MODULE} > {LOADED_MODULE}")
    a_booted = boot_start(a)
    started = b.check_output(DOCKER_STARTED)
    b.check_output(DROP_LIVE_RESTORE)  # already so: kept for a run of this test alone
    results = str(EPHEMERAL / "results" / "docker-restart")
    run, outcomes, before, during = under_load(
        run_playbook, "-e", GOOD_ENV, "-e", "onecat_driver_batch=1",
        "-e", f"onecat_results_dir={results}")
    print(f"\nrollout rebooting fleet-a and restarting Docker on fleet-b: {run.seconds:.0f} s")
    report_load("reboot + Docker restart", outcomes, before, during)
    assert run.rc == 2, run.output[-4000:]  # fleet-c is still held out
    flat = " ".join(run.output.split())
    # What each hold said (who held a node out when it was not in rotation): the failure's story.
    holds = "\n".join(line for line in run.output.splitlines()
                      if "rotation" in line or "draining" in line)
    # fleet-a: out first, rebooted by the role, into the installed module, then gated and burned in.
    assert re.search(r"TASK \[nvidia_driver : Reboot into the installed driver\.\][^\n]*\n"
                     r"changed: \[fleet-a\]", run.output), run.output[-4000:]
    assert boot_start(a) != a_booted
    assert a.file(LOADED_MODULE).content_string.strip() == installed
    assert "REBOOT PENDING" not in flat, run.output[-4000:]
    assert ("fleet-a: out of rotation at every gateway for: the driver stage reboots it into the "
            "new NVIDIA driver" in flat), holds
    assert "fleet-a: burn-in: the driver stage reboots it" in flat, run.output[-4000:]
    # The reboot left fleet-a as its driver stage last passed it (the stage recorded the stamp
    # it had): the runtime and serve stages trust their own stamps instead of running in full
    # for its sake (roles/stage_stamp, stage_stamp_unchanged).
    assert "fleet-a: the runtime stage is skipped: unchanged" in flat, run.output[-4000:]
    assert "fleet-a: the serve stage is skipped: unchanged" in flat, run.output[-4000:]
    # fleet-b: Docker restarted with live-restore back, after fleet-a was readmitted.
    assert b.check_output(DOCKER_STARTED) != started
    assert '"live-restore": true' in b.file("/etc/docker/daemon.json").content_string
    assert ("fleet-b: out of rotation at every gateway for: the runtime stage restarts Docker"
            in flat), holds
    assert "fleet-b: burn-in: the runtime stage restarts Docker" in flat, run.output[-4000:]
    assert "is the last node in rotation" not in flat, run.output[-4000:]
    # Held once each, fleet-a before fleet-b.
    assert run.output.count(HOLD_TASK) == 2, run.output[-4000:]
    assert flat.index("fleet-a: out of rotation") < flat.index("fleet-b: out of rotation")
    servers = wait_for_servers(lambda rows: all(r["status"].startswith("UP")
                                                for n, r in rows.items() if n != "fleet-c"))
    assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]
    assert servers["fleet-b"]["status"].startswith("UP"), servers["fleet-b"]
    assert rollout("docker-restart")["fleet-a"]["in_rotation"]
    assert rollout("docker-restart")["fleet-b"]["in_rotation"]
    assert len(during) >= 20, len(during)
    assert_streams_whole(outcomes)


def test_rerun_with_nothing_changed_changes_nothing(run_playbook):
    results = str(EPHEMERAL / "results" / "rerun")
    run = run_playbook(SITE, "-e", GOOD_ENV, "-e", f"onecat_results_dir={results}")
    print(f"\nre-run with nothing changed, 3 nodes: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-4000:]  # fleet-c is still held out
    for name in ("fleet-a", "fleet-b", "fleet-c"):
        assert run.recap(name)["changed"] == 0, run.output[-4000:]
    # Nothing restarted, so no node left the rotation, not even for a moment.
    assert DRAIN_TASK not in run.output, run.output[-4000:]
    rows = rollout("rerun")
    assert rows["fleet-a"]["serving"] and rows["fleet-b"]["serving"]


WATCH = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/watch.yml"
# A fatal Xid (48, a double-bit error the driver contained) in fleet-a's kernel log: an event
# an engine restart may clear. (Uncorrectable errors since the driver loaded are a condition:
# the watch holds the node out while they last, no restart; tests/integration/test_watch_look.py.)
XID_LINE = ("[ 9001.000000] NVRM: Xid (PCI:0000:5e:00): 48, pid='<unknown>', name=<unknown>, "
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
            "at partition 6, subpartition 0.\n")
KERNEL_LOG_A = "/opt/onecat-test/nvml/scenarios/kernel-clean.log"  # gpu_health_kernel_log_path
SCENARIO_A = "/opt/onecat-test/nvml/scenarios/healthy_pcie_pair.scenario"
BAD_FILE = "/tmp/onecat-standin-bad"  # fleet-a's STANDIN_BAD_FILE (host_vars), in the container


def watch_verdict(name: str) -> dict:
    return json.loads(node(name).check_output("cat /run/onecat/verdict.json"))


def wait_for(what, timeout: float):
    """`what()` once it is true (or its last value), asked once a second (each is a docker exec)."""
    return wait_until(what, timeout=timeout, interval=1.0)


def onecat_status() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "onecat", "status", "-i", str(Path(
            os.environ["MOLECULE_INVENTORY_FILE"]).parent), "--results",
         str(EPHEMERAL / "results")],
        capture_output=True, text=True, check=False, cwd=PROJECT, timeout=600)
    return done.stdout + done.stderr


def test_watch_drains_a_failing_node_restarts_it_once_then_holds_it_out(run_playbook):
    """The watch on its timer (interval 8 s here): a new fatal Xid on fleet-a
    drains it at the gateway, then its engine restarts once and it comes back; garbage
    answers soon after (within the flap window) hold it out until an operator releases it.
    Clients streaming through the gateway see no failed request throughout. This is the watch
    without the repair ladder (onecat_repair: false): the ladder climbs past the hold
    (test_rollout_repair.py)."""
    a = node("fleet-a")
    run = run_playbook(WATCH, "-e", "onecat_watch_interval=8s", "-e", "onecat_repair=false")
    assert run.rc == 0, run.output[-3000:]
    # The stage's stamp saw the new interval: the timer is rewritten and restarted.
    assert "fleet-a: the watch stage runs: " in " ".join(run.output.split())
    assert "OnUnitActiveSec=8s" in a.check_output("cat /etc/systemd/system/onecat-watch.timer")
    # NVML's Xid events beside the kernel log: the listener runs on the double (the scenario
    # offers Xid events on both GPUs).
    listener = a.run("systemctl is-active onecat-xid-events.service")
    assert listener.stdout.strip() == "active", a.run(
        "journalctl -u onecat-xid-events.service --no-pager -n 20").stdout
    a.check_output(f"cp -p {SCENARIO_A} {SCENARIO_A}.orig")
    a.check_output(f"cp -p {KERNEL_LOG_A} {KERNEL_LOG_A}.orig")
    try:
        _watch_catches_ecc_then_garbage(a)
    finally:
        # Leave fleet-a as the next test expects it, also when an assertion above failed: the
        # scenario and kernel log as they were, an engine without the bad file, the watch's
        # hold lifted.
        a.check_output(f"cp -p {SCENARIO_A}.orig {SCENARIO_A}")
        a.check_output(f"cp -p {KERNEL_LOG_A}.orig {KERNEL_LOG_A}")
        if a.run(f"docker exec vllm test -e {BAD_FILE}").rc == 0:
            a.run("systemctl restart vllm.service")
        wait_for(lambda: a.run(f"curl -fsS {KEY_HEADER} http://127.0.0.1:8000/health").rc == 0,
                 timeout=60)
        a.run("onecat-watch --release")

    # The timer goes back to the scenario's interval; the run after that skips the stage.
    run = run_playbook(WATCH)
    assert run.rc == 0 and run.recap("fleet-a")["changed"] >= 1, run.output[-3000:]
    assert "OnUnitActiveSec=1h" in a.check_output("cat /etc/systemd/system/onecat-watch.timer")
    run = run_playbook(WATCH)
    assert run.rc == 0 and run.recap("fleet-a")["changed"] == 0, run.output[-3000:]
    assert "fleet-a: the watch stage is skipped: unchanged" in " ".join(run.output.split())


def _watch_catches_ecc_then_garbage(a) -> None:
    start_receiver()
    load = start_load()
    try:
        time.sleep(5)
        a.run(f"printf '%s' {shlex.quote(XID_LINE)} >> {KERNEL_LOG_A}")
        injected = time.monotonic()
        drained = wait_for(lambda: gateway_servers()["fleet-a"]["status"].startswith(
            ("DRAIN", "MAINT")), timeout=30)
        print(f"\nwatch: Xid 48 injected, fleet-a out of rotation after "
              f"{time.monotonic() - injected:.1f} s (interval 8 s, agent check 2 s)")
        assert drained, gateway_servers()["fleet-a"]
        assert time.monotonic() - injected <= 2 * 8 + 2 + 2
        back = wait_for(lambda: watch_verdict("fleet-a")["mode"] == "in", timeout=120)
        assert back, watch_verdict("fleet-a")
        journal = a.check_output("journalctl -u onecat-watch.service --no-pager -o cat")
        assert "watch: in -> draining: the kernel logged Xid 48" in journal, journal[-2000:]
        assert "watch: draining -> restarted: engine restarted after" in journal
        assert "watch: restarted -> in: clean after the restart" in journal
        servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"))
        assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]

        # The card goes bad again, now in its answers: within the flap window, no second restart.
        restarts = a.check_output("systemctl show -p NRestarts --value vllm.service")
        container = a.check_output("docker inspect -f '{{.Id}}' vllm")
        garbage_at = time.time()
        a.run(f"docker exec vllm touch {BAD_FILE}")
        held = wait_for(lambda: watch_verdict("fleet-a")["mode"] == "held", timeout=60)
        assert held, watch_verdict("fleet-a")
        servers = wait_for_servers(lambda rows: "held" in rows["fleet-a"]["last_agt"])
        assert servers["fleet-a"]["status"].startswith("MAINT"), servers["fleet-a"]
        assert "second fault within the flap window" in servers["fleet-a"]["last_agt"]
        assert a.check_output("docker inspect -f '{{.Id}}' vllm") == container
        assert a.check_output("systemctl show -p NRestarts --value vllm.service") == restarts
        assert servers["fleet-b"]["status"].startswith("UP")
    finally:
        outcomes = load.stop()
    print(f"watch: {len(outcomes)} streamed requests through the gateway, "
          f"{len(failed(outcomes))} failed")
    assert len(outcomes) >= 20, len(outcomes)
    assert_streams_whole(outcomes)

    # Told, not asked (issue 52): the node out of rotation longer than the scenario's 30 s is
    # one alert, and the webhook receiver on the monitoring host gets one notification for it,
    # not one per look or per scrape (a second would come a group interval, 30 s, later).
    told = wait_for(lambda: notified("OnecatNodeOutOfRotation", garbage_at - 5, node="fleet-a"),
                    timeout=150)
    assert told, (firing("OnecatNodeOutOfRotation"), notifications()[-3:])
    print(f"monitoring: fleet-a held, its out-of-rotation alert reached the webhook "
          f"{time.time() - garbage_at:.0f} s after the garbage began")
    alert = [x for x in told[0]["alerts"] if x["labels"]["alertname"] == "OnecatNodeOutOfRotation"]
    assert alert[0]["annotations"]["runbook"], alert
    time.sleep(40)
    assert len(notified("OnecatNodeOutOfRotation", garbage_at - 5, node="fleet-a")) == 1, \
        notifications()[-3:]

    # onecat status: one table of the fleet, from the nodes' verdict files.
    table = onecat_status()
    rows = {line.split()[0]: line for line in table.splitlines() if line.startswith("fleet-")}
    assert rows["fleet-a"].split()[1:3] == ["unhealthy", "held"], table
    assert "FAILED collapsed into repetition" in rows["fleet-a"], table
    assert rows["fleet-b"].split()[1:3] == ["healthy", "in"], table
    # fleet-b's engine is the stand-in as every node runs it: not batch-invariant (its answers
    # change with the requests in flight). Probed on every look under the same load, it was
    # never taken out.
    b_journal = node("fleet-b").check_output("journalctl -u onecat-watch.service --no-pager -o cat")
    assert "watch: in ->" not in b_journal, b_journal[-2000:]
    probed = watch_verdict("fleet-b")["probe"]
    assert probed and all(answer["ok"] for answer in probed), probed
    # fleet-c never served (held at health) but got the watch from the stage run alone: its
    # GPU 1's uncorrectable error since the driver loaded is a condition the watch judges on
    # every look (the health stage's own rule), so its watch holds it out too, and the newest
    # rollout (the rerun's) says why it is out of rotation.
    assert rows["fleet-c"].split()[1:5] == ["unhealthy", "held", "-", "out:"], table
    assert "out: held at health" in rows["fleet-c"] and " 0/1 " in rows["fleet-c"], table

    # The operator's fix (a fresh engine, the log back) and --release: back in rotation.
    a.check_output(f"cp -p {SCENARIO_A}.orig {SCENARIO_A}")
    a.check_output(f"cp -p {KERNEL_LOG_A}.orig {KERNEL_LOG_A}")
    a.run("systemctl restart vllm.service")
    assert wait_for(lambda: a.run(f"curl -fsS {KEY_HEADER} http://127.0.0.1:8000/health")
                    .rc == 0, timeout=60)
    released = a.run("onecat-watch --release")
    assert released.rc == 0 and "held -> in: released by an operator" in released.stdout
    servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"))
    assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]
    assert wait_for(lambda: watch_verdict("fleet-a")["verdict"] == "healthy", timeout=30), \
        watch_verdict("fleet-a")


BURNIN = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/burnin.yml"


def test_burn_in_refuses_a_node_whose_ecc_rises_under_load_until_it_passes_again(run_playbook):
    """On demand (onecat burnin), fleet-a's GPU 1 starts failing a few seconds into the load
    (an NVML timeline): refused with the evidence and held out of rotation; the next site.yml
    run burns it in again (the refusal is remembered) and admits it once it passes."""
    results = EPHEMERAL / "results" / "burnin"
    failing = json.dumps({"gpu_health_environment": {
        "LD_LIBRARY_PATH": "/opt/onecat-test/nvml",
        "ONECAT_NVML_DOUBLE_SCENARIO":
            "/opt/onecat-test/nvml/scenarios/ecc_rises_under_load.scenario"}})
    run = run_playbook(BURNIN, "--limit", "fleet-a", "-e", failing,
                       "-e", f"onecat_results_dir={results}")
    print(f"\nburn-in on demand, fleet-a refused: {run.seconds:.0f} s")
    assert run.rc != 0, run.output[-3000:]
    flat = " ".join(run.output.split())
    assert "fleet-a: burn-in refused the node (unhealthy" in flat, flat[-3000:]
    evidence = json.loads((results / "fleet-a" / "burnin.json").read_text())
    assert not evidence["admitted"]
    assert {"ecc_volatile_uncorrected", "retired_pages_pending"} <= {
        f["code"] for f in evidence["findings"]}
    assert any(row["gpus"][1]["ecc_uncorrected"] for row in evidence["series"])
    servers = wait_for_servers(lambda rows: "burn-in" in rows["fleet-a"]["last_agt"])
    assert servers["fleet-a"]["status"].startswith("MAINT"), servers["fleet-a"]
    assert servers["fleet-b"]["status"].startswith("UP")
    assert stream_completion(gateway_url(), MODEL, max_tokens=4, key=client_key()).status == 200

    rerun = str(EPHEMERAL / "results" / "after-burnin")
    run = run_playbook(SITE, "-e", GOOD_ENV, "-e", f"onecat_results_dir={rerun}")
    print(f"site.yml after the refusal, fleet-a gated and burned in again: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-4000:]  # fleet-c is still held out
    assert "fleet-a: burn-in: its last burn-in refused it" in " ".join(run.output.split())
    assert json.loads((Path(rerun) / "fleet-a" / "burnin.json").read_text())["admitted"]
    assert not (Path(rerun) / "fleet-b" / "burnin.json").exists()
    assert rollout("after-burnin")["fleet-a"]["in_rotation"]
    servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"))
    assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]
