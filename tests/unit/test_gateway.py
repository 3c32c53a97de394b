"""The gateway's pure logic: back-end selection, maxconn, the key file, the runtime API client."""

from __future__ import annotations

import hashlib

import pytest

from onecat.gateway import backends, keys
from onecat.gateway.runtime import (
    Runtime,
    RuntimeApiError,
    admin_state,
    in_rotation,
    last_in_rotation,
    old_workers,
    parse_stat,
    rotation,
)

SERVING = {"serving": True, "in_rotation": True, "address": "10.0.0.11", "port": 8000,
           "max_num_seqs": 64, "agent_port": 8003}


def test_only_nodes_that_passed_a_gate_become_servers() -> None:
    selection = backends.select({
        "gpu-01": SERVING,
        "gpu-02": None,
        "gpu-03": {**SERVING, "serving": False, "reason": "no previous unit to roll back to"},
        "gpu-04": {**SERVING, "in_rotation": False, "reason": "smoke completion\n  garbage"},
        "gpu-05": {**SERVING, "address": ""},
    })
    assert [s.name for s in selection.servers] == ["gpu-01", "gpu-04"]
    assert [s.name for s in selection.enabled] == ["gpu-01"]
    assert selection.servers[1].reason == "smoke completion garbage"
    assert "never passed the serve gate" in selection.excluded["gpu-02"]
    assert "no previous unit" in selection.excluded["gpu-03"]
    assert "onecat_gateway_address" in selection.excluded["gpu-05"]


def test_maxconn_follows_max_num_seqs() -> None:
    assert backends.maxconn(SERVING) == 64
    assert backends.maxconn({**SERVING, "max_num_seqs": "32"}) == 32
    assert backends.maxconn({**SERVING, "max_num_seqs": None}) == backends.DEFAULT_MAX_NUM_SEQS
    assert backends.maxconn(SERVING, factor=1.5) == 96
    assert backends.maxconn(SERVING, override=10) == 10


def test_a_gateway_without_a_serving_node_is_refused_with_reasons() -> None:
    selection = backends.select({"gpu-01": None,
                                 "gpu-02": {**SERVING, "in_rotation": False, "reason": "gate"}})
    with pytest.raises(backends.NoBackendError) as error:
        backends.require_backend(selection, "gw-1")
    message = str(error.value)
    assert "gw-1 has no serving back end" in message and "gpu-01" in message
    assert "gpu-02: gate" in message
    backends.require_backend(backends.select({"gpu-01": SERVING}))


def test_server_names_are_safe_for_haproxy() -> None:
    assert backends.server_name("node 1/a") == "node_1_a"


def test_key_file_parses_and_renders_hashes_only() -> None:
    parsed = keys.parse_keys("# comment\n\nalice sk-0123456789abcdef0\n"
                             "batch  sk-fedcba9876543210f  120\n")
    assert [(k.name, k.rate_per_minute) for k in parsed] == [("alice", 0), ("batch", 120)]
    rendered = keys.render_key_map(parsed)
    assert "sk-0123" not in rendered
    assert hashlib.sha256(b"sk-0123456789abcdef0").hexdigest() + " alice\n" in rendered
    assert keys.rate_limits(parsed) == {"batch": 120}


@pytest.mark.parametrize(("text", "fragment"), [
    ("alice\n", "expected 'NAME KEY"),
    ("al/ice sk-0123456789abcdef0\n", "name 'al/ice'"),
    ("alice short\n", "at least 16"),
    ("alice sk-0123456789abcdef0 fast\n", "whole number"),
    ("alice sk-0123456789abcdef0 0\n", "whole number"),
    ("alice sk-0123456789abcdef0\nalice sk-0123456789abcdef1\n", "already used on line 1"),
    ("alice sk-0123456789abcdef0\nbob sk-0123456789abcdef0\n", "same as on line 1"),
    ("# nothing\n", "holds no key"),
    ("alice sk-0123456789abcdéf0\n", "bearer-token characters"),
])
def test_malformed_key_files_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(keys.KeyFileError) as error:
        keys.parse_keys(text, "keys.txt")
    assert fragment in str(error.value)
    assert "sk-0123456789abcdef" not in str(error.value)  # never echo a key


