"""The repair ladder on the simulated fleet (issue 31), after the rollouts (test_rollout.py):
a card the watch drains for a fault a GPU reset clears is reset and readmitted without an
operator; the same fault back within the window ends at "service required"; a fault a reset
cannot clear reboots the node (a container restart); two nodes faulting at once take turns.

Faults are injected where a real card makes them: in the NVML double's scenario, as scoped keys
(`KEY!reset` holds until the GPU is reset, `KEY!reboot` until the node boots;
tests/nvml_double/README.md), appended so the file's time is the fault's. The reset is the
nvidia-smi double's, refused while the engine's container holds the GPUs' device files.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from conftest import PROJECT
from test_rollout import (
    EPHEMERAL,
    MODEL,
    SCENARIO_A,
    WATCH,
    assert_streams_whole,
    client_key,
    gateway_servers,
    gateway_url,
    node,
    onecat_status,
    start_load,
    wait_for,
    wait_for_servers,
    watch_verdict,
)

sys.path.insert(0, str(PROJECT / "tests"))
sys.path.insert(0, str(PROJECT / "benchmarks"))
from gateway_load import failed, stream_completion
from repair import breakdown

SCENARIO_B = "/opt/onecat-test/nvml/scenarios/healthy_nvlink_pair.scenario"
# The seed's fault: uncorrectable errors since the driver loaded and a page pending retirement
# on GPU 1, both cleared by a reset of that GPU (and back if the card is bad).
ECC_GPU1 = "gpu.1.ecc.volatile.uncorrected!reset = 1\ngpu.1.retired.pending!reset = 1\n"
ECC_GPU0 = "gpu.0.ecc.volatile.uncorrected!reset = 1\ngpu.0.retired.pending!reset = 1\n"
# Xid 79's state: GPU 1 lost (the driver still counts it), until the node boots.
LOST_GPU1 = "gpu.1.lost!reboot = 1\n"
SERIAL_A1 = "0323117011202"  # fleet-a's GPU 1 (healthy_pcie_pair.scenario)
PROGRESS = "/var/lib/onecat/repair/progress.json"
REPORT = "/var/lib/onecat/repair/service-required.json"
JOURNAL = "journalctl -u onecat-repair.service -u onecat-watch.service --no-pager -o cat"
# The kernel doubles' modprobe (tests/kernel_doubles), on a node that takes the kernel-module path.
KERNEL_MODPROBE = "/usr/local/sbin/modprobe"


def inject(name: str, scenario: str, lines: str) -> None:
    node(name).check_output(f"printf '%s' {shlex.quote(lines)} >> {scenario}")


def mode(name: str) -> str | None:
    """The watch's mode on the node, None while it cannot be asked (it is rebooting)."""
    try:
        return watch_verdict(name).get("mode")
    except Exception:  # a node that reboots answers no docker exec for a while
        return None


def progress(name: str) -> dict:
    """The runner's progress file ({} while there is none, or the node cannot be asked)."""
    try:
        return json.loads(node(name).check_output(f"cat {PROGRESS}"))
    except Exception:  # no file yet, or a node that reboots
        return {}


def keep(name: str, label: str) -> dict:
    """The runner's progress, kept for benchmarks/repair.py and printed step by step."""
    document = progress(name)
    folder = EPHEMERAL / "results" / "repair"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{label}.json").write_text(json.dumps(document, indent=2))
    rows = breakdown(document)
    print(f"\nrepair ({label}) on {name}: fault to readmission "
          f"{sum(s for _, s in rows):.1f} s; python3 benchmarks/repair.py {folder}/{label}.json")
    for step, seconds in rows:
        print(f"  {step:<52} {seconds:6.1f} s")
    return document


def back_in(name: str, timeout: float) -> bool:
    return bool(wait_for(lambda: mode(name) == "in", timeout=timeout))


