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
import re
import stat
import time
from typing import Any

MANIFEST_NAME = "onecat-manifest.json"
STAMP_NAME = ".onecat-verified.json"
FORMAT = 1
CHUNK = 4 * 1024 * 1024
VERIFY_MODES = ("fast", "full")
# Bounds on what a manifest may say: a checkpoint has hundreds of files at most, none over a PiB.
MAX_FILES = 100_000
MAX_SIZE = 2**50
MAX_PATH = 1024
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # a file's digest as the manifest and the Hub write it


class ManifestError(ValueError):
    """A manifest cannot be read or does not describe its directory (invalid input)."""


class NotRegularFile(OSError):
    """A path that is a link, a FIFO, a device or a directory where a file was expected."""


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_regular(root: str, rel: str) -> os.stat_result:
    """lstat of ``root/rel`` when it and every folder between are real (no link, FIFO or
    device): a listed file must not read outside its model folder, or block on a FIFO."""
    parts = rel.split("/")
    path = root
    for depth, part in enumerate(parts):
        path = os.path.join(path, part)
        st = os.lstat(path)
        last = depth == len(parts) - 1
        if (last and not stat.S_ISREG(st.st_mode)) or (not last and not stat.S_ISDIR(st.st_mode)):
            where = rel if last else "/".join(parts[:depth + 1])
            raise NotRegularFile(f"{where} is {_kind(st.st_mode)}: onecat reads regular files "
                                 "only (replace a link with a copy of its file: cp -L)")
    return st


def open_regular(path: str) -> int:
    """A read-only descriptor of a regular file: never follows a final link, never blocks on
    a FIFO (O_NONBLOCK), refuses devices and directories."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(f"{path} is {_kind(mode)}: onecat reads regular files only")
    return fd


def hash_file(path: str) -> str:
    digest = hashlib.sha256()
    with os.fdopen(open_regular(path), "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: str, limit: int = MAX_MANIFEST_BYTES) -> Any:
    """A small JSON document from a regular file: ValueError for anything else (too big,
    too deep, not JSON), OSError when it cannot be opened."""
    with os.fdopen(open_regular(path), "rb") as handle:
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"larger than {limit // (1024 * 1024)} MiB")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    except UnicodeDecodeError as error:
        raise ValueError("not UTF-8") from error


def bad_path(rel: Any) -> str | None:
    """Why a manifest path is unsafe, or None: a relative path of real names inside the
    model folder, one printable line."""
    if not isinstance(rel, str) or not rel:
        return "not a file name"
    if len(rel) > MAX_PATH:
        return f"longer than {MAX_PATH} characters"
    if not rel.isprintable() or "\\" in rel:
        return "holds a control character or a backslash"
    if rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
        return "leaves the model directory or names no file"
    return None


def check_files(manifest: Any, where: str) -> list[dict[str, Any]]:
    """The manifest's file rows, each checked; ManifestError naming the first bad one."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise ManifestError(f"{where}: not a onecat manifest (needs a list of files with "
                            "path, size, sha256): fetch the model again")
    files = manifest["files"]
    if len(files) > MAX_FILES:
        raise ManifestError(f"{where}: lists {len(files)} files (at most {MAX_FILES}): not a "
                            "checkpoint")
    seen: set[str] = set()
    for entry in files:
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: a file row is not an object: fetch the model again")
        rel, size, sha = entry.get("path"), entry.get("size"), entry.get("sha256")
        why = bad_path(rel)
        if why:
            raise ManifestError(f"{where}: file path {str(rel)[:80]!r} {why}")
        if rel in seen:
            raise ManifestError(f"{where}: {rel!r} is listed twice")
        seen.add(rel)
        if type(size) is not int or not 0 <= size <= MAX_SIZE:
            raise ManifestError(f"{where}: {rel!r} has size {str(size)[:40]!r}: a byte count "
                                "(0 to 1 PiB) is needed")
        if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
            raise ManifestError(f"{where}: {rel!r} has sha256 {str(sha)[:80]!r}: 64 hex digits "
                                "are needed")
    return files


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
        manifest = read_json(path)
    except FileNotFoundError as error:
        raise ManifestError(f"{model_dir}: no {MANIFEST_NAME} (fetch the model with "
                            "'onecat model fetch' to create one)") from error
    except (OSError, ValueError) as error:
        raise ManifestError(f"{path}: unreadable manifest: {error}") from error
    check_files(manifest, path)
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
        stamp = read_json(os.path.join(model_dir, STAMP_NAME))
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
    check_files(manifest, f"the manifest of {model_dir}")
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
            st = check_regular(model_dir, rel)
        except FileNotFoundError:
            problems.append(f"{rel}: missing")
            bad.append(rel)
            continue
        except OSError as error:  # a link, a FIFO, a device, a folder, no permission
            problems.append(str(error) if isinstance(error, NotRegularFile) else
                            f"{rel}: cannot read: {error.strerror or error}")
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
        try:
            actual = hash_file(path)
        except OSError as error:  # replaced by a link or made unreadable since the lstat
            problems.append(f"{rel}: cannot read: {error.strerror or error}")
            bad.append(rel)
            continue
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
