"""Fuzz the engine lock file a user may edit by hand, and the image references they type.

A lock with values replaced, removed or retyped anywhere inside, or text that is not JSON,
is either valid or refused with an EngineLockError naming the problem (one line, exit 2 in
the command); it never raises anything else. The same for `--base` references.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from fuzzkit import examples, fuzz, mutated
from hypothesis import given, settings
from hypothesis import strategies as st

from onecat.engine import lockfile, registry
from onecat.engine.errors import EngineLockError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_lock_sample import valid_lock

LOCK = valid_lock()


def test_the_seed_lock_is_valid():
    assert lockfile.validate(json.loads(json.dumps(LOCK)), "lock")


@settings(max_examples=examples(300))
@given(mutated(LOCK, max_edits=4))
@fuzz("engine lock: edited lock file")
def test_an_edited_lock_is_valid_or_refused(edited):
    try:
        lockfile.validate(edited, "lock")
    except EngineLockError as err:
        assert "\n" not in str(err)


@settings(max_examples=examples(200))
@given(st.binary(max_size=400))
@fuzz("engine lock: lock file bytes")
def test_lock_bytes_are_valid_or_refused(tmp_path_factory, raw):
    path = Path(tmp_path_factory.mktemp("lock")) / "x.lock.json"
    path.write_bytes(raw)
    with contextlib.suppress(EngineLockError):
        lockfile.load(path)


@settings(max_examples=examples(300))
@given(st.text(alphabet=st.sampled_from("abz09.:/@-_Ssha256AF"), max_size=90))
@fuzz("engine lock: --base reference")
def test_image_references_parse_or_are_refused(ref):
    try:
        parsed = registry.parse_ref(ref)
    except EngineLockError:
        return
    assert parsed.tag or parsed.digest
    assert registry.api_base(parsed).startswith(("http://", "https://"))