def test_the_lease_server_runs_as_its_own_user_and_reads_a_socket_that_changes_nothing():
    """Issue 49 item 7: the repair lease server on the gateway host (fleet-b) is not root, and
    its floor reads HAProxy's rotation through the read-only socket (the repairs below prove
    the grants); that socket refuses what would change a server."""
    b = node("fleet-b")
    pid = b.check_output("systemctl show -p MainPID --value onecat-repair-lease.service")
    assert pid.strip() not in ("", "0"), pid
    assert b.check_output(f"ps -o user= -p {pid.strip()}").strip() == "onecat-lease"
    assert b.check_output("stat -c '%U %a' /var/lib/onecat-gateway/repair-lease/secret") == (
        "onecat-lease 600")
    assert b.check_output("systemctl show -p ProtectSystem --value onecat-repair-lease") == "strict"
    refused = b.check_output(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
        "s.connect('/run/haproxy/onecat-read.sock'); "
        "s.sendall(b'disable server onecat_nodes/fleet-a\\n'); print(s.recv(200).decode())\"")
    assert "Permission denied" in refused, refused


AGENT_SOCKET = "onecat-gateway-agent.socket"
GUARD_HOLD = "/usr/local/lib/onecat/guard/hold"
# Another process on the agent's address and port that accepts and closes without a line: the
# agent's socket cannot bind there again, so the watch's one restart of it fails.
SQUAT = ("systemd-run --unit onecat-test-agent-squat python3 -c \"import json, socket; "
         "a = json.load(open('/var/lib/onecat-gateway/node.json')); s = socket.socket(); "
         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
         "s.bind((a['address'], a['agent_port'])); s.listen(16)\n"
         "while True: s.accept()[0].close()\"")


def test_an_agent_the_gateway_cannot_hear_fails_the_node_closed_until_it_answers():
    """Issue 49 item 1 on the simulated fleet: fleet-a's agent socket stopped and its port
    taken by a process that answers nothing, so the watch's one restart of the socket fails.
    The watch's next look hears no line on fleet-a's agent address, writes the key guard's
    hold file, and the engine answers the gateway's health check 503: HAProxy takes fleet-a
    out (DOWN) while fleet-b serves. With the socket back, the next look lifts the hold and
    fleet-a is UP again."""
    a = node("fleet-a")
    a.check_output(f"systemctl stop {AGENT_SOCKET} && {SQUAT}")
    try:
        a.run("systemctl start onecat-watch.service")  # one look, as the timer starts it
        journal = a.check_output("journalctl -u onecat-watch.service --no-pager -o cat")
        assert a.file(GUARD_HOLD).exists, journal[-3000:]
        assert "the node fails closed" in journal, journal[-3000:]
        assert "closed without a line" in a.file(GUARD_HOLD).content_string
        out = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("DOWN"),
                               timeout=30)
        assert out["fleet-a"]["status"].startswith("DOWN"), out["fleet-a"]
        assert out["fleet-a"]["check_status"].removeprefix("* ") == "L7STS", out["fleet-a"]
        assert out["fleet-b"]["status"].startswith("UP"), out["fleet-b"]
        assert stream_completion(gateway_url(), MODEL, max_tokens=4,
                                 key=client_key()).status == 200
    finally:
        a.run("systemctl stop onecat-test-agent-squat")
        a.check_output(f"systemctl reset-failed {AGENT_SOCKET}; systemctl start {AGENT_SOCKET}")
    a.run("systemctl start onecat-watch.service")
    assert not a.file(GUARD_HOLD).exists
    back = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"), timeout=30)
    assert back["fleet-a"]["status"].startswith("UP"), back["fleet-a"]