def test_key_file_must_be_owner_only() -> None:
    keys.check_mode_bits(0o100600)
    with pytest.raises(keys.KeyFileError, match="chmod 600"):
        keys.check_mode_bits(0o100644, "keys.txt")


STAT = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,last_chk,last_agt,\n"
    "onecat,FRONTEND,,,3,5,4096,40,OPEN,,,\n"
    "onecat_nodes,gpu-01,0,0,2,4,64,30,UP,L7OK,via agent : up,\n"
    "onecat_nodes,gpu-02,0,0,0,2,64,10,MAINT,,via agent : down (gate failed),\n"
    "onecat_nodes,BACKEND,0,0,2,5,,40,UP,,,\n"
)


class FakeSocket:
    """HAProxy's answers, scripted: sessions on gpu-01 drop by one per `show stat`."""

    def __init__(self, sessions: list[int]) -> None:
        self.sessions = sessions
        self.sent: list[str] = []

    def __call__(self, address: str, command: str, timeout: float) -> str:
        self.sent.append(command)
        if command == "show stat":
            scur = self.sessions.pop(0) if len(self.sessions) > 1 else self.sessions[0]
            return STAT.replace("onecat_nodes,gpu-01,0,0,2", f"onecat_nodes,gpu-01,0,0,{scur}")
        if command.startswith("set server onecat_nodes/gpu-01 "):
            return "\n"
        return "No such server.\n"


def test_stat_parsing_and_admin_state() -> None:
    rows = parse_stat(STAT)
    assert rows[1]["svname"] == "gpu-01" and rows[1]["scur"] == "2"
    assert admin_state(rows[2]) == "maint" and admin_state({"status": "DRAIN (agent)"}) == "drain"
    assert admin_state(rows[1]) == "ready"
    with pytest.raises(RuntimeApiError):
        parse_stat("Unknown command\n")


def _rows(**statuses: str) -> list[dict[str, str]]:
    return ([{"pxname": "onecat_nodes", "svname": "FRONTEND", "status": "OPEN"}]
            + [{"pxname": "onecat_nodes", "svname": name.replace("_", "-"), "status": status}
               for name, status in statuses.items()]
            + [{"pxname": "onecat_nodes", "svname": "BACKEND", "status": "UP"},
               {"pxname": "onecat_keyless", "svname": "fleet-a", "status": "UP"}])


@pytest.mark.parametrize(("status", "taking"), [
    ("UP", True), ("UP 1/3", True), ("no check", True), ("DOWN", False), ("DOWN 1/2", False),
    ("DRAIN", False), ("DRAIN (agent)", False), ("MAINT", False), ("MAINT (via x/y)", False),
    ("MAINT (resolution)", False), ("NOLB", False), ("", False)])
def test_in_rotation_follows_haproxys_status_column(status: str, taking: bool) -> None:
    assert in_rotation(status) is taking


def test_the_last_node_in_rotation_is_the_one_whose_peers_all_take_nothing() -> None:
    # fleet-a rebooted and waits for its burn-in (its agent answers maint), fleet-c is held
    # by its health, fleet-d fails its checks: fleet-b alone takes requests.
    states = rotation(_rows(fleet_a="MAINT", fleet_b="UP", fleet_c="MAINT", fleet_d="DOWN"),
                      "onecat_nodes")
    # The other back end's row of the same name is not one of them.
    assert states == {"fleet-a": "MAINT", "fleet-b": "UP", "fleet-c": "MAINT", "fleet-d": "DOWN"}
    assert last_in_rotation(states, "fleet-b")
    # A node that takes nothing is never "the last": taking it out changes nothing for clients.
    assert not last_in_rotation(states, "fleet-a")
    assert not last_in_rotation(states, "no-such-node")
    assert not last_in_rotation({"fleet-a": "UP 1/3", "fleet-b": "UP"}, "fleet-b")
    assert not last_in_rotation({"fleet-a": "no check", "fleet-b": "UP"}, "fleet-b")
    assert last_in_rotation({"fleet-b": "UP"}, "fleet-b")


