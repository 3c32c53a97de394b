"""Fuzz the model's sources and manifests: the source string (`onecat_model`), the manifest a
folder carries (`onecat model verify`, the model_verify module, `fetch file:`), and a file:
source folder holding links, FIFOs and odd names.

The contracts under test:
- a source string parses to hf/file/node with safe parts, or is one SourceError line;
- a manifest is checked (every problem one printable line, ok only when every listed file is a
  regular file inside the folder with its size and sha256) or refused with one ManifestError
  line; never another exception, never a hang (a FIFO or /dev/zero listed), nothing read
  outside the folder;
- `fetch file:` copies only regular files inside the source folder, or is one FetchError line,
  and writes nothing outside DEST (and DEST.partial, removed on failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from fuzzkit import JSON, dumps, examples, fuzz
from hypothesis import given, settings
from hypothesis import strategies as st

from onecat.model.fetch import FetchError, fetch
from onecat.model.manifest import (
    MANIFEST_NAME,
    ManifestError,
    build_manifest,
    manifest_digest,
    verify_dir,
)
from onecat.model.source import SourceError, parse_source

EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
NASTY = st.sampled_from(["", ".", "..", "/", "a/../..", "\0", "\n", "\x1b[2J", "*", "x*.json",
                         "a//b", "../etc/passwd", "con", "a" * 300, "é", "²", "$HOME", "a b"])
PIECES = st.text(min_size=0, max_size=12) | NASTY


@settings(max_examples=examples(300))
@given(kind=st.sampled_from(["hf:", "file:", "node:", "", "HF:", "s3:"]),
       parts=st.lists(PIECES, min_size=1, max_size=4),
       joint=st.sampled_from(["/", "@", ":", ""]))
@fuzz("model: source strings (onecat_model)")
def test_fuzz_source_string(kind: str, parts: list[str], joint: str) -> None:
    text = kind + joint.join(parts)
    try:
        source = parse_source(text)
    except SourceError as error:
        assert "\n" not in str(error)
        return
    assert source.kind in ("hf", "file", "node")
    if source.kind == "hf":
        assert source.repo and source.repo.count("/") == 1 and ".." not in source.repo
        assert source.revision and ".." not in source.revision
        assert all(c.isprintable() and c not in " \\" for c in str(source))
    else:
        assert source.path and source.path.startswith("/") and source.path != "/"
        assert "/../" not in source.path + "/"


ROW = st.fixed_dictionaries({
    "path": st.sampled_from(["a.json", "b.safetensors", "sub/c.json", "fifo", "zero", "up",
                             "link/a.json"]) | PIECES,
    "size": st.sampled_from([0, 2, 3]) | JSON,
    "sha256": st.sampled_from([EMPTY_SHA, "0" * 64]) | JSON,
})


def _folder(root: Path) -> Path:
    """A model folder with a regular file, one in a sub-folder, a FIFO, a link to /dev/zero,
    a link to a folder outside it, and a secret beside it."""
    folder = root / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.json").write_text("{}")
    (folder / "b.safetensors").write_bytes(b"")
    (folder / "sub" / "c.json").write_text("[1]")
    os.mkfifo(folder / "fifo")
    (folder / "zero").symlink_to("/dev/zero")
    (root / "outside").mkdir()
    (root / "outside" / "a.json").write_text('{"secret": 1}')
    (folder / "link").symlink_to(root / "outside")
    (folder / "up").symlink_to(root / "outside" / "a.json")
    return folder


@pytest.fixture(scope="module")
def sources_root():
    root = Path(tempfile.mkdtemp(prefix="onecat-fuzz-sources-"))
    _folder(root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=examples(300))
@given(rows=st.lists(ROW, max_size=6), mode=st.sampled_from(["fast", "full"]),
       shape=st.integers(0, 9), raw=JSON)
@fuzz("model: manifests (onecat model verify, model_verify)")
def test_fuzz_manifest(sources_root: Path, rows: list, mode: str, shape: int,
                       raw: object) -> None:
    folder = sources_root / "m"
    document: object = {"format": 1, "source": "file:/x", "files": rows}
    if shape == 0:
        document = raw
    elif shape == 1:
        document = mutated_once(document, raw)
    # A shape the digest cannot cover is written as it is.
    with contextlib.suppress(Exception):
        document["digest"] = manifest_digest(document)  # type: ignore[index]
    (folder / MANIFEST_NAME).write_text(dumps(document))
    try:
        result = verify_dir(str(folder), mode=mode, write_stamp=False)
    except ManifestError as error:
        assert "\n" not in str(error)
        return
    assert all(isinstance(p, str) and p.isprintable() for p in result["problems"])
    if result["ok"]:
        for row in rows:
            path = folder / row["path"]
            assert path.is_file() and not path.is_symlink(), row
            assert all(not p.is_symlink() for p in path.relative_to(folder).parents
                       if str(p) != "." and (folder / p).exists() and (folder / p).is_symlink())
            assert folder in path.resolve().parents


def mutated_once(document: dict, value: object) -> dict:
    """The document with its file list (or one row) replaced by `value`."""
    files = document["files"]
    if files and isinstance(value, dict | list | str | int):
        return {**document, "files": [value, *files[1:]]}
    return {**document, "files": value}


NAMES = st.sampled_from(["config.json", "model.safetensors", "vocab.txt", "merges.txt",
                         "tokenizer.json", "x*.safetensors", "model-0.safetensors"])
KINDS = st.sampled_from(["file", "link-out", "link-in", "fifo", "dir", "link-dir"])


@settings(max_examples=examples(120))
@given(entries=st.dictionaries(NAMES, KINDS, min_size=1, max_size=5),
       with_manifest=st.booleans())
@fuzz("model: file: sources (links, FIFOs, folders)")
def test_fuzz_file_source(entries: dict, with_manifest: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="onecat-fuzz-src-"))
    try:
        src = root / "src"
        src.mkdir()
        secret = root / "secret"
        secret.write_text("PRIVATE\n")
        (src / "config.json").write_text(json.dumps({"architectures": ["X"]}))
        for name, kind in entries.items():
            path = src / name
            if path.exists() or path.is_symlink():
                path.unlink()
            if kind == "file":
                path.write_bytes(b"\0" * 8)
            elif kind == "link-out":
                path.symlink_to(secret)
            elif kind == "link-in":
                path.symlink_to(src / "config.json")
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "dir":
                path.mkdir()
            else:
                path.symlink_to(root)
        if with_manifest:
            rows = [{"path": n, "size": 8, "sha256": "0" * 64} for n in entries]
            (src / MANIFEST_NAME).write_text(json.dumps(build_manifest(rows, source="x")))
        dest = root / "out" / "m"
        before = sorted(p.name for p in root.iterdir())
        try:
            fetch(f"file:{src}", str(dest), progress=False)
        except FetchError as error:
            assert "\n" not in str(error)
            assert not dest.exists() and not Path(f"{dest}.partial").exists()
        else:
            for path in dest.rglob("*"):
                assert not path.is_symlink() and (path.is_file() or path.is_dir()), path
                if path.is_file():
                    assert b"PRIVATE" not in path.read_bytes(), path
        assert sorted(p.name for p in root.iterdir() if p.name != "out") == before
    finally:
        shutil.rmtree(root, ignore_errors=True)
