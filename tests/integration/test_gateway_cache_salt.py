"""Each client key's prefix cache kept apart (issue 49 item 6), with a real HAProxy on loopback
(the role's template, two client keys) in front of a stand-in engine that loads the serve
role's key guard and caches prefixes as the fork does (a request's cache_salt is the first
block's extra hash key, tests/standin_engine/standin_vllm/kvcache.py). The gateway names the
tenant, the guard salts the body: alice's repeated prompt hits her cache, bob's same prompt
does not, and a client that sends another tenant's name in the header changes nothing."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "standin_engine"))
from gateway_harness import Engine, gateway_vars, haproxy, wait_until  # noqa: E402

from onecat.gateway import keys  # noqa: E402
from onecat.gateway.runtime import Runtime, rotation  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None,
                                reason="haproxy is not installed (bootstrap.sh installs it)")

ENGINE_KEY, METRICS_KEY = "e" * 32, "m" * 32
ALICE, BOB = "sk-alice-0123456789abcdef", "sk-bob-0123456789abcdef0"
GUARD = {"PYTHONPATH": f"{REPO / 'roles' / 'vllm_serve' / 'files'}:"
                       f"{REPO / 'tests' / 'standin_engine'}",
         "VLLM_API_KEY": ENGINE_KEY, "ONECAT_METRICS_KEY": METRICS_KEY,
         "ONECAT_GUARD_OPEN_PATHS": "/health"}  # the harness's keyless readiness poll
PROMPT = " ".join(f"word{i}" for i in range(400))


def complete(url: str, key: str, body: dict | None = None,
             headers: dict[str, str] | None = None) -> int:
    data = json.dumps(body or {"model": "standin-model", "prompt": PROMPT, "max_tokens": 2,
                               "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=data, headers={
        "content-type": "application/json", "authorization": f"Bearer {key}", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def hits(engine: Engine) -> int:
    request = urllib.request.Request(engine.url + "/metrics",
                                     headers={"authorization": f"Bearer {METRICS_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r"^vllm:prefix_cache_hits_total(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert found, text[-2000:]
    return int(float(found.group(1)))


def test_each_client_keys_prefix_cache_is_its_own(tmp_path: Path) -> None:
    engine = Engine(tmp_path, "node-a", env=GUARD,
                    args=["--middleware", "onecat_guard.Guard", "--enable-prefix-caching"])
    try:
        engine.start()
        key_map = tmp_path / "keys.map"
        key_map.write_text(keys.render_key_map(keys.parse_keys(f"alice {ALICE}\nbob {BOB}\n")))
        variables = gateway_vars(tmp_path, [engine], gateway_engine_api_key=ENGINE_KEY,
                                 gateway_key_map_path=str(key_map))
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: rotation(runtime.stat(), "onecat_nodes")
                              .get("node-a", "").startswith("UP"))
            assert complete(gw.url, ALICE) == 200
            first = hits(engine)
            assert complete(gw.url, ALICE) == 200
            alice_again = hits(engine)
            assert alice_again - first >= 16 * 20, (first, alice_again)  # her prefix, cached
            assert complete(gw.url, BOB) == 200
            assert hits(engine) == alice_again  # bob's same prompt: none of her blocks
            # A client naming alice's tenant in the header: the gateway drops it.
            alice_tenant = hashlib.sha256(b"alice").hexdigest()
            assert complete(gw.url, BOB, headers={"X-Onecat-Tenant": alice_tenant}) == 200
            bob_again = hits(engine)
            assert bob_again - alice_again >= 16 * 20  # bob's own second request hits his
            # ... nor does a salt of alice's name in the body: it goes after bob's.
            body = {"model": "standin-model", "prompt": PROMPT, "max_tokens": 2,
                    "temperature": 0, "cache_salt": f"onecat-tenant-{alice_tenant}"}
            assert complete(gw.url, BOB, body) == 200
            assert hits(engine) == bob_again
            # A salt the engine refuses goes in as sent, and the engine answers it.
            assert complete(gw.url, BOB, {**body, "cache_salt": ""}) == 400
    finally:
        engine.stop()
