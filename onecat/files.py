"""The node programs' state files (the watch's, the repair ladder's, the burn-in's): read a JSON
object, write a file whole. Stdlib only: roles/watch and roles/burnin ship this module."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file; None when it is missing, unreadable, not JSON (or nested
    too deep to parse) or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace the file with `text` in one step (a temporary file beside it, renamed over it):
    a reader sees the old file or the new one, never half of one. No fsync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """`write_atomic` of the data as indented JSON with sorted keys."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode)