def test_the_repair_ladder_resets_a_card_and_readmits_it_with_no_failed_request(run_playbook):
    """Uncorrectable errors and a pending retirement on fleet-a's GPU 1 (a reset clears both):
    drained, the engine stopped once its requests finished, both GPUs reset, judged, started,
    gated, burned in, readmitted; the clients streaming through the gateway see no failure."""
    run = run_playbook(WATCH, "-e", "onecat_watch_interval=8s",
                       "-e", "onecat_repair_reboot=true", "-e", "watch_repair_lease_poll_s=5")
    assert run.rc == 0, run.output[-3000:]
    for name, scenario in (("fleet-a", SCENARIO_A), ("fleet-b", SCENARIO_B)):
        host = node(name)
        # The kernel's part of the simulation: the module is loaded (a boot does it again): on
        # fleet-a by the kernel doubles' modprobe, as the driver stage and udev load it; on
        # fleet-b by the simulated module load (molecule/default/tasks/prepare-node-kinds.yml).
        host.check_output(f"if [ -x {KERNEL_MODPROBE} ]; then {KERNEL_MODPROBE} nvidia; "
                          "else systemctl start onecat-test-nvidia-module.service; fi")
        host.check_output(f"cp -p {scenario} {scenario}.orig")
        assert "--repair-unit onecat-repair.service" in host.check_output(
            "cat /usr/local/sbin/onecat-watch")
        assert host.file("/etc/onecat/repair-lease.token").mode == 0o600
    a = node("fleet-a")
    load = start_load()
    try:
        time.sleep(5)
        inject("fleet-a", SCENARIO_A, ECC_GPU1)
        injected = time.monotonic()
        assert wait_for(lambda: mode("fleet-a") == "repairing", timeout=60), watch_verdict(
            "fleet-a")
        assert back_in("fleet-a", timeout=300), (watch_verdict("fleet-a"), progress("fleet-a"))
        print(f"\nrepair: ECC on fleet-a's GPU 1, readmitted after "
              f"{time.monotonic() - injected:.0f} s (watch interval 8 s)")
        journal = a.check_output(JOURNAL)
        assert "watch: in -> draining: GPU 1" in journal, journal[-3000:]
        assert "watch: draining -> repairing: reset after: GPU 1" in journal, journal[-3000:]
        assert "repair: resetting: GPU 0, 1" in journal, journal[-3000:]
        assert "watch: repairing -> in: repaired (reset), gated and burned in" in journal
        # The double recorded the reset of both GPUs (the pair the engine holds).
        assert a.run("test -s /run/onecat-test/gpu-reset/0 -a -s /run/onecat-test/gpu-reset/1"
                     ).rc == 0
        servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"))
        assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]
        assert watch_verdict("fleet-a")["verdict"] == "healthy", watch_verdict("fleet-a")
    finally:
        outcomes = load.stop()
    print(f"repair: {len(outcomes)} streamed requests through the gateway, "
          f"{len(failed(outcomes))} failed")
    assert len(outcomes) >= 20, len(outcomes)
    assert_streams_whole(outcomes)
    done = keep("fleet-a", "reset")
    steps = [s["step"] for s in done["steps"]]
    assert steps.index("waiting for requests in flight") < steps.index("stopping the engine") \
        < steps.index("resetting") < steps.index("gating") < steps.index("burning in")
    assert done["step"] == "readmitted" and done["tried"][0]["outcome"] == "cleared"
    metrics = a.run("cat /var/lib/prometheus/node-exporter/onecat.prom").stdout
    if metrics:  # node_exporter's folder exists only with onecat_watch_node_exporter
        assert 'onecat_repairs_total{outcome="readmitted"} 1' in metrics


