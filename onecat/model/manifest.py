"""The model manifest: every file of a checkpoint with its size and sha256, and how to check it.

Stdlib only: this file ships to nodes (the ``model_verify`` module).

``onecat-manifest.json`` sits next to the files it describes::

    {"format": 1, "source": "hf:Qwen/Qwen2.5-14B-Instruct-NVFP4@main",
     "repo": "Qwen/Qwen2.5-14B-Instruct-NVFP4", "revision": "main", "commit": "<40 hex>",
     "files": [{"path": "config.json", "size": 1929, "sha256": "..."}, ...],
     "total_size": 9876543210}

Its digest (sha256 of the canonical JSON of source, commit and files) names the exact
artifact in the lock file. Checking a directory comes in two depths:

- ``full``: every file is read and hashed (minutes for 9 GB);
- ``fast``: a file whose size and mtime still equal what the last full check recorded in
  ``.onecat-verified.json`` (next to the manifest) is trusted; any other file is hashed.
  A current node costs a ``stat`` per file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from typing import Any

MANIFEST_NAME = "onecat-manifest.json"
STAMP_NAME = ".onecat-verified.json"
FORMAT = 1
CHUNK = 4 * 1024 * 1024
VERIFY_MODES = ("fast", "full")


class ManifestError(ValueError):
    """A manifest cannot be read or does not describe its directory (invalid input)."""


def hash_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 over what identifies the artifact: source, commit and every file's hash."""
    core = {"source": manifest.get("source"), "commit": manifest.get("commit"),
            "files": [[f["path"], f["size"], f["sha256"]] for f in manifest["files"]]}
    return hashlib.sha256(json.dumps(core, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def build_manifest(files: list[dict[str, Any]], *, source: str, repo: str | None = None,
                   revision: str | None = None, commit: str | None = None) -> dict[str, Any]:
    """A manifest from [{path, size, sha256}]; the digest is computed, not trusted."""
    rows = sorted(({"path": f["path"], "size": int(f["size"]), "sha256": f["sha256"]}
                   for f in files), key=lambda f: f["path"])
    manifest: dict[str, Any] = {"format": FORMAT, "source": source, "repo": repo,
                                "revision": revision, "commit": commit, "files": rows,
                                "total_size": sum(f["size"] for f in rows)}
    manifest["digest"] = manifest_digest(manifest)
    return manifest


def load_manifest(model_dir: str) -> dict[str, Any]:
    path = os.path.join(model_dir, MANIFEST_NAME)
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError as error:
        raise ManifestError(f"{model_dir}: no {MANIFEST_NAME} (fetch the model with "
                            "'onecat model fetch' to create one)") from error
    except (OSError, ValueError) as error:
        raise ManifestError(f"{path}: unreadable manifest: {error}") from error
    try:
        files = manifest["files"]
        for entry in files:
            rel = entry["path"]
            if not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/"):
                raise ManifestError(f"{path}: file path {rel!r} leaves the model directory")
            int(entry["size"])
            str(entry["sha256"])
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, ManifestError):
            raise
        raise ManifestError(f"{path}: not a onecat manifest (needs files with path, size, "
                            f"sha256): {error}") from error
    if manifest.get("digest") != manifest_digest(manifest):
        raise ManifestError(f"{path}: the manifest's digest does not match its content (edited "
                            "by hand or truncated): fetch the model again")
    return manifest


def write_json_atomic(path: str, data: Any) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _read_stamp(model_dir: str, digest: str) -> dict[str, list[int]]:
    try:
        with open(os.path.join(model_dir, STAMP_NAME), encoding="utf-8") as handle:
            stamp = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(stamp, dict) or stamp.get("digest") != digest:
        return {}
    files = stamp.get("files")
    return files if isinstance(files, dict) else {}


def verify_dir(model_dir: str, manifest: dict[str, Any] | None = None, mode: str = "fast",
               write_stamp: bool = True) -> dict[str, Any]:
    """Check a directory against its manifest.

    Returns {"ok", "problems": [one line per missing/changed file], "bad_files": [paths],
    "hashed": files read, "hashed_bytes", "trusted": files passed by the stamp, "digest"}.
    """
    if mode not in VERIFY_MODES:
        raise ManifestError(f"verify mode {mode!r}: use one of {', '.join(VERIFY_MODES)}")
    manifest = manifest if manifest is not None else load_manifest(model_dir)
    digest = manifest_digest(manifest)
    stamp = _read_stamp(model_dir, digest) if mode == "fast" else {}
    problems: list[str] = []
    bad: list[str] = []
    new_stamp: dict[str, list[int]] = {}
    hashed = hashed_bytes = trusted = 0
    for entry in manifest["files"]:
        rel, size, sha = entry["path"], int(entry["size"]), entry["sha256"]
        path = os.path.join(model_dir, rel)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            problems.append(f"{rel}: missing")
            bad.append(rel)
            continue
        if st.st_size != size:
            problems.append(f"{rel}: size {st.st_size} bytes, the manifest says {size}")
            bad.append(rel)
            continue
        seen = [st.st_size, st.st_mtime_ns]
        if stamp.get(rel) == seen:
            trusted += 1
            new_stamp[rel] = seen
            continue
        actual = hash_file(path)
        hashed += 1
        hashed_bytes += size
        if actual != sha:
            problems.append(f"{rel}: sha256 {actual[:12]}..., the manifest says {sha[:12]}...")
            bad.append(rel)
            continue
        new_stamp[rel] = seen
    if write_stamp and not problems and (hashed or not stamp):
        # A read-only copy is still verified; its next check hashes again.
        with contextlib.suppress(OSError):
            write_json_atomic(os.path.join(model_dir, STAMP_NAME),
                              {"digest": digest, "files": new_stamp,
                               "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime())})
    return {"ok": not problems, "problems": problems, "bad_files": bad, "hashed": hashed,
            "hashed_bytes": hashed_bytes, "trusted": trusted, "digest": digest,
            "commit": manifest.get("commit"), "source": manifest.get("source"),
            "total_size": manifest.get("total_size")}
