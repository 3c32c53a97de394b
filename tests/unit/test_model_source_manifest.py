"""Model sources and manifests: parsing, engine file selection, fast and full verification."""

from __future__ import annotations

import json
import os

import pytest

from onecat.model.manifest import (
    MANIFEST_NAME,
    STAMP_NAME,
    ManifestError,
    build_manifest,
    hash_file,
    load_manifest,
    verify_dir,
    write_json_atomic,
)
from onecat.model.source import (
    Source,
    SourceError,
    legacy_source,
    parse_source,
    revision_dir_name,
    select_engine_files,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("hf:Qwen/Qwen2.5-14B-Instruct@main", Source("hf", "Qwen/Qwen2.5-14B-Instruct", "main")),
    ("hf:Qwen/Qwen2.5-14B-Instruct", Source("hf", "Qwen/Qwen2.5-14B-Instruct", "main")),
    ("hf:org/m@refs/pr/3", Source("hf", "org/m", "refs/pr/3")),
    ("hf:org/m@" + "a" * 40, Source("hf", "org/m", "a" * 40)),
    ("file:/mnt/models/q", Source("file", path="/mnt/models/q")),
    ("node:/srv/models/q/", Source("node", path="/srv/models/q")),
    ("/abs/dir", Source("file", path="/abs/dir")),
])
def test_sources_parse(text, expected):
    assert parse_source(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty model source"),
    ("hf:justname", "ORG/NAME"),
    ("hf:a/b/c", "ORG/NAME"),
    ("hf:../x", "ORG/NAME"),
    ("hf:org/m@..", "revision"),
    ("s3:bucket/x", "use hf:ORG/NAME@REVISION"),
    ("file:relative/path", "absolute path"),
    ("node:/", "not /"),
])
def test_bad_sources_are_refused_with_the_forms_named(text, message):
    with pytest.raises(SourceError, match=message):
        parse_source(text)


def test_names_and_revision_folders():
    assert parse_source("hf:Qwen/Qwen2.5-7B@main").name == "Qwen2.5-7B"
    assert parse_source("file:/x/y/model").name == "model"
    assert revision_dir_name("m", "0123456789abcdef") == "m@0123456789ab"
    assert str(parse_source("hf:o/m")) == "hf:o/m@main"
    assert legacy_source("/srv/models", "q") == Source("node", path="/srv/models/q")


def test_only_what_the_engine_loads_is_selected():
    files = ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors", "model.safetensors.index.json",
             "tokenizer.json", "tokenizer_config.json", "README.md", ".gitattributes",
             "pytorch_model.bin", "original/consolidated.00.pth",
             "original/model.safetensors", "onnx/model.onnx"]
    assert select_engine_files(files) == [
        "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
        "tokenizer_config.json"]
    with pytest.raises(SourceError, match=r"no \*\.safetensors weights.*\.bin"):
        select_engine_files(["config.json", "pytorch_model.bin", "original/x.safetensors"])


@pytest.fixture()
def model_dir(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    with open(d / "model.safetensors", "wb") as handle:
        handle.write(b"header")
        handle.truncate(64 * 1024 * 1024)  # sparse
    rows = [{"path": n, "size": os.path.getsize(d / n), "sha256": hash_file(str(d / n))}
            for n in ("config.json", "model.safetensors")]
    write_json_atomic(str(d / MANIFEST_NAME), build_manifest(
        rows, source="hf:o/m@main", repo="o/m", revision="main", commit="c" * 40))
    return d


def test_full_then_fast_verification(model_dir):
    first = verify_dir(str(model_dir), mode="full")
    assert first["ok"] and first["hashed"] == 2 and (model_dir / STAMP_NAME).exists()
    again = verify_dir(str(model_dir), mode="fast")
    assert again["ok"] and again["hashed"] == 0 and again["trusted"] == 2
    assert again["commit"] == "c" * 40


def test_a_change_with_a_new_mtime_is_caught_by_the_fast_check(model_dir):
    verify_dir(str(model_dir), mode="full")
    with open(model_dir / "model.safetensors", "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x01")
    result = verify_dir(str(model_dir), mode="fast")
    assert not result["ok"] and result["bad_files"] == ["model.safetensors"]
    assert "model.safetensors: sha256" in result["problems"][0]


def test_bit_rot_under_an_unchanged_mtime_needs_the_full_check(model_dir):
    verify_dir(str(model_dir), mode="full")
    path = model_dir / "model.safetensors"
    stat = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(2000)
        handle.write(b"\x01")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert verify_dir(str(model_dir), mode="fast")["ok"]  # what fast promises, no more
    assert not verify_dir(str(model_dir), mode="full")["ok"]


def test_missing_and_resized_files(model_dir):
    (model_dir / "config.json").unlink()
    os.truncate(model_dir / "model.safetensors", 10)
    result = verify_dir(str(model_dir))
    assert result["problems"] == [
        "config.json: missing",
        f"model.safetensors: size 10 bytes, the manifest says {64 * 1024 * 1024}"]


def test_a_manifest_edited_by_hand_or_absent_is_invalid_input(model_dir, tmp_path):
    data = json.loads((model_dir / MANIFEST_NAME).read_text())
    data["files"][0]["sha256"] = "0" * 64
    (model_dir / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="digest does not match"):
        load_manifest(str(model_dir))
    with pytest.raises(ManifestError, match=r"no onecat-manifest\.json"):
        load_manifest(str(tmp_path))
    data["files"][0]["path"] = "../etc/passwd"
    (model_dir / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="leaves the model directory"):
        load_manifest(str(model_dir))