def test_wait_idle_polls_until_no_session() -> None:
    fake = FakeSocket([3, 2, 1, 0])
    clock = iter(range(100))
    runtime = Runtime("/run/haproxy/admin.sock", execute_fn=fake)
    runtime.set_state("onecat_nodes", "gpu-01", "drain")
    idle, left, _ = runtime.wait_idle("onecat_nodes", "gpu-01", timeout=30,
                                      clock=lambda: float(next(clock)), sleep=lambda s: None)
    assert idle and left == 0
    assert fake.sent[0] == "set server onecat_nodes/gpu-01 state drain"
    assert fake.sent.count("show stat") == 4


def test_wait_idle_gives_up_at_the_timeout() -> None:
    clock = iter(range(100))
    runtime = Runtime("x", execute_fn=FakeSocket([5]))
    idle, left, waited = runtime.wait_idle("onecat_nodes", "gpu-01", timeout=3,
                                           clock=lambda: float(next(clock)),
                                           sleep=lambda s: None)
    assert not idle and left == 5 and waited >= 3


def test_refusals_of_the_runtime_api_are_errors() -> None:
    runtime = Runtime("x", execute_fn=FakeSocket([0]))
    with pytest.raises(RuntimeApiError, match="No such server"):
        runtime.set_state("onecat_nodes", "gpu-09", "maint")
    with pytest.raises(RuntimeApiError, match="state must be"):
        runtime.set_state("onecat_nodes", "gpu-01", "up")
    with pytest.raises(RuntimeApiError, match="newline"):
        runtime.command("show stat\nshutdown frontend onecat")


def test_share_is_the_difference_of_each_servers_session_count() -> None:
    from onecat.gateway.share import share

    after = STAT.replace("0,0,2,4,64,30,UP", "0,0,0,4,64,45,UP").replace(
        "0,0,0,2,64,10,MAINT", "0,0,0,2,64,15,MAINT")
    document = share(STAT, after)
    assert document["total"] == 20
    assert document["servers"]["gpu-01"] == {"requests": 15, "share": 0.75, "status": "UP"}
    assert document["servers"]["gpu-02"]["requests"] == 5


def test_a_node_cannot_add_lines_to_the_gateway_config_through_node_json() -> None:
    """node.json is the node's word: an address with a newline would add a `server` or a
    `frontend` to haproxy.cfg; a NUL in a reason would make `haproxy -c` fail for good."""
    injected = "10.0.0.12\n    server evil 203.0.113.9:80\nfrontend stolen\n    bind :9999"
    selection = backends.select({
        "gpu-01": SERVING,
        "gpu-02": {**SERVING, "address": injected},
        "gpu-03": {**SERVING, "address": "gpu 03"},
        "gpu-04": {**SERVING, "in_rotation": False, "reason": "gate\x00 failed\x1b[31m"},
        "gpu-05": {**SERVING, "serving": False, "reason": "rolled\rback\x00"},
        "gpu-06": {**SERVING, "address": "gpu_node-06.example.com"},
        "gpu-07": {**SERVING, "address": "2001:db8::7"},
    })
    assert [s.name for s in selection.servers] == ["gpu-01", "gpu-04", "gpu-06", "gpu-07"]
    for host in ("gpu-02", "gpu-03"):
        assert "neither an IP address nor a host name" in selection.excluded[host]
        assert "onecat_gateway_address" in selection.excluded[host]
    assert "\n" not in selection.excluded["gpu-02"]
    assert selection.servers[1].reason == "gate failed [31m"
    assert selection.excluded["gpu-05"] == "not serving: rolled back"