def test_the_same_fault_back_within_the_window_needs_service_until_released(run_playbook):
    """The card was reset and readmitted; its errors come back (the seed's test of a card unfit
    for quantized inference): no second reset, service required, a report naming the card.
    After the "swap" (the fault gone), `onecat repair --release` puts the node back."""
    a = node("fleet-a")
    inject("fleet-a", SCENARIO_A, ECC_GPU1)
    assert wait_for(lambda: mode("fleet-a") == "service", timeout=60), watch_verdict("fleet-a")
    report = json.loads(a.check_output(f"cat {REPORT}"))
    assert [c["serial"] for c in report["cards"]] == [SERIAL_A1], report
    assert report["earlier_repair"]["rung"] == "reset", report
    assert report["summary"].startswith(f"service required: GPU 1 serial {SERIAL_A1}"), report
    servers = wait_for_servers(lambda rows: "service required" in rows["fleet-a"]["last_agt"])
    assert servers["fleet-a"]["status"].startswith("MAINT"), servers["fleet-a"]
    assert SERIAL_A1 in servers["fleet-a"]["last_agt"], servers["fleet-a"]
    table = onecat_status()
    row = next(line for line in table.splitlines() if line.startswith("fleet-a"))
    assert "service required" in row and SERIAL_A1 in row, table

    # The operator swaps the card (the scenario as it was) and releases the node.
    a.check_output(f"cp -p {SCENARIO_A}.orig {SCENARIO_A}")
    done = subprocess.run(
        [sys.executable, "-m", "onecat", "repair", "-i", str(Path(
            os.environ["MOLECULE_INVENTORY_FILE"]).parent), "--limit", "fleet-a", "--release"],
        capture_output=True, text=True, check=False, cwd=PROJECT, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert back_in("fleet-a", timeout=60), watch_verdict("fleet-a")
    assert a.run(f"test -e {REPORT}").rc != 0
    servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"))
    assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]


def test_a_fault_a_reset_cannot_clear_reboots_the_node_then_gate_and_burn_in(run_playbook):
    """fleet-a's GPU 1 lost until a boot: `nvidia-smi -r` answers "GPU is lost" (15), the ladder
    climbs to the reboot it is allowed (onecat_repair_reboot), the container restarts, the
    runner goes on after the boot and the node comes back only after gate and burn-in."""
    a = node("fleet-a")
    load = start_load(workers=2)
    try:
        time.sleep(3)
        inject("fleet-a", SCENARIO_A, LOST_GPU1)
        injected = time.monotonic()
        restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", "fleet-a"],
                                  capture_output=True, text=True, check=True).stdout.strip()
        assert wait_for(lambda: mode("fleet-a") == "repairing", timeout=60), watch_verdict(
            "fleet-a")
        drained = time.monotonic() - injected
        # Out of rotation at the gateway (drained, held, or down while it reboots).
        out = wait_for_servers(lambda rows: not rows["fleet-a"]["status"].startswith("UP"),
                               timeout=10)
        assert not out["fleet-a"]["status"].startswith("UP"), out["fleet-a"]
        assert back_in("fleet-a", timeout=480), watch_verdict("fleet-a")
        print(f"\nrepair: GPU 1 lost on fleet-a, repairing (drained) after {drained:.0f} s, "
              f"rebooted and readmitted after "
              f"{time.monotonic() - injected:.0f} s")
        after = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", "fleet-a"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert int(after) == int(restarts) + 1, (restarts, after)
        servers = wait_for_servers(lambda rows: rows["fleet-a"]["status"].startswith("UP"),
                                   timeout=30)
        assert servers["fleet-a"]["status"].startswith("UP"), servers["fleet-a"]
    finally:
        outcomes = load.stop()
    print(f"repair: {len(outcomes)} streamed requests through the gateway, "
          f"{len(failed(outcomes))} failed")
    assert len(outcomes) >= 20, len(outcomes)
    assert_streams_whole(outcomes)
    done = keep("fleet-a", "reboot")
    assert "lost" in done["fault"], done["fault"]  # the watch's reason for the order
    assert [t["rung"] for t in done["tried"]] == ["reset", "reboot", "reboot"], done["tried"]
    assert "GPU is lost" in done["tried"][0]["outcome"], done["tried"]
    steps = [s["step"] for s in done["steps"]]
    # The node's requests finished before anything was stopped, reset or rebooted.
    assert steps.index("waiting for requests in flight") < steps.index("stopping the engine") \
        < steps.index("rebooting") < steps.index("judging") < steps.index("gating") \
        < steps.index("burning in"), steps
    assert a.run("test -e /run/onecat-gateway/admitted").rc == 0
    a.check_output(f"cp -p {SCENARIO_A}.orig {SCENARIO_A}")


