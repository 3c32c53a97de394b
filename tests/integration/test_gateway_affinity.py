"""Affinity routing in the gateway, with a real HAProxy on loopback (the role's own template).

The routing key is checked where HAProxy hands it to a node (the X-Onecat-Route header it
sets, a SHA-256 of what it read), in its order of precedence; a conversation's turns stay on
one stand-in node and move, alone, when that node is drained; requests without a key go
through onecat_keyless, whose servers follow the drains of onecat_nodes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "standin_engine"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from gateway_harness import Engine, Recorder, base_vars, haproxy, render, wait_until  # noqa: E402

from onecat.gateway import backends, keys  # noqa: E402
from onecat.gateway.runtime import Runtime, parse_stat, servers  # noqa: E402
from onecat.gateway.share import share  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy is not installed (bootstrap.sh installs it)")

MODEL = "standin-model"


def route(text: str) -> str:
    """What the gateway puts in X-Onecat-Route for the key text it read (sha2(256),hex)."""
    return hashlib.sha256(text.encode()).hexdigest().upper()


def affinity_vars(tmp_path: Path, nodes: dict[str, int]) -> dict:
    variables = base_vars(tmp_path)
    states = {name: {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                     "port": port, "max_num_seqs": 8, "agent_port": 0}
              for name, port in nodes.items()}
    variables["gateway_servers"] = [s.as_dict() for s in backends.select(states).servers]
    variables["gateway_balance"] = "affinity"
    return variables


def post(url: str, body: dict | bytes, headers: dict[str, str] | None = None) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={
        "content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=20) as response:
        response.read()
        return response.status


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    node = Recorder()
    yield node
    node.close()


def test_affinity_renders_two_backends_that_haproxy_accepts(tmp_path: Path) -> None:
    text = render(affinity_vars(tmp_path, {"node-a": 9001, "node-b": 9002}))
    assert "balance hdr(X-Onecat-Route)" in text and "hash-type consistent" in text
    assert "hash-balance-factor 125" in text and "backend onecat_keyless" in text
    assert "track onecat_nodes/node-a" in text and text.count("maxconn 8") == 4
    leastconn = render({**affinity_vars(tmp_path, {"node-a": 9001}),
                        "gateway_balance": "leastconn"})
    assert "onecat_keyless" not in leastconn and "req.body" not in leastconn


def test_the_routing_key_and_its_precedence(tmp_path: Path, recorder: Recorder) -> None:
    variables = affinity_vars(tmp_path, {"node-a": recorder.port})
    system = {"role": "system", "content": 'Be brief, "exact" {and} kind. ' * 400}  # ~12 KB
    first = {"role": "user", "content": "What is 2+2?"}
    chat = {"model": MODEL, "messages": [system, first]}
    two_messages = json.dumps([system, first])[1:-1]
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all(s.status.startswith("UP")
                                      for s in servers(runtime.stat(), "onecat_nodes")))
        url = gw.url + "/v1/chat/completions"
        post(url, {**chat, "user": "alice"}, {"X-Session-Id": "s-1"})
        post(url, {**chat, "user": "alice"})
        post(url, {**chat, "prompt_cache_key": "tenant-7"})
        post(url, chat)
        # A later turn of the same conversation: the same first two messages, the same key.
        post(url, {**chat, "messages": [system, first, {"role": "assistant", "content": "4"},
                                        {"role": "user", "content": "x" * 9000}]})
        # A completions prompt is no key (issue 51): by load, unless the client sends one.
        post(gw.url + "/v1/completions", {"model": MODEL, "prompt": "p" * 3000})
        post(gw.url + "/v1/completions", {"model": MODEL, "prompt": [1, 2, 3]})
        post(gw.url + "/v1/completions", {"model": MODEL, "prompt": "p", "user": "bob"})
        post(gw.url + "/v1/completions", {"model": MODEL})
        assert recorder.routes == [
            route("s-1"), route("u:alice"), route("u:tenant-7"), route("m:" + two_messages),
            route("m:" + two_messages), None, None, route("u:bob"), None]
        keyless = [s for s in servers(runtime.stat(), "onecat_keyless")]
        assert [(s.server, s.total) for s in keyless] == [("node-a", 3)]


ALICE, BOB = "sk-alice-0123456789abcdef", "sk-bob-0123456789abcdef0"


def keyed(tmp_path: Path, variables: dict) -> dict:
    """The variables with two client keys, alice and bob (the gateway is closed by default)."""
    key_map = tmp_path / "keys.map"
    key_map.write_text(keys.render_key_map(keys.parse_keys(f"alice {ALICE}\nbob {BOB}\n")))
    return {**variables, "gateway_key_map_path": str(key_map)}


def client_route(client: str, text: str) -> str:
    """X-Onecat-Route for a client key's name and the key text read from its request."""
    return route(f"{client}:{route(text)}")