@pytest.mark.parametrize("rate", ["²", "١٢", "0", "-5", "1e3", "100000000000000000000000"])
def test_a_rate_that_is_not_ascii_digits_in_range_is_refused_by_line(rate: str) -> None:
    with pytest.raises(keys.KeyFileError, match=r"keys.txt line 1: the rate of 'alice' must "):
        keys.parse_keys(f"alice sk-0123456789abcdef0 {rate}\n", "keys.txt")


def test_the_key_file_must_be_an_owner_only_regular_file(tmp_path) -> None:
    import os

    good = tmp_path / "keys"
    good.write_text("alice sk-0123456789abcdef0 60\n")
    good.chmod(0o600)
    assert [k.name for k in keys.read_key_file(str(good))] == ["alice"]
    good.chmod(0o640)
    with pytest.raises(keys.KeyFileError, match="chmod 600"):
        keys.read_key_file(str(good))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)  # opening and reading a FIFO would wait for a writer for ever
    with pytest.raises(keys.KeyFileError, match="is not a regular file"):
        keys.read_key_file(str(fifo))
    binary = tmp_path / "binary"
    binary.write_bytes(b"alice \xff\xfe\n")
    binary.chmod(0o600)
    with pytest.raises(keys.KeyFileError, match="is not UTF-8 text"):
        keys.read_key_file(str(binary))
    with pytest.raises(OSError):
        keys.read_key_file(str(tmp_path / "missing"))


def test_a_node_state_that_is_not_an_object_is_excluded_with_its_reason():
    # node.json is written on the node: on the gateway it is untrusted input (found by
    # tests/fuzz/test_fuzz_gateway.py: `true` raised AttributeError).
    selection = backends.select({"n1": True, "n2": [1, 2], "n3": "serving"})
    assert not selection.servers
    assert set(selection.excluded) == {"n1", "n2", "n3"}
    assert all("node.json is not a JSON object" in why for why in selection.excluded.values())


# HAProxy 2.6's master CLI, `show proc` one second after a reload (captured here).
SHOW_PROC = """#<PID>          <type>          <reloads>       <uptime>        <version>
30995           master          1 [failed: 0]   0d00h00m04s     2.6.12-1+deb12u4
# workers
31157           worker          0               0d00h00m01s     2.6.12-1+deb12u4
# old workers
31005           worker          1               0d00h00m04s     2.6.12-1+deb12u4
# programs

"""


class FakeMaster(FakeSocket):
    """The admin socket (the new worker: no session) and the master CLI: the old worker's
    sessions on gpu-01 drop by one per look; the master first resets `down` connections."""

    def __init__(self, old_sessions: list[int], down: int = 0) -> None:
        super().__init__([0])
        self.old = old_sessions
        self.down = down

    def __call__(self, address: str, command: str, timeout: float) -> str:
        if address != "master":
            return super().__call__(address, command, timeout)
        self.sent.append(command)
        if self.down:
            self.down -= 1
            raise RuntimeApiError("master does not answer: [Errno 104] Connection reset by peer")
        if command == "show proc":
            return SHOW_PROC
        assert command == "@!31005 show stat", command
        scur = self.old.pop(0) if len(self.old) > 1 else self.old[0]
        return STAT.replace("onecat_nodes,gpu-01,0,0,2", f"onecat_nodes,gpu-01,0,0,{scur}")


def test_old_workers_are_read_from_show_proc() -> None:
    assert old_workers(SHOW_PROC) == [31005]
    assert old_workers(SHOW_PROC.replace("# old workers\n31005", "# old workers\n")) == []