def test_two_nodes_faulting_at_once_repair_one_after_the_other():
    """fleet-a's GPU 0 and fleet-b's GPU 1 fault together: one lease for a fleet of three
    (10 %, at least 1), so one node waits, drained, until the other is readmitted."""
    both = ("fleet-a", "fleet-b")
    earlier = {name: progress(name).get("order") for name in both}
    inject("fleet-a", SCENARIO_A, ECC_GPU0)
    inject("fleet-b", SCENARIO_B, ECC_GPU1)
    try:
        # Both out together (each watch drains within one 8 s look), then both back in.
        assert wait_for(lambda: all(mode(name) not in ("in", None) for name in both),
                        timeout=60), {name: mode(name) for name in both}
        assert wait_for(lambda: all(mode(name) == "in" for name in both), timeout=600), (
            progress("fleet-a"), progress("fleet-b"))
    finally:
        for name, scenario in (("fleet-a", SCENARIO_A), ("fleet-b", SCENARIO_B)):
            node(name).check_output(f"cp -p {scenario}.orig {scenario}")
    runs = {name: progress(name) for name in both}
    assert all(runs[name]["step"] == "readmitted" and runs[name]["order"] != earlier[name]
               for name in both), runs

    def at(document: dict, step: str) -> float:
        return next(s["at"] for s in document["steps"] if s["step"] == step)

    first, second = sorted(runs, key=lambda name: at(runs[name], "resetting"))
    waited = [s for s in runs[second]["steps"] if s["step"] == "waiting for the lease"]
    assert waited, runs[second]["steps"]
    assert at(runs[second], "resetting") > at(runs[first], "readmitted"), runs
    assert first in waited[0]["detail"], waited  # who holds the lease: the other node
    print(f"\nrepair: {first} then {second}; {second} waited "
          f"{at(runs[second], 'resetting') - at(runs[second], 'waiting for the lease'):.0f} s "
          "for the lease")
    servers = wait_for_servers(lambda rows: all(rows[n]["status"].startswith("UP")
                                                for n in ("fleet-a", "fleet-b")), timeout=30)
    assert all(servers[n]["status"].startswith("UP") for n in ("fleet-a", "fleet-b")), servers


# A hot room (issue 46): the power brake on both serving nodes at once (nvml.h: HW_SLOWDOWN with
# HW_POWER_BRAKE_SLOWDOWN, 0x88; the clocks halve, so the draw falls). gpud's rule needs six
# braked minutes of ten: the five before this look are written into each watch's history, as
# its earlier looks would have recorded them.
BRAKE_GPU0 = "gpu.0.clocks_event_reasons = 0x88\ngpu.0.power.usage_mw = 118000\n"
THROTTLE_HISTORY = "/var/lib/onecat/watch/throttle-history.json"
# Sets every GPU's power-brake minutes to the given minutes ago; prints how many GPUs it set.
SET_BRAKED = (
    "import json, sys, time\n"
    "path, ago = sys.argv[1], [int(a) for a in sys.argv[2:]]\n"
    "history = json.load(open(path))\n"
    "now = int(time.time() // 60)\n"
    "gpus = [c for c in history.get('minutes', {}).values() if 'power_brake' in c]\n"
    "for causes in gpus:\n"
    "    causes['power_brake'] = [now - a for a in ago]\n"
    "json.dump(history, open(path, 'w'))\n"
    "print(len(gpus))\n")


def braked(name: str, *minutes_ago: int) -> int:
    """Rewrite `name`'s slowdown history (GPUs that recorded the brake): braked at these minutes
    before now. The watch's next look reads it (a look racing the write is answered by the
    caller writing again)."""
    argv = " ".join(str(a) for a in minutes_ago)
    return int(node(name).check_output(
        f"python3 -c {shlex.quote(SET_BRAKED)} {THROTTLE_HISTORY} {argv}") or 0)