def test_each_client_key_routes_apart(tmp_path: Path, recorder: Recorder) -> None:
    variables = keyed(tmp_path, affinity_vars(tmp_path, {"node-a": recorder.port}))
    chat = {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "What is 2+2?"}]}
    two_messages = json.dumps(chat["messages"])[1:-1]
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all(s.status.startswith("UP")
                                      for s in servers(runtime.stat(), "onecat_nodes")))
        url = gw.url + "/v1/chat/completions"
        for key in (ALICE, BOB, ALICE):
            post(url, chat, {"authorization": f"Bearer {key}"})
        post(url, chat, {"authorization": f"Bearer {BOB}", "X-Session-Id": "s-1"})
    # The same conversation: one route per client key, the same route again for alice.
    assert recorder.routes == [
        client_route("alice", "m:" + two_messages), client_route("bob", "m:" + two_messages),
        client_route("alice", "m:" + two_messages), client_route("bob", "s-1")]
    assert recorder.routes[0] != recorder.routes[1]


def first_line_within(port: int, head: bytes, seconds: float) -> bytes:
    """The first bytes the gateway answers to a request head whose body never comes, or b""
    when nothing came within `seconds`."""
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as conn:
        conn.sendall(head)
        try:
            return conn.recv(64)
        except TimeoutError:
            return b""


def test_a_request_without_a_key_is_refused_before_its_body_comes(
        tmp_path: Path, recorder: Recorder) -> None:
    """The key is checked on the headers; only a request with a key waits for its body (the
    routing key is read from it). Before, a request without a key waited for the body it
    announced, up to `timeout http-request` (30 s), before its 401."""
    variables = keyed(tmp_path, affinity_vars(tmp_path, {"node-a": recorder.port}))
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
            "Content-Type: application/json\r\nContent-Length: 4000\r\n{auth}\r\n")
    with haproxy(tmp_path, variables) as gw:
        port = int(gw.url.rsplit(":", 1)[1])
        started = time.monotonic()
        refused = first_line_within(port, head.format(auth="").encode(), 10)
        assert refused.startswith(b"HTTP/1.1 401"), refused
        assert time.monotonic() - started < 3
        # With a key the gateway waits for the body: nothing comes back in 2 s.
        waiting = first_line_within(
            port, head.format(auth=f"Authorization: Bearer {ALICE}\r\n").encode(), 2)
        assert waiting == b"", waiting
    assert recorder.routes == []


def conversation(number: int, turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "A shared system prompt. " * 50},
                {"role": "user", "content": f"conversation {number}: hello"}]
    for turn in range(1, turns):
        messages += [{"role": "assistant", "content": "an answer"},
                     {"role": "user", "content": f"turn {turn}"}]
    return messages


def served_by(runtime: Runtime, send) -> str:
    """The node that served one request (the difference of the stats around it)."""
    before = runtime.command("show stat")
    send()
    counts = share(before, runtime.command("show stat"))["servers"]
    (name,) = [n for n, c in counts.items() if c["requests"]]
    return name