def test_a_drain_waits_for_the_old_workers_sessions_after_a_reload() -> None:
    clock = iter(range(100))
    fake = FakeMaster([2, 1, 0], down=2)  # the master re-executes for two looks
    runtime = Runtime("admin", execute_fn=fake, master="master")
    idle, left, waited = runtime.wait_idle("onecat_nodes", "gpu-01", timeout=30,
                                           clock=lambda: float(next(clock)),
                                           sleep=lambda s: None)
    assert idle and left == 0
    assert fake.sent.count("@!31005 show stat") == 3 and waited >= 4
    # Without the master CLI the new worker alone says idle at once: the defect it fixes.
    assert Runtime("admin", execute_fn=FakeMaster([2]))\
        .wait_idle("onecat_nodes", "gpu-01", timeout=30)[0]


def test_a_master_that_never_answers_counts_no_old_session_after_its_grace() -> None:
    ticks = iter(range(100))
    runtime = Runtime("admin", execute_fn=FakeMaster([0], down=1000), master="master")
    idle, left, waited = runtime.wait_idle("onecat_nodes", "gpu-01", timeout=300,
                                           clock=lambda: float(next(ticks)),
                                           sleep=lambda s: None)
    assert idle and left == 0 and waited < 300


def test_a_nodes_number_that_is_not_a_sane_whole_number_leaves_it_out_in_one_line() -> None:
    """node.json is the node's word (issue 49): `1e400` is inf, and int(inf) raised
    OverflowError inside gateway_config, which blocked every gateway change; `1e12` became
    `maxconn 1000000000000`. Such a node is left out with the reason; the others serve."""
    from onecat.gateway.backends import MAX_NUM_SEQS_CAP, select

    good = {"serving": True, "address": "10.0.0.5", "port": 8000, "max_num_seqs": 64}
    for key, value in (("max_num_seqs", float("inf")), ("max_num_seqs", 1e12),
                       ("max_num_seqs", True), ("max_num_seqs", MAX_NUM_SEQS_CAP + 1),
                       ("agent_port", float("inf")), ("agent_port", 70000),
                       ("port", float("nan"))):
        selection = select({"bad": {**good, key: value}, "ok": good})
        assert [s.name for s in selection.servers] == ["ok"], (key, value)
        why = selection.excluded["bad"]
        assert key in why, why
        assert "run the serve stage on it again" in why and why.isprintable(), why
    assert select({"n": {**good, "max_num_seqs": "64"}}).servers[0].maxconn == 64
    assert select({"n": {**good, "max_num_seqs": 64.0}}).servers[0].maxconn == 64
    assert select({"n": {**good, "max_num_seqs": None}}).servers[0].maxconn == 256


def test_a_servers_hash_id_comes_from_its_name_alone() -> None:
    """Issue 51: HAProxy's consistent hash places a server by its id; an id by position would
    move node-c's conversations when node-b joins or is left out."""
    three = {n: {**SERVING, "address": "10.0.0.1"} for n in ("node-a", "node-b", "node-c")}
    ids = {s.name: s.hash_id for s in backends.select(three).servers}
    without_b = {n: three[n] for n in ("node-a", "node-c")}
    two = {s.name: s.hash_id for s in backends.select(without_b).servers}
    assert two == {n: ids[n] for n in two}
    assert len(set(ids.values())) == 3
    assert all(0 < i < backends.HASH_ID_SPACE for i in ids.values())
    assert backends.select(three).servers[0].as_dict()["hash_id"] == ids["node-a"]


def test_two_names_on_one_hash_id_are_told_apart_in_name_order(monkeypatch) -> None:
    monkeypatch.setattr(backends, "HASH_ID_SPACE", 3)  # ids 1 and 2 only: names meet
    ids = backends.hash_ids(["b", "a", "b"])
    assert sorted(ids.values()) == [1, 2]
    assert ids["a"] == int.from_bytes(hashlib.sha256(b"a").digest()[:4], "big") % 2 + 1
    with pytest.raises(ValueError, match="more servers than ids"):
        backends.hash_ids(["a", "b", "c"])
