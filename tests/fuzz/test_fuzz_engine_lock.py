"""Fuzz the engine lock file a user may edit by hand, and the image references they type.

A lock with values replaced, removed or retyped anywhere inside, or text that is not JSON,
is either valid or refused with an EngineLockError naming the problem (one line, exit 2 in
the command); it never raises anything else. The same for `--base` references.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from fuzzkit import examples, fuzz, mutated
from hypothesis import given, settings
from hypothesis import strategies as st

from onecat.engine import lockfile, registry
from onecat.engine.errors import EngineLockError

TEXT = ("alpha==1.1 \\\n    --hash=sha256:" + "a" * 64 + "\n"
        "torch==2.10.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")
DIGEST = "sha256:" + "c" * 64
LOCK = {
    "schema": 1, "engine": "1cat-vllm", "engine_version": "1.5.0",
    "created_at": "2026-12-04T20:00:00Z",
    "wheel": {"url": "https://x/1cat_vllm-1.5.0-cp312-cp312-linux_x86_64.whl",
              "filename": "1cat_vllm-1.5.0-cp312-cp312-linux_x86_64.whl", "sha256": "d" * 64,
              "size": 1, "requires_dist": ["alpha>=1"]},
    "base": {"image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04", "registry": "https://r",
             "digest": DIGEST, "index_digest": DIGEST, "manifest_digest": "sha256:" + "e" * 64,
             "media_type": registry.OCI_INDEX, "platform": "linux/amd64"},
    "requirements": {"python_version": "3.12", "python_platform": "x86_64-manylinux_2_28",
                     "torch": "torch==2.10.0", "index_url": "https://i", "extra_index_urls": [],
                     "lock": TEXT, "sha256": hashlib.sha256(TEXT.encode()).hexdigest()},
    "tools": {"uv": "0.13.9", "onecat": "0.1.0"},
}


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
