"""onecat.validate: one rule per kind of value, good values pass, hostile ones are refused."""

from __future__ import annotations

import json

import pytest

from onecat import validate
from onecat.gateway import backends, keys

# What every kind of free text must refuse: each adds a line, a word, a quote, a comment, an
# expansion or a command to haproxy.cfg, a systemd unit or a `sh -c` script.
HOSTILE = ["", " ", "\n", "\r", "\x00", "'", '"', ";", "$", "#", "\\", "%", "`", "|", "²", "\u2028"]


def hostile_variants(good: str, allowed: str = "") -> list[str]:
    """The good value with each hostile character inside it, before it and after it."""
    variants = []
    for bad in [b for b in HOSTILE[1:] if b not in allowed]:
        variants += [good + bad, bad + good, good[:1] + bad + good[1:],
                     f"{good}{bad}rm -rf /", f"{good}\n    server evil 10.6.6.6:80"]
    return variants


@pytest.mark.parametrize("value", ["10.0.0.11", "::1", "fe80::1", "::ffff:10.0.0.1",
                                   "gpu-node-01", "gpu_node_01", "node.example.com",
                                   "node.example.com.", "a" * 63, ".".join(["a" * 63] * 3)])
def test_addresses_that_pass(value):
    assert validate.address(value) is None


@pytest.mark.parametrize("value", [
    "", "10.0.0.12\n    server evil 10.6.6.6:80", "fe80::1%eth0",
    "fe80::1%x\n    server evil 10.6.6.6:80\nfrontend stolen", "-node", "node-", "a" * 64,
    ".".join(["a" * 63] * 4) + ".com", "node..x", "10.0.0.1:8000", "[::1]", "nöde", "node²",
    5, None, ["10.0.0.1"], *hostile_variants("node1")])
def test_addresses_that_are_refused(value):
    assert validate.address(value) is not None


def test_an_ipv6_zone_index_does_not_smuggle_lines_into_a_server_line():
    """Python's ipaddress takes any text after "%" (a newline too) as an IPv6 zone index; the
    node.json address check used to accept it."""
    hostile = "fe80::1%x\n    server evil 10.6.6.6:80\nfrontend stolen"
    selection = backends.select({"n1": {"serving": True, "address": hostile, "port": 8000}})
    assert not selection.servers
    assert "neither an IP address nor a host name" in selection.excluded["n1"]


@pytest.mark.parametrize(("value", "good"), [
    ("10.0.0.1", True), ("fd00::1", True), ("gw.example", False), ("10.0.0.0/24", False),
    ("10.0.0.1; ufw disable", False), ("fe80::1%eth0", False), ("", False), (10, False)])
def test_firewall_sources_are_ip_addresses_only(value, good):
    # They reach a ufw command line and a firewalld rich rule (roles/gateway node_firewall.yml).
    found = validate.problem("ip", value)
    assert (found is None) == good, found
    assert good or found == "an IPv4 or IPv6 address"


@pytest.mark.parametrize("value", ["0.0.0.0", "*", "::", "[::]", "127.0.0.1", "::1", "[::1]",
                                   "10.1.2.3", "[fe80::1]"])
def test_bind_addresses_that_pass(value):
    assert validate.bind_address(value) is None


@pytest.mark.parametrize("value", ["", "localhost", "gw.example.com", "[10.0.0.1]", "[::1",
                                   "::1]", "fe80::1%eth0", "127.0.0.1:80", "0.0.0.0\nfrontend x",
                                   "* ", 0, *hostile_variants("127.0.0.1")])
def test_bind_addresses_that_are_refused(value):
    assert validate.bind_address(value) is not None


def test_bare_address_drops_only_ipv6_brackets():
    assert validate.bare_address("[::1]") == "::1"
    assert validate.bare_address("127.0.0.1") == "127.0.0.1"


@pytest.mark.parametrize("value", [1, 80, 8000, 65535, "8000", "1"])
def test_ports_that_pass(value):
    assert validate.port(value) is None


@pytest.mark.parametrize("value", [0, "0", -1, 65536, "65536", "-1", "+80", "80.0", 80.0,
                                   " 80", "80\n", "8000\nfrontend x", "²", "٨٠", "0x50", True,
                                   None, "", "99999999999"])
def test_ports_that_are_refused(value):
    assert validate.port(value) is not None


