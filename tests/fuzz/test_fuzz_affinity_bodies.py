"""Fuzz the gateway's affinity routing with hostile request bodies (issue 49): a real HAProxy
on loopback (the role's template, affinity mode, client keys) in front of a node that records
what reaches it.

Contract: whatever the body (text that is no JSON, JSON of any shape, quotes and backslashes
that break a naive pattern, 100 KB), a request with a key reaches the node with an
X-Onecat-Route that is a SHA-256 in hex or with none (routed by load), HAProxy answers no 5xx
of its own, and a request without a key is refused with 401 before its body is read; HAProxy
still answers afterwards (no PCRE stack overflow took a worker down).
"""

from __future__ import annotations

import http.client
import http.server
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzzkit import JSON, dumps, examples, fuzz
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.gateway import backends, keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway_harness import Recorder, base_vars, haproxy

KEY = "sk-fuzz-0123456789abcdef"
ROUTE = re.compile(r"^[0-9A-F]{64}$")

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="needs the real haproxy binary")


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[int, Recorder]]:
    workdir = Path(tempfile.mkdtemp(prefix="onecat-fuzz-affinity-"))
    node = Recorder()
    variables = base_vars(workdir)
    states = {"node-a": {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                         "port": node.port, "max_num_seqs": 8, "agent_port": 0}}
    variables["gateway_servers"] = [s.as_dict() for s in backends.select(states).servers]
    variables["gateway_balance"] = "affinity"
    key_map = workdir / "keys.map"
    key_map.write_text(keys.render_key_map(keys.parse_keys(f"fuzz {KEY}\n")))
    variables["gateway_key_map_path"] = str(key_map)
    with haproxy(workdir, variables) as gw:
        port = int(gw.url.rsplit(":", 1)[1])
        yield port, node
    node.close()
    shutil.rmtree(workdir, ignore_errors=True)


def post(port: int, body: bytes, key: str | None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        conn.request("POST", "/v1/chat/completions", body, headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


HOSTILE = st.sampled_from([
    b'{"messages": [{"role": "system", "content": "' + b'\\"' * 3000 + b'"}]}',
    b'{"user": "' + b"\\" * 5000 + b'"}', b'{"prompt": [' + b"[" * 4000 + b"]}",
    b'{"messages": [{' + b'"a": {' * 2000 + b"}]}", b'{"user": ""}', b"\x00\xff" * 100,
    b'{"messages": [{"content": [{"type": "image_url"}]}]}', b"x" * 100_000])
BODY = HOSTILE | JSON.map(lambda value: dumps(value).encode()) | st.binary(max_size=300)


@settings(max_examples=examples(120))
@given(BODY)
@example(b'{"user": "alice", "messages": [{"role": "system", "content": "hi"}]}')
@example(b"x" * 100_000)
@example(b'{"messages": [{"role": "system", "content": "' + b'\\"' * 3000 + b'"}]}')
@fuzz("gateway: affinity under hostile bodies (real HAProxy)")
def test_any_body_is_routed_by_a_hash_or_by_load_and_never_a_5xx(gateway, body):
    port, node = gateway
    seen = len(node.routes)
    status = post(port, body, KEY)
    assert status == 200, status  # the node answers 200 to all: any other came from HAProxy
    assert len(node.routes) == seen + 1
    route = node.routes[-1]
    assert route is None or ROUTE.match(route), route
    assert post(port, body, None) == 401
