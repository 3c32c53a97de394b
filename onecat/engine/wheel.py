"""The engine wheel: fetched once into the controller cache, verified, its requirements read.

The requirements are the wheel's METADATA `Requires-Dist` lines whose environment markers
hold on the image (CPython 3.12, x86_64 manylinux; no extras): what pip installs there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import urllib.parse
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from onecat.text import one_line

from .errors import EngineLockError
from .net import request
from .target import Target

CHUNK = 1 << 20
DOWNLOAD_TIMEOUT = 120.0


@dataclass(frozen=True)
class FetchedWheel:
    path: Path
    sha256: str
    size: int
    downloaded_bytes: int
    seconds: float


def is_url(source: str) -> bool:
    return urllib.parse.urlsplit(source).scheme in ("http", "https", "file")


def filename(source: str) -> str:
    """The wheel's file name from its URL or path: its own base name (the file lands in the
    cache under it). A name that is not (`%2F..%2F` in a URL decodes to `/../`, a NUL, a
    leading dot) is refused, so no URL can place a file outside the cache."""
    if is_url(source):
        name = urllib.parse.unquote(urllib.parse.urlsplit(source).path.rsplit("/", 1)[-1])
    else:
        name = Path(source).name
    if not name or name.startswith(".") or any(c in name for c in "/\\\0") \
            or not name.isprintable():
        raise EngineLockError(f"the wheel {one_line(source)[:200]!r} has no plain file name "
                              "(letters, digits, '.', '_', '+', '-'): give its URL without "
                              "encoded separators")
    return name


def check_tags(name: str, target: Target) -> None:
    """Refuse a wheel whose file name tags do not install on the image."""
    try:
        _, _, _, tags = parse_wheel_filename(name)
    except InvalidWheelFilename as err:
        raise EngineLockError(f"{name!r} is not a wheel file name: {err}") from None
    if not tags & target.tags():
        shown = ".".join(sorted(str(tag) for tag in tags))
        raise EngineLockError(f"the wheel {name} is built for {shown}, not for the image's "
                              f"{target.describe()}: use the release's cp312 linux_x86_64 wheel")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(path: Path, source: str, want: str) -> str:
    got = sha256_of(path)
    if want and got != want.lower():
        raise EngineLockError(f"the wheel {source} has sha256 {got}, but {want.lower()} is "
                              "pinned: a corrupt download or a changed release (nothing locked)")
    return got


def fetch(source: str, sha256: str, cache_dir: Path,
          timeout: float = DOWNLOAD_TIMEOUT) -> FetchedWheel:
    """The wheel in the cache (`cache_dir/<name>`), downloaded when absent or different.

    A local path is verified where it is. A cached copy whose sum is not `sha256` is fetched
    again; a download whose sum is not `sha256` is deleted and refused with both sums.
    """
    started = time.monotonic()
    name = filename(source)
    if not is_url(source) or urllib.parse.urlsplit(source).scheme == "file":
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(source).path)
                    if is_url(source) else source)
        if not path.is_file():
            raise EngineLockError(f"the wheel {source} does not exist")
        got = _verify(path, source, sha256)
        return FetchedWheel(path, got, path.stat().st_size, 0, time.monotonic() - started)
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached = cache_dir / name
    if cached.is_file() and (not sha256 or sha256_of(cached) == sha256.lower()):
        return FetchedWheel(cached, sha256_of(cached) if not sha256 else sha256.lower(),
                            cached.stat().st_size, 0, time.monotonic() - started)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=cache_dir)
    downloaded = 0
    try:
        with os.fdopen(fd, "wb") as out, request(source, what="the wheel's server",
                                                 timeout=timeout) as response:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                downloaded += len(chunk)
        got = _verify(Path(tmp), source, sha256)
        shutil.move(tmp, cached)
    except (OSError, TimeoutError) as err:
        raise EngineLockError(f"downloading the wheel {source} failed: {err}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return FetchedWheel(cached, got, cached.stat().st_size, downloaded,
                        time.monotonic() - started)


def requires_dist(path: Path) -> list[str]:
    """The raw `Requires-Dist` lines of the wheel's METADATA."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise EngineLockError(f"the wheel {path.name} has {len(names)} "
                                      ".dist-info/METADATA files, not one")
            text = archive.read(names[0]).decode("utf-8")
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as err:
        raise EngineLockError(f"the wheel {path.name} cannot be read: {err}") from None
    return HeaderParser().parsestr(text).get_all("Requires-Dist") or []


def applicable(requirements: list[str], target: Target) -> list[str]:
    """The requirements that hold on `target`, markers evaluated and dropped, sorted."""
    env = target.marker_environment()
    kept: set[str] = set()
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise EngineLockError(f"the wheel lists an invalid requirement {line!r}: {err}") \
                from None
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        req.marker = None
        kept.add(str(req))
    return sorted(kept, key=str.lower)