def test_port_zero_only_where_it_means_off():
    assert validate.port(0, True) is None and validate.port("0", True) is None
    assert validate.port(-1, True) is not None
    assert "0 to turn it off" in validate.port("x", True)


@pytest.mark.parametrize(("value", "low", "high"), [(1, 1, 10), ("10", 1, 10), (0, 0, 100),
                                                    (4096, 1, 1000000)])
def test_counts_that_pass(value, low, high):
    assert validate.count(value, low, high) is None


@pytest.mark.parametrize("value", [0, 11, -1, "1.5", 1.0, "1e3", "²", "3\n", " 3", True, False,
                                   None, "", "10^23", "99999999999"])
def test_counts_that_are_refused(value):
    assert validate.count(value, 1, 10) is not None


@pytest.mark.parametrize("value", [1, 1.0, 0.5, "1.0", "2", "1000"])
def test_numbers_that_pass(value):
    assert validate.number(value, 0, 1000) is None


@pytest.mark.parametrize("value", [0, -1, "nan", float("nan"), float("inf"), "inf", "1e3",
                                   1001, "1001", "", "1.0\n", True, None, "²"])
def test_numbers_that_are_refused(value):
    assert validate.number(value, 0, 1000) is not None


@pytest.mark.parametrize("value", ["/var/lib/onecat-gateway", "/etc/haproxy/haproxy.cfg",
                                   "/run/haproxy/admin.sock", "/etc/systemd/system/vllm@1.service",
                                   "/opt/x_y.z~1+2", "/a"])
def test_paths_that_pass(value):
    assert validate.absolute_path(value) is None


@pytest.mark.parametrize("value", [
    "/", "", "relative/path", "./x", "/var/lib/../etc", "/var/./lib", "/var//lib", "/var/lib/",
    "/var/lib/x'; touch /tmp/pwned; '", "/var/lib/x y", "/etc/x,y", "/etc/x(y)", "/a:b", "/a=b",
    "/" + "a" * 256, "/" + "/".join(["a" * 200] * 25), "/var/lib/ønecat", "/var/lib/x²", None, 5,
    *hostile_variants("/var/lib/onecat")])
def test_paths_that_are_refused(value):
    assert validate.absolute_path(value) is not None


@pytest.mark.parametrize("value", ["/health", "/", "/v1/models", "/health?full=1&x=%2F",
                                   "/a;b=c", "/~user/(x)*!+,:@"])
def test_http_paths_that_pass(value):
    assert validate.http_path(value) is None


@pytest.mark.parametrize("value", [
    "", "health", "/health check", "/health\nserver evil 10.6.6.6:80", "/health#x", "/a%2",
    "/a%zz", "/é", "/a'b", '/a"b', "/a$b", "/a\\b", "/a<b>", "/a{b}", "/" + "a" * 1024,
    # ";" is an RFC 3986 path character, and a plain one to HAProxy (not a separator).
    "//\r\n", None, *hostile_variants("/health", allowed=";")])
def test_http_paths_that_are_refused(value):
    assert validate.http_path(value) is not None


@pytest.mark.parametrize(("value", "ms"), [("5s", 5000), ("200ms", 200), ("100", 100),
                                           ("2m", 120000), ("1h", 3600000), ("1d", 86400000),
                                           ("1500us", 2), (30, 30), ("24d", 24 * 86400000)])
def test_haproxy_durations_that_pass(value, ms):
    assert validate.haproxy_duration(value) is None
    assert validate.haproxy_ms(value) == ms


@pytest.mark.parametrize("value", ["", "0", "0s", "5 s", "5sec", "5S", "-5s", "1.5s", "25d",
                                   "2147484s", "5s\nfrontend stolen", "5s;", "²s", "5s ", "s",
                                   True, None, 5.0, *hostile_variants("5s")])
def test_haproxy_durations_that_are_refused(value):
    assert validate.haproxy_duration(value) is not None


def test_a_zero_duration_only_where_it_means_none():
    assert validate.haproxy_duration("0s", True) is None
    assert validate.haproxy_duration("0", True) is None
    assert validate.haproxy_duration("-1s", True) is not None


@pytest.mark.parametrize("value", ["60s", "5min", "1h 30min", "2.5s", "1d", 30, "10"])
def test_systemd_timespans_that_pass(value):
    assert validate.systemd_timespan(value) is None


@pytest.mark.parametrize("value", ["", "8s\nOnBootSec=1", "5 ; rm -rf /", "5x", "-5s", "²s",
                                   "1h  30min\n", True, None])
