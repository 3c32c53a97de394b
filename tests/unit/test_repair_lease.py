"""The repair lease book (onecat/repair/lease.py): the fleet-wide bound of GPU repairs, pure."""

from __future__ import annotations

import json
import math

import pytest

from onecat.repair import lease
from onecat.repair.lease import Answer, Book

T = 1_800_000_000.0


def test_a_new_node_gets_a_lease_only_while_fewer_than_max_parallel_are_held() -> None:
    book, first = lease.take(Book(), "n1", "reset: Xid 79", 600, T, max_parallel=2)
    book, second = lease.take(book, "n2", "reboot", 600, T + 1, max_parallel=2)
    book, third = lease.take(book, "n3", "reset", 600, T + 2, max_parallel=2)
    assert first.granted and second.granted and not third.granted
    assert first.expires == T + 600 and third.expires is None
    assert [h["node"] for h in third.holders] == ["n1", "n2"]
    assert third.holders[0] == {"node": "n1", "reason": "reset: Xid 79", "since": T,
                                "expires": T + 600}
    assert third.max_parallel == 2 and third.error == ""
    assert [held.node for held in book.leases] == ["n1", "n2"]


def test_a_holder_renews_its_own_lease_even_when_the_fleet_is_full() -> None:
    book, _ = lease.take(Book(), "n1", "reset", 600, T, max_parallel=1)
    book, renewed = lease.take(book, "n1", "reset, try 2", 900, T + 300, max_parallel=1)
    assert renewed.granted and renewed.expires == T + 1200
    assert len(book.leases) == 1
    held = book.holder("n1")
    assert held is not None and held.since == T and held.reason == "reset, try 2"
    # An empty reason keeps the one it had.
    book, _ = lease.take(book, "n1", "", 600, T + 400, max_parallel=1)
    assert book.holder("n1").reason == "reset, try 2"


def test_expired_leases_are_dropped_on_every_call() -> None:
    book, _ = lease.take(Book(), "n1", "reset", 60, T, max_parallel=1)
    _, refused = lease.take(book, "n2", "reset", 60, T + 59.9, max_parallel=1)
    assert not refused.granted
    book, granted = lease.take(book, "n2", "reset", 60, T + 60, max_parallel=1)
    assert granted.granted and [h["node"] for h in granted.holders] == ["n2"]
    live, gone = lease.drop_expired(book, T + 1000)
    assert live == Book() and [held.node for held in gone] == ["n2"]
    # An expired holder asking again gets a new lease (new since), not a renewal.
    book, again = lease.take(book, "n2", "reset", 60, T + 500, max_parallel=1)
    assert again.granted and book.holder("n2").since == T + 500


def test_release_frees_the_place_and_says_whether_a_lease_was_held() -> None:
    book, _ = lease.take(Book(), "n1", "reset", 600, T, max_parallel=1)
    book, released = lease.release(book, "n1", T + 10)
    assert released and book == Book()
    book, released = lease.release(book, "n1", T + 11)
    assert not released
    _, granted = lease.take(book, "n2", "reset", 600, T + 12, max_parallel=1)
    assert granted.granted
    expired, _ = lease.take(Book(), "n3", "reset", 60, T, max_parallel=1)
    assert lease.release(expired, "n3", T + 61) == (Book(), False)


@pytest.mark.parametrize(("fleet", "configured", "bound"), [
    (24, 3, 3), (24, 0, 2), (9, 0, 1), (0, 0, 1), (10, 0, 1), (19, 0, 1), (20, 0, 2),
    (200, 0, 20), (3, 5, 5),
])
def test_max_parallel_is_the_configured_bound_or_ten_percent_of_the_fleet(fleet, configured,
                                                                          bound) -> None:
    assert lease.max_parallel_for(fleet, configured) == bound


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError):
        lease.max_parallel_for(10, -1)


@pytest.mark.parametrize("node", ["", "a b", "n1\n", "../x", "é", "a" * 254, None, 5, "@admin"])
def test_a_node_name_the_token_cannot_carry_is_refused(node) -> None:
    with pytest.raises(ValueError):
        lease.take(Book(), node, "reset", 600, T, max_parallel=1)


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -1, 0, "600", True, None])
def test_a_ttl_that_is_no_positive_finite_number_is_refused(ttl) -> None:
    with pytest.raises(ValueError):
        lease.take(Book(), "n1", "reset", ttl, T, max_parallel=1)


def test_the_server_clamps_the_ttl_and_cleans_the_reason() -> None:
    assert lease.clamp_ttl(1) == 60 and lease.clamp_ttl(10**9) == 86400
    assert lease.clamp_ttl(1, low=0.5) == 1
    for bad in (math.nan, math.inf, "60", True, None):
        with pytest.raises(ValueError):
            lease.clamp_ttl(bad)
    assert lease.clean_reason("reset\n\x1b[2J GPU é") == "reset??[2J GPU ?"
    assert len(lease.clean_reason("x" * 1000)) == 200
    assert lease.clean_reason(5) == ""


def test_the_book_round_trips_through_its_json() -> None:
    book, _ = lease.take(Book(), "n1", "reset", 600, T, max_parallel=2)
    book, _ = lease.take(book, "n2", "reboot", 600, T + 1, max_parallel=2)
    again, problem = lease.loads(lease.dumps(book), T + 2)
    assert again == book and problem == ""


@pytest.mark.parametrize("text", [
    "", "not json", b"\xff\xfe\x00garbage", "[]", "5", "null", '{"leases": 5}',
    '{"leases": {"n1": {}}}', "[" * 100000 + "]" * 100000,
])
def test_a_garbled_state_file_is_an_empty_book_with_the_reason(text) -> None:
    book, problem = lease.loads(text, T)
    assert book == Book() and problem and "\n" not in problem


def test_a_lease_of_the_wrong_shape_is_left_out_and_a_far_expiry_cut() -> None:
    good = {"node": "n1", "reason": "reset", "since": T, "expires": T + 600}
    text = json.dumps({"version": 1, "leases": [
        good, 5, {"node": "a b", "since": T, "expires": T + 1},
        {"node": "n2", "since": "x", "expires": T + 1}, {**good, "reason": 7},
        {"node": "n3", "reason": "x\n", "since": T, "expires": 1e300},
        {"node": "n4", "since": T, "expires": float("nan")},
    ]}, allow_nan=True)
    book, problem = lease.loads(text, T)
    assert [held.node for held in book.leases] == ["n1", "n3"]
    assert book.holder("n3").expires == T + lease.MAX_TTL_S
    assert book.holder("n3").reason == "x?"
    assert "lease 1 is not an object" in problem and "repeats a node" in problem
    assert "lease 6 (n4) has no finite since/expires" in problem


def test_an_answer_is_read_back_only_in_its_shape() -> None:
    answer = Answer(True, T + 600, [{"node": "n1"}], 1)
    assert lease.answer_from(json.loads(json.dumps(answer.as_dict()))) == answer
    for bad in ([], {"granted": "yes"}, {"granted": True}, {"granted": False, "holders": 5},
                {"granted": False, "expires": "soon"}, {"granted": False, "max_parallel": 1.5},
                {"granted": False, "holders": [1]}):
        with pytest.raises(ValueError):
            lease.answer_from(bad)
