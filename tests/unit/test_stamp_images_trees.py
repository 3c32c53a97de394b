"""What a stamp asks of Docker and of a model folder (onecat.host.stamp): an image by what
Docker says (any image store, any data-root), a folder by every file's size and mtime."""

from __future__ import annotations

import os
from pathlib import Path

from onecat.host.stamp import (
    ABSENT,
    STAMP_FORMAT,
    compare,
    fingerprint,
    image_state,
    tree_state,
)


def test_an_image_is_what_docker_says_and_a_pruned_one_is_absent() -> None:
    assert image_state("sha256:ab", "sha256:ab\n", 0) == "sha256:ab"
    assert image_state("sha256:ab", "", 1) == ABSENT  # "Error: No such image"
    assert image_state("sha256:ab", "", 125).startswith("unreadable")  # no daemon


def test_a_pruned_image_makes_the_stage_run_again() -> None:
    then = fingerprint({}, {}, {}, images={"sha256:ab": "sha256:ab"})
    now = fingerprint({}, {}, {}, images={"sha256:ab": ABSENT})
    stamp = {"format": STAMP_FORMAT, "want": "w", "fingerprint": then}
    verdict = compare(stamp, "w", now)
    assert not verdict.current and "image:sha256:ab" in verdict.reason


def _model(root: Path) -> Path:
    folder = root / "m@abc"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 64)
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 32)
    (folder / ".onecat-verified.json").write_text("{}")
    return folder


def test_a_model_folder_is_fingerprinted_by_size_and_mtime_not_content(tmp_path: Path) -> None:
    folder = _model(tmp_path)
    link = tmp_path / "m"
    link.symlink_to(folder)
    before = tree_state(str(link))
    assert before.startswith("3 files, sha256 ")  # onecat's own bookkeeping left out
    (folder / ".onecat-verified.json").write_text('{"again": true}')
    assert tree_state(str(link)) == before  # a re-verification is no change
    shard = folder / "model-00002-of-00002.safetensors"
    shard.write_bytes(b"\0" * 16)  # truncated behind onecat's back
    assert tree_state(str(link)) != before
    stat = shard.stat()
    shard.write_bytes(b"\1" * 16)  # same size, content changed: seen by its mtime
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    changed = tree_state(str(link))
    assert changed not in (before, tree_state(str(tmp_path / "other")))
    assert tree_state(str(tmp_path / "missing")) == ABSENT