def test_systemd_timespans_that_are_refused(value):
    assert validate.systemd_timespan(value) is not None


@pytest.mark.parametrize("value", ["haproxy", "_haproxy", "www-data", "svc.user", "a" * 32])
def test_user_names_that_pass(value):
    assert validate.user_name(value) is None


@pytest.mark.parametrize("value", ["", "1user", "-user", "machine$", "a" * 33, "root\nuser x",
                                   "haproxy haproxy", "usér", None, 0,
                                   *hostile_variants("haproxy")])
def test_user_names_that_are_refused(value):
    assert validate.user_name(value) is not None


def test_an_empty_user_only_where_it_means_no_switch():
    assert validate.user_name("", True) is None


GOOD_KEY = "sk-3f9a0c1e2b7d4a5f8e6c9b0a1d2e3f40"


@pytest.mark.parametrize("value", [GOOD_KEY, "a" * 16, "a" * 512, "abc/def+ghi~jkl.mno_pqr=",
                                   "YWJjZGVmZ2hpamtsbW5vcA==",
                                   "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t"])
def test_keys_that_pass(value):
    assert validate.key(value) is None


@pytest.mark.parametrize("value", ["", "a" * 15, "a" * 513, GOOD_KEY + '"', GOOD_KEY + " x",
                                   GOOD_KEY + "\n", GOOD_KEY + "${HOME}", GOOD_KEY + "#",
                                   GOOD_KEY + "²", None, *hostile_variants(GOOD_KEY)])
def test_keys_that_are_refused(value):
    assert validate.key(value) is not None


def test_the_fleet_key_generator_makes_keys_of_the_shared_kind():
    """roles/vllm_serve/tasks/secrets.yml: 43 of ascii_letters and digits."""
    import string
    assert validate.key((string.ascii_letters + string.digits)[:43]) is None


def test_client_keys_follow_the_shared_key_rule():
    parsed = keys.parse_keys(f"alice {GOOD_KEY}\nbob {'b' * 512}\ncarol abc=def=0123456789\n")
    assert [k.name for k in parsed] == ["alice", "bob", "carol"]
    with pytest.raises(keys.KeyFileError, match="at least 16 and at most 512 bearer-token"):
        keys.parse_keys(f"alice {'a' * 513}\n")


def test_problems_name_the_variable_its_value_as_json_and_the_fix():
    found = validate.problems({
        "gateway_port": ["port", 8000],
        "gateway_check_path": ["http_path", "/health\n    server evil 10.6.6.6:80"],
        "gateway_retries": ["count", "²", 0, 100],
        "gateway_slowstart": ["haproxy_duration", "0s", True],
    })
    assert found == [
        'gateway_check_path "/health\\n    server evil 10.6.6.6:80" is refused: set it to '
        + validate.http_path("x"),
        'gateway_retries "\\u00b2" is refused: set it to a whole number from 0 to 100',
    ]
    assert all("\n" not in line for line in found)


def test_a_key_is_never_shown():
    secret = "short'secret\n"
    found = validate.problems({"gateway_engine_api_key": ["key", secret]})
    assert found and secret not in found[0] and json.dumps(secret) not in found[0]
    assert "(the value is not shown)" in found[0]


def test_long_values_are_cut_and_controls_escaped():
    found = validate.problems({"gateway_files_dir": ["path", "/x\x00" + "y" * 5000]})
    assert "\\u0000" in found[0] and "...(cut)" in found[0] and len(found[0]) < 600


def test_require_raises_and_unknown_kinds_are_a_bug():
    validate.require("port", 80, "port")
    with pytest.raises(validate.InputError, match=r'^port "x" is refused'):
        validate.require("port", "x", "port")
    with pytest.raises(ValueError, match="unknown kind"):
        validate.problem("colour", "red")


def test_the_filter_plugin_is_a_thin_wrapper_over_the_same_rules():
    import importlib.util
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "plugins" / "filter" / "onecat_inputs.py"
    spec = importlib.util.spec_from_file_location("onecat_inputs_plugin", source)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    filters = plugin.FilterModule().filters()
    specs = {"gateway_port": ["port", "8000\nfrontend x"]}
    assert filters["onecat_input_problems"](specs) == validate.problems(specs)
    assert filters["onecat_bare_address"]("[::1]") == "::1"
    role_link = source.parents[2] / "roles" / "gateway" / "filter_plugins" / source.name
    assert role_link.resolve() == source
