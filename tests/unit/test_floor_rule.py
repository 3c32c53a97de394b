"""The fleet's floor (issue 46): which causes may breach it, how many nodes it keeps, and the
lease server's answer to nodes that all want out at once (onecat/repair/floor.py,
lease_server.Service.out, with the rotation given as a function instead of HAProxy)."""

from __future__ import annotations

import json

import pytest

from onecat.gateway.runtime import RuntimeApiError
from onecat.repair import floor, lease_server

SECRET = b"s3cret-for-tests-0123456789abcdefghijklmnop"


def test_only_causes_that_make_answers_wrong_may_breach_the_floor() -> None:
    for code in ("quality", "ecc_volatile_uncorrected", "ecc_uncorrected", "gpu_lost", "xid",
                 "pages_retired_double_bit"):
        assert floor.wrong_answers([code]), code
    for code in ("throttle_sustained", "cannot_look", "retired_pages_pending", "foreign_process",
                 "gpu_unreadable", "nvml_read", "remapped_rows", "gpu_count", "retired_pages",
                 "display_active"):
        assert not floor.wrong_answers([code]), code
    assert floor.wrong_answers(["throttle_sustained", "gpu_lost"])
    assert not floor.wrong_answers([])


@pytest.mark.parametrize(("spec", "fleet", "nodes"), [
    ("1", 3, 1), ("0", 3, 0), (2, 3, 2), ("25%", 8, 2), ("25%", 9, 3), ("100%", 4, 4),
    ("0%", 4, 0), (" 50% ", 3, 2)])
def test_the_floor_is_a_count_or_a_share_rounded_up(spec: str, fleet: int, nodes: int) -> None:
    assert floor.count(spec, fleet) == nodes


@pytest.mark.parametrize("spec", ["-1", "x", "150%", "nan%", "", "1.5", "%"])
def test_a_floor_that_is_neither_is_one_line_that_says_so(spec: str) -> None:
    with pytest.raises(ValueError, match="neither a count of nodes"):
        floor.count(spec, 4)


def test_the_last_nodes_stay_and_a_node_out_already_may_go() -> None:
    serving = {"a", "b", "c"}
    assert floor.decide("a", serving, set(), 2)[0]
    granted, why = floor.decide("b", serving, {"a"}, 2)
    assert not granted and "1 other node(s) in rotation (c), the floor is 2" in why
    assert floor.decide("d", serving, {"a", "b"}, 3)[0]  # not in rotation: nothing to keep
    assert floor.decide("a", serving, {"b", "c"}, 0)[0]


def _service(tmp_path, serving, min_in_rotation: int = 1, clock=lambda: 1000.0):
    lines: list[str] = []
    service = lease_server.Service(str(tmp_path / "leases.json"), SECRET, 1, min_ttl_s=1,
                                   clock=clock, log=lines.append,
                                   min_in_rotation=min_in_rotation, rotation=serving)
    return service, lines


def _out(service, node: str) -> tuple[int, dict]:
    body = json.dumps({"node": node, "reason": "clocks cut by heat", "ttl_s": 120}).encode()
    token = lease_server.token_for(SECRET, node)
    return service.handle("POST", "/v1/out", f"Bearer {token}", body)


def test_every_node_hot_at_once_leaves_the_floor_in_rotation(tmp_path) -> None:
    """A hot room: every node's watch asks in the same second, before the gateway shows any of
    them out. The grants of a moment ago count: one node stays, the others go."""
    now = [1000.0]
    service, lines = _service(tmp_path, lambda: {"a", "b", "c"}, clock=lambda: now[0])
    answers = {node: _out(service, node) for node in ("a", "b", "c")}
    assert [answers[n][0] for n in "abc"] == [200, 200, 409]
    assert answers["c"][1]["granted"] is False and answers["c"][1]["floor"] == 1
    assert "the fleet's floor keeps c in: 0 other node(s) in rotation" in answers["c"][1]["why"]
    assert any("refused out node=c" in line for line in lines)
    # The grants expire (their ttl): the rotation the gateway shows decides again.
    now[0] += 121
    assert _out(service, "c")[0] == 200