@pytest.fixture
def two_engines(tmp_path: Path):
    started = [Engine(tmp_path, name).start() for name in ("node-a", "node-b")]
    yield started
    for engine in started:
        engine.stop()


def test_a_conversation_stays_on_one_node_and_a_drain_moves_only_its_own(
        tmp_path: Path, two_engines: list[Engine]) -> None:
    variables = affinity_vars(tmp_path, {e.name: e.port for e in two_engines})
    with haproxy(tmp_path, variables) as gw:
        runtime = Runtime(gw.socket)
        assert wait_until(lambda: all(s.status.startswith("UP")
                                      for s in servers(runtime.stat(), "onecat_nodes")))
        url = gw.url + "/v1/chat/completions"

        def turn(number: int, turns: int):
            return lambda: post(url, {"model": MODEL, "max_tokens": 2,
                                      "messages": conversation(number, turns)})

        homes: dict[int, str] = {}
        for number in range(8):
            nodes = {served_by(runtime, turn(number, t)) for t in range(1, 5)}
            assert len(nodes) == 1, (number, nodes)  # every turn on one node
            homes[number] = nodes.pop()
        assert set(homes.values()) == {"node-a", "node-b"}, homes  # and both nodes used
        drained = homes[0]
        runtime.set_state("onecat_nodes", drained, "drain")
        # The drain reaches the tracking server of onecat_keyless too.
        assert wait_until(lambda: all(
            s.admin == "drain" for s in servers(runtime.stat(), "onecat_keyless")
            if s.server == drained))
        after = {number: served_by(runtime, turn(number, 5)) for number in homes}
        assert all(node != drained for node in after.values()), after
        # Conversations of the other node did not move.
        assert all(after[n] == home for n, home in homes.items() if home != drained), after
        # Ready again: they come back where their prefix is (consistent hashing).
        runtime.set_state("onecat_nodes", drained, "ready")
        back = {number: served_by(runtime, turn(number, 6)) for number in homes}
        assert back == homes
        rows = parse_stat(runtime.command("show stat"))
        assert {r["pxname"] for r in rows} >= {"onecat_nodes", "onecat_keyless"}


def test_gateways_agree_on_each_conversations_node_and_a_new_node_moves_only_its_own(
        tmp_path: Path) -> None:
    """Issue 51, item 3: two gateways with the same nodes send every turn of a conversation to
    one node, with nothing shared between them: the ring is a function of the servers' ids and
    weights (src/lb_chash.c), and each id comes from its node's name. A third gateway whose list
    lacks node-b (not yet reconverged after node-b joined, or node-b left out for a failed
    gate) agrees on every conversation that is not on node-b. With ids by position, node-c's
    id would differ between the lists, and so would its points and the conversations there."""
    nodes = ("node-a", "node-b", "node-c")
    recorders = {name: Recorder() for name in nodes}
    try:
        ports = {name: recorders[name].port for name in nodes}
        folders = [tmp_path / name for name in ("gw-1", "gw-2", "gw-behind")]
        for folder in folders:
            folder.mkdir()
        lists = [ports, ports, {n: p for n, p in ports.items() if n != "node-b"}]
        with contextlib.ExitStack() as stack:
            gateways = [stack.enter_context(haproxy(folder, affinity_vars(folder, listed)))
                        for folder, listed in zip(folders, lists, strict=True)]
            for gw, listed in zip(gateways, lists, strict=True):
                runtime = Runtime(gw.socket)
                assert wait_until(lambda runtime=runtime, listed=listed: sum(
                    s.status.startswith("UP")
                    for s in servers(runtime.stat(), "onecat_nodes")) == len(listed))

            def home(gateway, key: str) -> str:
                before = {n: len(r.routes) for n, r in recorders.items()}
                post(gateway.url + "/v1/chat/completions",
                     {"model": MODEL, "messages": conversation(0, 1)}, {"X-Session-Id": key})
                (name,) = [n for n, r in recorders.items() if len(r.routes) > before[n]]
                return name

            keys = [f"conversation-{number}" for number in range(60)]
            first = {key: home(gateways[0], key) for key in keys}
            assert set(first.values()) == set(nodes), first  # every node has conversations
            # Turns alternate between the two gateways: each stays where its first turn went.
            for key in keys:
                assert [home(gateways[1], key), home(gateways[0], key)] == [first[key]] * 2, key
            behind = {key: home(gateways[2], key) for key in keys}
            moved = {key: (first[key], behind[key]) for key in keys
                     if first[key] != "node-b" and behind[key] != first[key]}
            assert not moved, moved
    finally:
        for recorder in recorders.values():
            recorder.close()


