"""A PEP 503 package index on loopback: a folder of wheels built here, served over HTTP.

`build_wheel` writes a real wheel (zip with METADATA, WHEEL and RECORD); `Index` lays the
wheels out as /simple/<project>/ pages with sha256 fragments and serves the folder with
`python -m http.server` on 127.0.0.1 (the process stops with the fixture).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(out: Path, name: str, version: str, requires: list[str] = (),
                tag: str = "py3-none-any", payload: bytes = b"") -> Path:
    """A minimal, valid wheel `name-version-tag.whl` in `out` requiring `requires`."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires)]) + "\n"
    files = {
        f"{dist}/__init__.py": b"VALUE = %r\n" % payload,
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: onecat-tests\nRoot-Is-Purelib: true\n"
                          f"Tag: {tag}\n").encode(),
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for arcname, data in files.items():
            info_ = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            archive.writestr(info_, data)
    return path


class Index:
    """A folder served as a simple index at `url` (http://127.0.0.1:PORT/simple)."""

    def __init__(self, root: Path, prefix: str = "simple") -> None:
        """`prefix`: the index's path, e.g. "whl/cu128" for a torch index's layout."""
        self.root = root
        self.prefix = prefix.strip("/")
        self.files = root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = root / "requests.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.prefix}"

    def add(self, wheel: Path) -> None:
        target = self.files / wheel.name
        target.write_bytes(wheel.read_bytes())
        self.write_pages()

    def add_sdist(self, name: str, version: str) -> Path:
        """A source distribution only (a tarball named as sdists are; never built here)."""
        target = self.files / f"{name.replace('-', '_')}-{version}.tar.gz"
        target.write_bytes(f"{name} {version} source\n".encode())
        self.write_pages()
        return target

    def remove(self, filename: str) -> None:
        """The index loses a file (and its link), as an index that yanks or prunes one."""
        (self.files / filename).unlink()
        for page in (self.root / self.prefix).glob("*/index.html"):
            shutil.rmtree(page.parent)
        self.write_pages()

    def write_pages(self) -> None:
        projects: dict[str, list[Path]] = {}
        for dist in sorted([*self.files.glob("*.whl"), *self.files.glob("*.tar.gz")]):
            name = dist.name.split("-")[0]
            projects.setdefault(str(canonicalize_name(name)), []).append(dist)
        simple = self.root / self.prefix
        simple.mkdir(parents=True, exist_ok=True)
        up = "../" * (self.prefix.count("/") + 2)
        (simple / "index.html").write_text("<!DOCTYPE html><html><body>" + "".join(
            f'<a href="{p}/">{p}</a>' for p in sorted(projects)) + "</body></html>\n")
        for project, wheels in projects.items():
            page = simple / project
            page.mkdir(exist_ok=True)
            links = "".join(
                f'<a href="{up}files/{html.escape(w.name)}#sha256='
                f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a><br>'
                for w in wheels)
            (page / "index.html").write_text(f"<!DOCTYPE html><html><body>{links}</body></html>\n")

    def start(self) -> Index:
        self.write_pages()
        with self.log.open("a") as log:  # http.server logs each request on stderr
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
                 "--directory", str(self.root)],
                stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/", timeout=2).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"http.server did not start on {self.url}")

    def served(self, since: int = 0, exclude: str = "") -> tuple[int, int, int]:
        """(requests, bytes, log offset) served since log offset `since`, paths under
        `exclude` left out (bytes: the GETs' files and pages)."""
        text = self.log.read_text()
        requests = size = 0
        for method, path in re.findall(r'"(GET|HEAD) (\S+) HTTP/[\d.]+" 200', text[since:]):
            if exclude and path.startswith(exclude):
                continue
            requests += 1
            local = self.root / path.split("?")[0].split("#")[0].lstrip("/")
            if local.is_dir():
                local = local / "index.html"
            if method == "GET" and local.is_file():
                size += local.stat().st_size
        return requests, size, len(text)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
