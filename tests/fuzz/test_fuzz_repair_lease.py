"""Fuzz what reaches the repair lease server on the gateway host: request bodies, methods, paths
and tokens from the network, and its own state file after a crash or an edit.

The contracts under test:
- requests: Service.handle answers every request with a known status and a JSON object (never
  an exception); 200 on /v1/lease only for the body's own node with its own token (made from
  the secret or, after a rotation, the retiring one; never another secret's); the book
  never holds more than max_parallel leases, every holder a valid name with a printable reason
  of at most 200 characters; the book saved after each change loads back the same;
- state file: lease.loads gives a book of valid leases (unique names, finite times, expiries
  at most a day ahead) and a one-line problem, or an empty book, for any text.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import tempfile
from pathlib import Path

import pytest
from fuzzkit import JSON, dumps, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.repair import lease, lease_server

SECRET = b"fuzz-secret-0123456789abcdefghijklmnopqrstuv"
# After a rotation (issue 49): the replaced secret's tokens open too; a third one's never.
RETIRING = b"fuzz-retiring-0123456789abcdefghijklmnopqrs"
STRANGER = b"fuzz-stranger-0123456789abcdefghijklmnopqrs"
NODES = ["n1", "n2", "gpu-node-03", "a" * 253]
NOW = 1_800_000_000.0


def token(node: str, secret: bytes = SECRET) -> str:
    return hmac.new(secret, node.encode(), hashlib.sha256).hexdigest()


HOSTILE = st.sampled_from([
    "n1\nfrontend x", "@admin", "", " n1", "n1 ", "é", "a" * 254, "../etc", "n1\0",
    "\x1b[2J", "NaN", "1e400", "-1", "n2",
])
NODE = st.sampled_from(NODES) | HOSTILE | st.text(max_size=20)
TTL = (st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**20), 10**20)
       | st.sampled_from([0, 1, 59, 60, 86400, 86401]) | JSON)
GOOD = {"node": "n1", "reason": "reset: Xid 79", "ttl_s": 600}
BODY = (mutated(GOOD, max_edits=3)
        | st.fixed_dictionaries({"node": NODE, "reason": st.text(max_size=300) | JSON,
                                 "ttl_s": TTL})
        | JSON)
RAW = (BODY.map(lambda body: dumps(body).encode("utf-8", "surrogatepass"))
       | st.binary(max_size=64) | st.sampled_from([b"", b"[" * 5000, b"x" * 5000, b"{"])
       | st.none())
AUTH = (st.tuples(st.sampled_from([*NODES, "@admin", "n9"]),
                  st.sampled_from([SECRET, RETIRING, STRANGER]))
        .map(lambda pair: f"Bearer {token(*pair)}")
        | st.sampled_from([None, "", "Bearer", "Bearer " + "0" * 64, "Basic x", "bearer  x"])
        | st.text(max_size=80))
ANY_REQUEST = st.tuples(
    st.sampled_from(["POST", "GET", "PUT", "DELETE", "HEAD"]) | st.text(max_size=6),
    st.sampled_from(["/v1/lease", "/v1/release", "/v1/leases", "/v1/lease?x=1", "/", "//v1/lease"])
    | st.text(max_size=12),
    AUTH, RAW, st.none() | NODE)


@st.composite
def REQUEST(draw: st.DrawFn) -> tuple:
    """Mostly a node's own well-formed take or release with a body mutated a little (so that
    grants, renewals, refusals and releases happen), sometimes anything at all."""
    kind = draw(st.sampled_from(["take", "take", "take", "release", "list", "any"]))
    if kind == "any":
        return draw(ANY_REQUEST)
    node = draw(st.sampled_from(NODES))
    secret = draw(st.sampled_from([SECRET, SECRET, RETIRING, STRANGER]))
    auth = f"Bearer {token(draw(st.sampled_from([node, node, node, '@admin', 'n9'])), secret)}"
    if kind == "list":
        return "GET", "/v1/leases", auth, None, draw(st.sampled_from([node, None, "x y"]))
    if kind == "release":
        body = draw(st.just({"node": node}) | mutated({"node": node}, max_edits=1))
        return "POST", "/v1/release", auth, dumps(body).encode(), None
    body = draw(mutated({**GOOD, "node": node}, max_edits=1)
                | st.fixed_dictionaries({"node": st.just(node), "reason": st.text(max_size=300),
                                         "ttl_s": TTL}))
    return "POST", "/v1/lease", auth, dumps(body).encode("utf-8", "surrogatepass"), None


STATUSES = {200, 400, 401, 404, 405, 409, 411, 413}


@pytest.fixture(scope="module")
def state_dir():
    with tempfile.TemporaryDirectory(prefix="onecat-fuzz-lease-") as folder:
        yield Path(folder)


def _take(node: str, ttl: object = 600, auth: str | None = None) -> tuple:
    body = dumps({"node": node, "reason": "reset", "ttl_s": ttl}).encode()
    return "POST", "/v1/lease", f"Bearer {token(auth or node)}", body, None


def _release(node: str, auth: str | None = None) -> tuple:
    return ("POST", "/v1/release", f"Bearer {token(auth or node)}",
            dumps({"node": node}).encode(), None)


@settings(max_examples=examples(150), deadline=None)
# The bound reached (a third node refused), a release by the admin, a renewal, an expiry.
@example(requests=[_take("n1"), _take("n2"), _take("gpu-node-03"), _release("n1", "@admin"),
                   _take("gpu-node-03"), _take("n2", 1e9), _take("n1", "NaN"),
                   _take("n1", auth="n2")], ticks=[0, 1, 2, 3, 4, 5, 700, 0])
@given(requests=st.lists(REQUEST(), min_size=1, max_size=8),
       ticks=st.lists(st.floats(0, 300), min_size=8, max_size=8))
@fuzz("repair lease: requests to the lease server")
def test_fuzz_lease_requests(state_dir: Path, requests: list, ticks: list[float]) -> None:
    state = state_dir / "leases.json"
    state.unlink(missing_ok=True)
    clock = [NOW]
    lines: list[str] = []
    service = lease_server.Service(str(state), SECRET, 2, min_ttl_s=60,
                                   clock=lambda: clock[0], log=lines.append, retiring=RETIRING)
    for (method, path, auth, body, node_header), tick in zip(requests, ticks, strict=False):
        clock[0] += tick
        status, answer = service.handle(method, path, auth, body, node_header)
        assert status in STATUSES, (status, answer)
        json.dumps(answer, allow_nan=False)  # the answer is plain JSON
        if status in (200, 409) and path.split("?")[0] == "/v1/lease":
            sent = json.loads(body)
            assert auth in (f"Bearer {token(sent['node'])}",
                            f"Bearer {token(sent['node'], RETIRING)}")
            holders = answer["holders"]
            assert answer["granted"] == (status == 200)
            assert (sent["node"] in [h["node"] for h in holders]) == answer["granted"]
        assert len(service.book.leases) <= 2
        for held in service.book.leases:
            assert lease.NODE.fullmatch(held.node) and held.node != "@admin"
            assert held.reason.isprintable() and len(held.reason) <= lease.REASON_MAX
            assert math.isfinite(held.expires) and held.expires <= clock[0] + lease.MAX_TTL_S
    assert all("\n" not in line and line.isprintable() for line in lines)
    if state.exists():
        # Every change was saved: the file holds the book the server holds.
        assert lease.loads(state.read_text(), clock[0]) == (service.book, "")


STATE = (mutated({"version": 1, "leases": [
    {"node": "n1", "reason": "reset", "since": NOW, "expires": NOW + 600},
    {"node": "n2", "reason": "reboot", "since": NOW, "expires": NOW + 60}]}, max_edits=4)
    | JSON)


@settings(max_examples=examples(300), deadline=None)
@given(document=STATE, garble=st.sampled_from(["", "cut", "bytes"]))
@fuzz("repair lease: the state file")
def test_fuzz_lease_state_file(document: object, garble: str) -> None:
    text: str | bytes = dumps(document)
    if garble == "cut":
        text = text[: len(text) // 2]
    elif garble == "bytes":
        text = text.encode("utf-8", "surrogatepass")[:-1] + b"\xff"
    book, problem = lease.loads(text, NOW)
    assert "\n" not in problem and problem.isprintable()
    names = [held.node for held in book.leases]
    assert len(names) == len(set(names))
    for held in book.leases:
        assert lease.NODE.fullmatch(held.node)
        assert math.isfinite(held.since) and math.isfinite(held.expires)
        assert held.expires <= NOW + lease.MAX_TTL_S
        assert held.reason.isprintable() and len(held.reason) <= lease.REASON_MAX
    assert lease.loads(lease.dumps(book), NOW) == (book, "")