class HoldingNode(Recorder):
    """A Recorder whose requests with an X-Hold header wait, once arrived, until release():
    requests in flight on a node of the test's choosing."""

    def __init__(self) -> None:
        self.release_all = threading.Event()
        super().__init__()
        handler = self.server.RequestHandlerClass
        node = self

        class Holding(handler):  # type: ignore[misc, valid-type]
            def _answer(self) -> None:
                if self.headers.get("x-hold"):
                    length = int(self.headers.get("content-length") or 0)
                    self.rfile.read(length)
                    node.routes.append(self.headers.get("x-onecat-route"))
                    node.release_all.wait(30)
                    self.send_response(200)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                super()._answer()

            do_GET = do_POST = _answer

        self.server.RequestHandlerClass = Holding

    def close(self) -> None:
        self.release_all.set()
        super().close()


def test_placement_by_load_remembers_the_node_and_leaves_it_when_full_or_out(
        tmp_path: Path) -> None:
    """Issue 51, item 1 (gateway_affinity_placement: load): a new conversation goes to the
    least loaded node; its later turns follow the stick table to that node; a home above the
    load bound sends the turn elsewhere and the table learns the new home; a drained home's
    conversations move, and only they; requests without a key are never remembered."""
    nodes = {name: HoldingNode() for name in ("node-a", "node-b", "node-c")}
    held: list[threading.Thread] = []
    try:
        variables = affinity_vars(tmp_path, {n: r.port for n, r in nodes.items()})
        variables["gateway_affinity_placement"] = "load"
        text = render(variables)
        assert "onecat_keyless" not in text and "backend onecat_home_node-a" in text
        with haproxy(tmp_path, variables) as gw:
            checked = gw.check(text)
            assert checked.returncode == 0 and "rule" not in checked.stdout + checked.stderr
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all(s.status.startswith("UP")
                                          for s in servers(runtime.stat(), "onecat_nodes")))
            url = gw.url + "/v1/chat/completions"

            def send(key: str, hold: bool = False) -> str:
                before = {n: len(r.routes) for n, r in nodes.items()}
                headers = {"X-Session-Id": key, **({"X-Hold": "1"} if hold else {})}
                body = {"model": MODEL, "messages": conversation(0, 1)}
                if hold:
                    held.append(threading.Thread(target=post, args=(url, body, headers),
                                                 daemon=True))
                    held[-1].start()
                else:
                    post(url, body, headers)
                assert wait_until(lambda: sum(len(r.routes) for r in nodes.values())
                                  > sum(before.values()), timeout=10)
                (name,) = [n for n, r in nodes.items() if len(r.routes) > before[n]]
                return name

            homes = {f"c{i}": send(f"c{i}") for i in range(9)}
            assert set(homes.values()) == set(nodes), homes  # idle nodes share first turns
            assert all(send(key) == home for key, home in homes.items())
            # One request in flight on node-a and one on node-b: a new one goes to node-c.
            on = {n: [k for k, h in homes.items() if h == n] for n in nodes}
            for name in ("node-a", "node-b"):
                assert send(on[name][0], hold=True) == name
            assert send("new") == "node-c"
            # The bound (HAProxy's, with this request counted): ceil(in flight x 125 / 300).
            # A second on node-a is within it (1 < ceil(3 x 1.25 / 3) = 2); a third is not
            # (2 of 4 in flight): it goes by load, and the table learns its new home.
            assert send(on["node-a"][0], hold=True) == "node-a"
            moved = on["node-a"][1]
            assert send(moved, hold=True) == "node-c"
            for node in nodes.values():
                node.release_all.set()
            for thread in held:
                thread.join(10)
            # The table is written when the answer comes (HAProxy commits store-request
            # entries in its response analyser): the next turn goes to the new home.
            assert send(moved) == "node-c"
            # A drained node's conversations move; the others stay where they are.
            runtime.set_state("onecat_nodes", "node-b", "drain")
            after = {key: send(key) for key in homes if key != moved}
            assert all(after[k] != "node-b" for k in after), after
            assert all(after[k] == homes[k] for k in after if homes[k] != "node-b"), after
            # Requests without a key: by load, and never in the table.
            def remembered() -> int:
                return runtime.command("show table onecat_nodes").count("\n0x")

            assert remembered() == len(homes) + 1  # and "new"
            post(gw.url + "/v1/completions", {"model": MODEL, "prompt": "p"})
            # A client's own X-Onecat-Route is dropped: it writes nothing into the table.
            post(gw.url + "/v1/completions", {"model": MODEL, "prompt": "p"},
                 {"X-Onecat-Route": "F" * 64})
            assert remembered() == len(homes) + 1
            # A reload hands the table to the new process (the local peer), once the running
            # one has finished its initial resync (resync_timeout 3 s, then "<PAST>").
            assert wait_until(lambda: "resync_timeout=<PAST>" in runtime.command("show peers"),
                              timeout=15), runtime.command("show peers")
            runtime.set_state("onecat_nodes", "node-b", "ready")
            gw.reload()
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: remembered() == len(homes) + 1, timeout=10), \
                runtime.command("show table onecat_nodes")
            assert wait_until(lambda: all(s.status.startswith("UP")
                                          for s in servers(runtime.stat(), "onecat_nodes")))
            assert {key: send(key) for key in after} == after
    finally:
        for node in nodes.values():
            node.close()


