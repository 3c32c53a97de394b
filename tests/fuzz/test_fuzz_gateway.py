"""Fuzz what reaches the gateway's HAProxy configuration: the nodes' node.json (written on the
nodes: untrusted on the gateway), the client key file, and the role's own settings.

The contracts under test:
- node states: onecat.gateway.backends.select picks servers or says why not (one line each);
  the configuration rendered from them with the role's template passes the real `haproxy -c`
  and has exactly the sections of a clean one and one `server` line per selected server (a
  node cannot add a server, a frontend or a directive);
- the client key file: parse_keys gives keys of the one key alphabet with unique names and
  keys, or one KeyFileError that never shows a key; the key map has one line per key;
- role settings: onecat.validate.problems gives one printable line per bad value, and a value
  it accepts carries nothing that could end a HAProxy word or a shell word.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fuzzkit import JSON, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat import validate
from onecat.gateway import backends, keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway_harness import base_vars, render

HOSTILE = st.sampled_from([
    "10.0.0.12\n    server evil 10.6.6.6:80", "fe80::1%x\nfrontend stolen", "a b", "a\0b",
    "\x1b[2J", "10.0.0.1:80", "[::1]", "host,name", "x'y", '"', "$HOME", "%[path]", "#c",
    "::1", "10.0.0.5", "node-5.example", "é.example", "a" * 300, "",
])
TEXT = st.text(max_size=40) | HOSTILE
GOOD = {"serving": True, "in_rotation": True, "address": "10.0.0.5", "port": 8000,
        "max_num_seqs": 32, "agent_port": 8003, "reason": ""}
STATE = (mutated(GOOD, max_edits=3)
         | st.fixed_dictionaries({"serving": st.booleans(), "in_rotation": st.booleans(),
                                  "address": TEXT, "port": st.integers(-5, 70000) | TEXT,
                                  "max_num_seqs": st.integers(-5, 10**12) | TEXT | JSON
                                  | st.floats() | st.sampled_from([1e400, 1e12, True]),
                                  "agent_port": st.integers(-5, 70000) | JSON | st.floats(),
                                  "reason": TEXT})
         | st.none() | JSON)
SECTION = re.compile(r"^(global|defaults|frontend|backend|listen|userlist|peers|resolvers)\b")


def _sections(text: str) -> list[str]:
    return [line for line in text.splitlines() if SECTION.match(line)]


@pytest.fixture(scope="module")
def workdir():
    folder = Path(tempfile.mkdtemp(prefix="onecat-fuzz-gateway-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs the real haproxy binary")
@settings(max_examples=examples(60), deadline=None)
@given(nodes=st.dictionaries(st.sampled_from(["n1", "n2", "node-3"]), STATE, min_size=1,
                             max_size=3))
@example(nodes={"n1": {**GOOD, "max_num_seqs": float("inf")}, "n2": GOOD})  # issue 49
@example(nodes={"n1": {**GOOD, "max_num_seqs": 1e12}, "n2": {**GOOD, "agent_port": 1e400}})
@example(nodes={"n1": {**GOOD, "port": float("inf"), "max_num_seqs": True}})
@fuzz("gateway: node.json states -> haproxy.cfg (haproxy -c)")
def test_fuzz_node_states_render_a_config_haproxy_accepts(workdir: Path, nodes: dict) -> None:
    try:
        selection = backends.select(nodes)
    except Exception as error:  # any exception is the finding
        raise AssertionError(f"select raised {type(error).__name__}: {error}") from error
    assert all("\n" not in why and why.isprintable() for why in selection.excluded.values())
    variables = base_vars(workdir)
    clean = render({**variables, "gateway_servers": [
        {"name": "n1", "address": "10.0.0.5", "port": 8000, "maxconn": 8, "enabled": True,
         "reason": "", "agent_port": 0}]})
    if not selection.servers:
        return
    text = render({**variables, "gateway_servers": [s.as_dict() for s in selection.servers]})
    assert _sections(text) == _sections(clean)
    server_lines = [line for line in text.splitlines() if line.lstrip().startswith("server ")]
    assert len(server_lines) == len(selection.servers)
    config = workdir / "haproxy.cfg"
    config.write_text(text)
    check = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True,
                           text=True, check=False, timeout=30)
    assert check.returncode == 0, (check.stdout + check.stderr)[-600:]


KEY = "sk-" + "a1" * 10
LINE = st.one_of(
    st.builds(lambda n, k, r: f"{n} {k}{r}", st.sampled_from(["alice", "bob", "c-3"]) | TEXT,
              st.sampled_from([KEY, KEY + "x", "short"]) | TEXT,
              st.sampled_from(["", " 60", " 0", " ²", " 1e3", " 99999999999999999999"]) | TEXT),
    st.sampled_from(["# comment", "", "   "]), TEXT)


@settings(max_examples=examples(300))
@given(lines=st.lists(LINE, max_size=6))
@fuzz("gateway: client key file")
def test_fuzz_client_key_file(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        parsed = keys.parse_keys(text)
    except keys.KeyFileError as error:
        message = str(error)
        assert "\n" not in message and message.isprintable()
        rows = [line.split() for line in text.splitlines()]
        # NAME KEY [RATE]: the second word is a key; names and rates may be shown.
        shown = " ".join(w for row in rows for i, w in enumerate(row) if i != 1)
        for row in rows:
            if len(row) > 1 and len(row[1]) > 20 and row[1] not in shown:
                assert row[1] not in message, "a key reached the error message"
        return
    assert len({k.name for k in parsed}) == len(parsed) == len({k.key for k in parsed})
    assert all(validate.KEY.fullmatch(k.key) for k in parsed)
    assert len(keys.render_key_map(parsed).splitlines()) == len(parsed)


UNSAFE = set(" \t\r\n\0'\"$;#,`\\")
VALUES = st.integers(-10, 10**10) | st.floats(allow_nan=True) | TEXT | st.booleans() | JSON


@settings(max_examples=examples(400))
@given(kind=st.sampled_from(sorted(validate.KINDS)), value=VALUES)
@fuzz("gateway: role settings (onecat.validate)")
def test_fuzz_role_settings(kind: str, value: object) -> None:
    found = validate.problems({"gateway_x": [kind, value]})
    assert all("\n" not in line and line.isprintable() for line in found)
    if not found and kind not in ("count", "number", "port"):
        text = str(value)
        assert not (set(text) & UNSAFE), (kind, value)
        if kind == "key":
            assert validate.KEY.fullmatch(text)