def test_a_rotation_that_cannot_be_read_keeps_the_node_in(tmp_path) -> None:
    def unreadable() -> set[str]:
        raise RuntimeApiError("HAProxy's admin socket /run/haproxy/admin.sock does not answer")
    service, _ = _service(tmp_path, unreadable)
    status, answer = _out(service, "a")
    assert status == 503 and answer["granted"] is False
    assert "the gateway's rotation cannot be read" in answer["why"]


def test_no_floor_or_no_gateway_grants_every_way_out(tmp_path) -> None:
    service, _ = _service(tmp_path, lambda: {"a"}, min_in_rotation=0)
    assert _out(service, "a")[0] == 200
    service, _ = _service(tmp_path, None)
    assert _out(service, "a") [0] == 200


def test_out_takes_the_nodes_own_token(tmp_path) -> None:
    service, _ = _service(tmp_path, lambda: {"a", "b"})
    body = json.dumps({"node": "a", "reason": "x", "ttl_s": 60}).encode()
    wrong = lease_server.token_for(SECRET, "b")
    assert service.handle("POST", "/v1/out", f"Bearer {wrong}", body)[0] == 401
    assert service.handle("GET", "/v1/out", f"Bearer {wrong}", None)[0] == 405


@pytest.mark.parametrize("spec", ["1", "0", "25%", "100%", "100.0%", "99.9%", "0%", 7])
@pytest.mark.parametrize("fleet", [1, 3, 8])
def test_every_floor_the_input_rule_lets_through_counts(spec, fleet) -> None:
    """onecat/validate.py's rule (roles and the monitoring stage check with it) and the
    floor's own count agree: a share above 100 % (e.g. "100.5%") was let through by the rule,
    then refused by the count (found by tests/fuzz/test_fuzz_monitoring.py)."""
    from onecat.validate import floor as floor_rule

    assert floor_rule(spec) is None
    assert 0 <= floor.count(spec, fleet) <= max(fleet, int(spec) if str(spec).isdigit() else 0)
    for refused in ("100.5%", "101%", "150%"):
        assert floor_rule(refused) is not None


def test_the_floor_holds_at_every_gateway_not_at_their_intersection(tmp_path) -> None:
    """Several gateways (--other-gateway-stats): each has its own clients and may see a node
    another does not. A node leaves only when every gateway keeps the floor without it. Here
    this gateway sees a and b, the other b and c, and the floor is one: b may go (a stays
    here, c there), which a floor on the nodes both see ({b}) would refuse; once b is going,
    a may not leave this gateway and c may not leave the other."""
    lines: list[str] = []
    service = lease_server.Service(
        str(tmp_path / "leases.json"), SECRET, 1, min_ttl_s=1, clock=lambda: 1000.0,
        log=lines.append, min_in_rotation=1, rotation=lambda: {"a", "b"},
        other_gateways=[("gw-2:8404", lambda: {"b", "c"})])
    assert _out(service, "b")[0] == 200  # each gateway keeps one (a here, c there)
    # b is going out now: a may not also leave this gateway, c not the other.
    status, answer = _out(service, "a")
    assert status == 409 and "floor" in answer["why"] and "gw-2" not in answer["why"]
    status, answer = _out(service, "c")
    assert status == 409 and answer["why"].endswith("at gateway gw-2:8404"), answer
    assert answer["in_rotation"] == ["a", "b"]  # this gateway's view


def test_another_gateway_that_cannot_be_read_keeps_the_node_in(tmp_path) -> None:
    def unreadable() -> set[str]:
        raise OSError("connection refused")
    service = lease_server.Service(
        str(tmp_path / "leases.json"), SECRET, 1, min_ttl_s=1, clock=lambda: 1000.0,
        log=lambda line: None, min_in_rotation=1, rotation=lambda: {"a", "b"},
        other_gateways=[("gw-2:8404", unreadable)])
    status, answer = _out(service, "a")
    assert status == 503 and answer["granted"] is False
    assert answer["why"] == "the rotation at gateway gw-2:8404 cannot be read: connection refused"
