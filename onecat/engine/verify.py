"""Every file a lock pins, looked up again on the index it came from (`onecat engine lock
--check`): an index that lost a locked file, or serves it under another hash, fails the image
build later with a 404 or a hash mismatch; the check names it now."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from packaging.utils import canonicalize_name

from .errors import EngineLockError
from .indexes import Layout, is_family, same_index, strip_credentials
from .simple import downloads, files

# Index pages are read in parallel: a real lock pins about 150 packages.
WORKERS = 8


def pinned(text: str) -> dict[str, tuple[str, set[str]]]:
    """`name -> (version, sha256s)` of a requirements lock (`name==version \\ --hash=...`)."""
    found: dict[str, tuple[str, set[str]]] = {}
    current = ""
    for line in text.splitlines():
        head = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if head:
            current = str(canonicalize_name(head.group(1)))
            found[current] = (head.group(3), set())
        if current:
            hashes = re.findall(r"--hash=sha256:([0-9a-fA-F]{64})", line)
            found[current][1].update(h.lower() for h in hashes)
    return found


def _indexes_for(name: str, lock: dict[str, Any]) -> list[str]:
    """The index the package came from (the lock's record), else where the rules send it."""
    req = lock["requirements"]
    layout = Layout.of(req["index_url"], req["extra_index_urls"])
    configured = [i for i in (layout.torch_index, *layout.indexes) if i]
    recorded = (req.get("index_of") or {}).get(name, "")
    if recorded:
        match = [i for i in configured if same_index(i, recorded)]
        return match or [recorded]
    if layout.torch_index and (name in req.get("torch_family", []) or is_family(name)):
        return [layout.torch_index]
    return list(layout.indexes)


def _one(name: str, version: str, hashes: set[str], lock: dict[str, Any]) -> str:
    """"" when a file with a locked hash is listed and downloads, else the drift line."""
    indexes = _indexes_for(name, lock)
    try:
        for index in indexes:
            listed = [f for f in files(index, name) if f.sha256 in hashes]
            for file in listed[:1]:
                if downloads(file, index):
                    return ""
                return (f"requirements: {name}=={version}: {file.filename} is listed on "
                        f"{strip_credentials(index)} but does not download (the build would "
                        "fail): make the lock again")
    except EngineLockError as err:
        return f"requirements: {name}=={version}: {err}"
    where = ", ".join(strip_credentials(i) for i in indexes)
    return (f"requirements: {name}=={version}: no file with a locked hash is served by {where} "
            "any more (the build would fail): make the lock again")


def locked_files(lock: dict[str, Any]) -> list[str]:
    """One drift line per locked package whose file its index no longer serves."""
    packages = pinned(lock["requirements"]["lock"])
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        answers = pool.map(lambda item: _one(item[0], item[1][0], item[1][1], lock),
                           sorted(packages.items()))
        return [line for line in answers if line]
