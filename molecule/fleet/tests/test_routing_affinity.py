"""Affinity routing on the simulated fleet (issue 32), after the rollouts and the repairs: the
gateway stage switches the running gateway to `onecat_gateway_balance: affinity` (a reload under
streaming load); a conversation's turns then land on one node, whose prefix cache they hit; a
drain moves that node's conversations, and only them, and they come back when it returns. The
drain comes right after a flood of 1,000 connections to that node's agent port, and is heard
(issue 49).

tests/integration/test_gateway_affinity.py proves every routing-key pattern against a real
HAProxy; this one proves the role sets it up on a real gateway host in front of real engines.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import time
import urllib.request

from test_rollout import (
    MODEL,
    assert_streams_whole,
    client_key,
    gateway_servers,
    gateway_url,
    node,
    node_address,
    start_load,
    wait_for_servers,
)

from onecat.gateway.runtime import parse_stat

GATEWAY = "- ansible.builtin.import_playbook: @PROJECT@/playbooks/gateway.yml"
SERVING = ("fleet-a", "fleet-b")  # fleet-c is held out by its health check
PORTS = {"fleet-a": 8000, "fleet-b": 8001}  # fleet-b's front end takes 8000 (host_vars)
# Long enough to fill whole 16-token blocks several times over: every later turn hits them.
SYSTEM = "You answer questions about the fleet of inference servers. " * 40
HITS = re.compile(r"^vllm:prefix_cache_hits_total(?:\{[^}]*\})? (\S+)$", re.MULTILINE)


def conversation(number: int, turns: int) -> list[dict]:
    """The chat so far: the shared system prompt, the first user turn, then turns."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"conversation {number}: what runs where?"}]
    for turn in range(1, turns):
        messages += [{"role": "assistant", "content": f"answer {turn}"},
                     {"role": "user", "content": f"and turn {turn}?"}]
    return messages