def test_a_hot_room_leaves_the_floor_serving_and_every_node_comes_back_by_itself():
    """Both serving nodes braked at once: the first watch to ask the gateway host's floor
    (onecat_fleet_min_in_rotation: 1) drains and holds its node, the other is kept in rotation,
    serving, and says so; once the room is cool for five minutes both are in again, with no
    `--release`, and no streamed request failed."""
    both = ("fleet-a", "fleet-b")
    scenarios = {"fleet-a": SCENARIO_A, "fleet-b": SCENARIO_B}
    load = start_load()
    seen_up: list[int] = []

    def states() -> dict[str, tuple]:
        rows = gateway_servers()
        seen_up.append(sum(rows[n]["status"].startswith("UP") for n in both))
        verdicts = {n: watch_verdict(n) for n in both}
        return {n: (v.get("mode"), bool(v.get("floor_held"))) for n, v in verdicts.items()}

    try:
        time.sleep(5)
        for name in both:
            inject(name, scenarios[name], BRAKE_GPU0)
        assert wait_for(lambda: all(braked(n, 5, 4, 3, 2, 1) for n in both), timeout=60)

        def one_out_one_kept() -> bool:
            now = states()
            kept = [n for n, (m, held) in now.items() if m == "in" and held]
            out = [n for n, (m, _) in now.items() if m in ("draining", "held")]
            if len(kept) == 1 and len(out) == 1:
                return True
            for name in both:  # a look that raced the history's rewrite: write it again
                if now[name] == ("in", False):
                    braked(name, 5, 4, 3, 2, 1)
            return False

        assert wait_for(one_out_one_kept, timeout=120), states()
        (kept,) = [n for n, (m, held) in states().items() if m == "in" and held]
        (out,) = [n for n in both if n != kept]
        assert wait_for(lambda: states()[out][0] == "held", timeout=60), states()
        assert watch_verdict(kept)["reason"].startswith(
            f"kept in by the fleet's floor: the fleet's floor keeps {kept} in"), \
            watch_verdict(kept)
        assert f"watch: in -> in: kept in: the fleet's floor keeps {kept} in" in node(
            kept).check_output(JOURNAL)
        assert "refused out node=" + kept in node("fleet-b").check_output(
            "journalctl -u onecat-repair-lease.service --no-pager -o cat")
        servers = gateway_servers()
        assert servers[kept]["status"].startswith("UP"), servers[kept]
        assert servers[out]["status"].startswith(("MAINT", "DRAIN")), servers[out]

        # The room cools: the brake gone, its last minute six minutes ago (five quiet ones).
        for name in both:
            node(name).check_output(f"cp -p {scenarios[name]}.orig {scenarios[name]}")

        def both_back() -> bool:
            now = states()
            if all(state == ("in", False) for state in now.values()):
                return True
            for name in both:
                braked(name, 10, 9, 8, 7, 6)
            return False

        assert wait_for(both_back, timeout=120), states()
        assert "watch: held -> in: the condition cleared by itself" in node(out).check_output(
            JOURNAL)
        servers = wait_for_servers(lambda rows: all(rows[n]["status"].startswith("UP")
                                                    for n in both), timeout=30)
        assert all(servers[n]["status"].startswith("UP") for n in both), servers
    finally:
        for name in both:
            node(name).check_output(f"cp -p {scenarios[name]}.orig {scenarios[name]}")
        outcomes = load.stop()
    print(f"\nhot room: {kept} kept in by the floor, {out} out until cool; "
          f"{len(outcomes)} streamed requests, {len(failed(outcomes))} failed")
    assert min(seen_up) >= 1, seen_up  # never an empty gateway
    assert len(outcomes) >= 20, len(outcomes)
    assert_streams_whole(outcomes)
