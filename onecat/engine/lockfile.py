"""The engine lock file: one JSON document per engine release, parsed strictly.

    {"schema": 1, "engine": "1cat-vllm", "engine_version": "1.5.0",
     "wheel": {"url", "filename", "sha256", "size", "requires_dist": [...]},
     "base": {"image", "registry", "digest", "index_digest", "manifest_digest",
              "media_type", "platform", "config_digest"},
     "requirements": {"python_version", "python_platform", "torch", "index_url",
                      "extra_index_urls", "lock", "sha256"},
     "tools": {"uv", "onecat"}, "created_at"}

`base.config_digest` (the linux/amd64 manifest's config blob) came later: a lock without it
still parses, and serves every base but one carried in as a tarball. So did `base.apt_snapshot`
(the distribution archive's snapshot the image's Python comes from) and, in `requirements`,
`policy` (the resolution rules, resolve.py), `torch_variant` (cu128...), `torch_family` (the
names pinned to the torch index) and `index_of` (each package's index): a lock without them
parses and is made again.
`requirements.lock` is the text `pip install --require-hashes` reads; its sha256 is kept
beside it so an edit by hand is caught, and every line must pin `==` with a hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from onecat.serve.image_ref import check_lock

from .errors import EngineLockError

SCHEMA = 1
# The resolution rules a lock was made under (resolve.py); a lock made under others is remade.
POLICY = "explicit torch index, first-index, wheels only"
# Ubuntu's and Debian's snapshot services name an archive state so (APT::Snapshot).
SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"
SNAPSHOT = re.compile(r"^\d{8}T\d{6}Z$")
# Fields added after schema 1 was first written: optional, typed when present.
OPTIONAL: dict[str, dict[str, type]] = {
    "base": {"apt_snapshot": str},
    "requirements": {"policy": str, "torch_variant": str, "torch_family": list, "index_of": dict},
}
HEX64 = re.compile(r"^[0-9a-f]{64}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "wheel": {"url": str, "filename": str, "sha256": str, "size": int, "requires_dist": list},
    "base": {"image": str, "registry": str, "digest": str, "index_digest": str,
             "manifest_digest": str, "media_type": str, "platform": str},
    "requirements": {"python_version": str, "python_platform": str, "torch": str,
                     "index_url": str, "extra_index_urls": list, "lock": str, "sha256": str},
    "tools": {"uv": str, "onecat": str},
}
TOP: dict[str, type] = {"schema": int, "engine": str, "engine_version": str,
                        "created_at": str, **{name: dict for name in FIELDS}}


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def validate(data: Any, name: str) -> dict[str, Any]:
    """`data` as a lock, or an EngineLockError naming the first thing wrong with it."""
    if not isinstance(data, dict):
        raise EngineLockError(f"{name} is not a JSON object")
    for key, kind in TOP.items():
        if not isinstance(data.get(key), kind):
            raise EngineLockError(f"{name}: {key!r} is missing or not a {kind.__name__}")
    if data["schema"] != SCHEMA:
        raise EngineLockError(f"{name}: schema {data['schema']} is not {SCHEMA}: make the lock "
                              "again with this onecat (onecat engine lock)")
    for section, fields in FIELDS.items():
        for key, kind in fields.items():
            if not isinstance(data[section].get(key), kind):
                raise EngineLockError(f"{name}: {section}.{key} is missing or not "
                                      f"a {getattr(kind, '__name__', kind)}")
    wheel, base, req = data["wheel"], data["base"], data["requirements"]
    for section, key in (("wheel", "requires_dist"), ("requirements", "extra_index_urls")):
        if not all(isinstance(item, str) for item in data[section][key]):
            raise EngineLockError(f"{name}: {section}.{key} holds something that is not a string")
    if not HEX64.match(wheel["sha256"]):
        raise EngineLockError(f"{name}: wheel.sha256 {wheel['sha256']!r} is not 64 hex digits")
    for key in ("digest", "manifest_digest"):
        if not DIGEST.match(base[key]):
            raise EngineLockError(f"{name}: base.{key} {base[key]!r} is not sha256:<64 hex>")
    if base["index_digest"] and not DIGEST.match(base["index_digest"]):
        raise EngineLockError(f"{name}: base.index_digest {base['index_digest']!r} is not "
                              "sha256:<64 hex>")
    config = base.get("config_digest", "")
    if not isinstance(config, str) or (config and not DIGEST.match(config)):
        raise EngineLockError(f"{name}: base.config_digest {config!r} is not sha256:<64 hex>")
    if base["digest"] not in (base["index_digest"], base["manifest_digest"]):
        raise EngineLockError(f"{name}: base.digest is neither the index nor the manifest digest")
    for section, fields in OPTIONAL.items():
        for key, kind in fields.items():
            if key in data[section] and not isinstance(data[section][key], kind):
                raise EngineLockError(f"{name}: {section}.{key} is not a {kind.__name__}")
    if not all(isinstance(item, str) for item in req.get("torch_family", [])) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in req.get("index_of", {}).items()):
        raise EngineLockError(f"{name}: requirements.torch_family or index_of holds something "
                              "that is not a string")
    snapshot = base.get("apt_snapshot", "")
    if snapshot and not SNAPSHOT.match(snapshot):
        raise EngineLockError(f"{name}: base.apt_snapshot {snapshot!r} is not YYYYMMDDTHHMMSSZ")
    if text_sha256(req["lock"]) != req["sha256"]:
        raise EngineLockError(f"{name}: requirements.lock was edited (its sha256 is not "
                              "requirements.sha256): make the lock again with onecat engine lock")
    check_torch_pin(req["lock"], f"{name} requirements.lock", req["torch"],
                    req.get("torch_variant", ""))
    return data


def check_torch_pin(text: str, name: str, torch_spec: str, variant: str) -> None:
    """Every line pinned by hash, torch pinned as asked and built for the index's variant."""
    problems = check_lock(text, name, torch_spec, variant)
    if problems:
        raise EngineLockError(problems[0])


def load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise EngineLockError(f"the engine lock {path} cannot be read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise EngineLockError(f"the engine lock {path} is not UTF-8 text: {err.reason} at byte "
                              f"{err.start}") from None
    try:
        data = json.loads(text)
    except ValueError as err:
        raise EngineLockError(f"the engine lock {path} is not valid JSON: {err}") from None
    return validate(data, str(path))


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (a temp file in the same folder, then a rename)."""
    validate(data, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