def send_turn(number: int, turns: int) -> None:
    body = json.dumps({"model": MODEL, "max_tokens": 4,
                       "messages": conversation(number, turns)}).encode()
    request = urllib.request.Request(
        f"{gateway_url()}/v1/chat/completions", body,
        {"Content-Type": "application/json", "Authorization": f"Bearer {client_key()}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
        answer.read()


def requests_served() -> dict[str, int]:
    """Requests each serving node got through the gateway (HAProxy's stot, both back ends)."""
    csv_text = node("fleet-b").check_output("curl -fsS 'http://127.0.0.1:8404/stats;csv'")
    counts = dict.fromkeys(SERVING, 0)
    for row in parse_stat(csv_text):
        if row.get("svname") in counts:
            counts[row["svname"]] += int(row.get("stot") or 0)
    return counts


def served_by(number: int, turns: int) -> str:
    """The node that served one turn (the difference of the counters around it)."""
    before = requests_served()
    send_turn(number, turns)
    after = requests_served()
    (name,) = [n for n in SERVING if after[n] > before[n]]
    return name


def cache_hits(name: str) -> float:
    """The engine's own prefix-cache hits (vLLM's counter on /metrics, the scrapers' key)."""
    text = node(name).check_output(
        "k=$(sed -n 's/^ONECAT_METRICS_KEY=//p' /etc/onecat/vllm.env); "
        "[ -n \"$k\" ] || k=$(sed -n 's/^VLLM_API_KEY=//p' /etc/onecat/vllm.env); "
        f"curl -fsS -H \"Authorization: Bearer $k\" http://127.0.0.1:{PORTS[name]}/metrics")
    return sum(float(v) for v in HITS.findall(text))


AGENT_STATE = "/var/lib/onecat-gateway/agent-state"  # roles/gateway gateway_node_state_dir
AGENT_PORT = 8003  # roles/gateway gateway_agent_port


def flood_agent(name: str, connections: int = 1000) -> int:
    """Open and close `connections` connections to the node's agent port, one after the other
    as fast as they go, from this machine (not the gateway): with systemd's default trigger
    limit, ~200 in 2 s failed the socket until restarted and HAProxy kept the node's last word
    (issue 49). How many were accepted."""
    address, accepted = node_address(name), 0
    for _ in range(connections):
        try:
            with socket.create_connection((address, AGENT_PORT), timeout=2):
                accepted += 1
        except OSError:
            pass
    return accepted


def take_out(name: str) -> str:
    """What an operator does (docs/gateway.md): the node's agent answers `drain`, so every
    gateway drains it at its next agent check. A drain typed on the runtime API lasts only
    until that check: the agent answers the whole state each time (issue 46). The agent file's
    content before it, to put back."""
    saved = node(name).check_output(f"cat {AGENT_STATE}")
    node(name).check_output(f"printf 'drain #ops: affinity test\\n' > {AGENT_STATE}")
    return saved


def put_back(name: str, saved: str) -> None:
    node(name).check_output(f"printf '%s\\n' {shlex.quote(saved)} > {AGENT_STATE}")


def test_affinity_keeps_a_conversation_on_its_cache_and_a_drain_moves_only_its_own(
        run_playbook):
    load = start_load(workers=2)
    try:
        time.sleep(3)
        run = run_playbook(GATEWAY, "-e", "onecat_gateway_balance=affinity")
        time.sleep(3)
    finally:
        outcomes = load.stop()
    print(f"\ngateway switched to affinity under load: {run.seconds:.0f} s, "
          f"{len(outcomes)} streams")
    assert run.rc == 0, run.output[-3000:]
    assert run.recap("fleet-b")["changed"] >= 1, run.output[-3000:]
    config = node("fleet-b").check_output("cat /etc/haproxy/haproxy.cfg")
    assert "balance hdr(X-Onecat-Route)" in config and "hash-type consistent" in config
    assert "hash-balance-factor 125" in config and "backend onecat_keyless" in config
    # Of the configurations onecat wrote (each holds the engines' key, the retired one too),
    # only the last stays beside it, as .previous: no dated copy of them piles up.
    copies = node("fleet-b").run(
        "grep -l '^# The onecat gateway: ' /etc/haproxy/haproxy.cfg.*~").stdout.split()
    assert copies == [], copies
    assert node("fleet-b").file("/etc/haproxy/haproxy.cfg.previous").exists
    assert len(outcomes) >= 5, len(outcomes)
    assert_streams_whole(outcomes)  # the reload cut no stream
    servers = wait_for_servers(lambda rows: all(rows[n]["status"].startswith("UP")
                                                for n in SERVING))
    assert all(servers[n]["status"].startswith("UP") for n in SERVING), servers

    # Each conversation's turns on one node, both nodes used; the home's cache is hit.
    homes: dict[int, str] = {}
    for number in range(8):
        before = {n: cache_hits(n) for n in SERVING}
        nodes = {served_by(number, turns) for turns in range(1, 4)}
        assert len(nodes) == 1, (number, nodes)
        homes[number] = nodes.pop()
        # Turns 2 and 3 repeat turn 1's prompt (system prompt first): at least 2 x 400 tokens.
        gained = cache_hits(homes[number]) - before[homes[number]]
        assert gained >= 800, (number, homes[number], gained)
        if len(set(homes.values())) == 2 and len(homes) >= 4:
            break
    assert set(homes.values()) == set(SERVING), homes
    print(f"affinity: conversations and their nodes {homes}")

    drained = homes[0]
    # A flood of the node's agent port first: the drain below must still be heard.
    started = time.monotonic()
    accepted = flood_agent(drained)
    print(f"agent flood: 1000 connections to {drained}:{AGENT_PORT}, {accepted} accepted, "
          f"{time.monotonic() - started:.0f} s")
    assert node(drained).run(
        "systemctl is-active onecat-gateway-agent.socket").stdout.strip() == "active"
    saved = take_out(drained)
    try:
        assert wait_for_servers(lambda rows: rows[drained]["status"].startswith("DRAIN"))[
            drained]["status"].startswith("DRAIN"), gateway_servers()[drained]
        moved = {number: served_by(number, 4) for number in homes}
        # The drained node's conversations moved; the other node's stayed where they were.
        assert all(home != drained for home in moved.values()), moved
        assert all(moved[n] == home for n, home in homes.items() if home != drained), moved
    finally:
        put_back(drained, saved)
    assert wait_for_servers(lambda rows: rows[drained]["status"].startswith("UP"))[
        drained]["status"].startswith("UP"), gateway_servers()[drained]
    # Back where their prefix is cached (consistent hashing): the next turn hits it there.
    before = cache_hits(drained)
    back = {number: served_by(number, 5) for number in homes}
    assert back == homes, (back, homes)
    assert cache_hits(drained) - before >= 400, cache_hits(drained) - before