@pytest.mark.parametrize(("extra", "named"), [
    ("onecat_gateway_balance=roundrobin", "gateway_balance"),
    ("onecat_gateway_hash_balance_factor=100", "gateway_hash_balance_factor"),
    ("onecat_gateway_affinity_placement=random", "gateway_affinity_placement"),
])
def test_the_role_refuses_a_bad_balance_before_writing(tmp_path: Path, extra: str,
                                                       named: str) -> None:
    from test_gateway_role import SERVING, run_role

    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", extra, "-e", "onecat_gateway_open=true")
    assert proc.returncode != 0
    assert named in proc.stdout + proc.stderr
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"


def test_a_reload_keeps_drain_and_maint_in_both_back_ends(tmp_path: Path,
                                                          recorder: Recorder) -> None:
    # The role saves `show servers state` before each reload; with affinity the tracking
    # servers of onecat_keyless must come back drained or held with their namesakes.
    from onecat.gateway.runtime import save_server_state

    other = Recorder()
    try:
        variables = affinity_vars(tmp_path, {"node-a": recorder.port, "node-b": other.port})
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all(s.status.startswith("UP")
                                          for s in servers(runtime.stat(), "onecat_nodes")))
            runtime.set_state("onecat_nodes", "node-a", "drain")
            runtime.set_state("onecat_nodes", "node-b", "maint")
            assert save_server_state(gw.socket, variables["gateway_server_state_file"]) == 4
            gw.reload()

            def states(backend: str) -> dict[str, str]:
                return {s.server: s.admin for s in servers(Runtime(gw.socket).stat(), backend)}

            want = {"node-a": "drain", "node-b": "maint"}
            assert wait_until(lambda: states("onecat_nodes") == want), states("onecat_nodes")
            assert wait_until(lambda: states("onecat_keyless") == want), states("onecat_keyless")
    finally:
        other.close()
