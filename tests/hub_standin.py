"""A Hugging Face Hub stand-in: the endpoints the real ``huggingface_hub`` client calls.

Stdlib only. It serves model directories (the sparse synthetic checkpoints of
``model_fixtures.py``) as Hub repositories, so that production code, which only knows
``HF_ENDPOINT``, talks to it exactly as it would talk to huggingface.co or a mirror:

- ``GET /api/models/{repo}`` and ``GET /api/models/{repo}/revision/{rev}`` (rev URL-quoted):
  ``{"id", "sha", "siblings": [{"rfilename"}], "private", "gated", "lastModified"}``;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=&expand=``: entries
  ``{"type": "file"|"directory", "path", "size", "oid"}`` and for LFS files
  ``"lfs": {"oid": <sha256>, "size", "pointerSize"}``; paginated with a ``Link: <...>;
  rel="next"`` header like the Hub (``page_size``);
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: a regular (git) file answers 200 with
  ``ETag: "<git blob sha1>"``, ``X-Repo-Commit`` and ``Content-Length``; an LFS file answers
  ``302`` to a signed "CDN" URL on a different origin (``localhost`` instead of
  ``127.0.0.1``, so the client drops the token as it does for the real CDN) and carries
  ``X-Repo-Commit``, ``X-Linked-Etag: "<sha256>"``, ``X-Linked-Size`` and ``Location``;
- ``GET``/``HEAD /cdn/{sha256}?sig=``: the LFS bytes with ``Range`` (206, ``Content-Range``;
  416 when unsatisfiable);
- errors as the Hub sends them (``X-Error-Code``/``X-Error-Message``): an unknown or private
  repository is ``401 RepoNotFound`` without a token and ``404 RepoNotFound`` with one; a gated
  repository lists its files but ``resolve`` answers ``401 GatedRepo`` without a token and
  ``403 GatedRepo`` with a token that was not granted access; an unknown revision is
  ``404 RevisionNotFound``; a missing file ``404 EntryNotFound``; an unknown token
  ``401 "Invalid credentials in Authorization header"``.

Test hooks: ``requests`` (every request: method, path, range, status, body bytes sent),
``drop_after[path] = n`` (the next body of that repo file is cut after n bytes and the
connection closed: a dropped connection), ``corrupt.add(path)`` (serve flipped bytes under
the advertised sha256), ``tamper`` (a hostile or broken Hub: ``"sha"`` replaces the commit
``repo_info`` names, ``"entry"`` is merged into every file of a tree listing, ``"loop"`` makes
every tree page's ``Link: rel="next"`` point at itself, ``"pad"`` adds that many bytes to
``repo_info``'s answer). A repository is ``{"revisions": {"main": DIR, ...}, "private":
bool, "gated": bool, "tokens": [...]}``; the commit of a revision is derived from its
content, so the same directory is the same commit.

Run alone: ``python tests/hub_standin.py --spec SPEC.json [--port 0] [--log FILE]`` prints
its URL (``HF_ENDPOINT``) on the first line of stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")
LFS_MIN_SIZE = 10 * 1024 * 1024  # the Hub stores files above 10 MB in LFS
CHUNK = 1024 * 1024
_HASH_CACHE: dict[tuple[int, int, int, int], tuple[str, str]] = {}
_HASH_LOCK = threading.Lock()


def _hashes(path: Path, lfs: bool) -> tuple[str, str]:
    """(sha256, git blob sha1 or "" for LFS files), cached per inode, size and mtime (hard
    links of one checkpoint in several revisions are hashed once)."""
    st = path.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _HASH_LOCK:
        if key in _HASH_CACHE:
            return _HASH_CACHE[key]
    sha256 = hashlib.sha256()
    sha1 = None if lfs else hashlib.sha1(f"blob {st.st_size}\0".encode())
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            sha256.update(block)
            if sha1 is not None:
                sha1.update(block)
    value = (sha256.hexdigest(), sha1.hexdigest() if sha1 is not None else "")
    with _HASH_LOCK:
        _HASH_CACHE[key] = value
    return value


class RepoFileEntry:
    def __init__(self, root: Path, rel: str) -> None:
        self.path = root / rel
        self.rel = rel
        self.size = self.path.stat().st_size
        self.lfs = rel.endswith(LFS_SUFFIXES) or self.size >= LFS_MIN_SIZE
        self.sha256, blob_sha1 = _hashes(self.path, self.lfs)
        if self.lfs:
            pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                       f"size {self.size}\n").encode()
            self.pointer_size = len(pointer)
            self.oid = hashlib.sha1(
                f"blob {len(pointer)}\0".encode() + pointer).hexdigest()
        else:
            self.pointer_size = 0
            self.oid = blob_sha1

    def tree_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "oid": self.oid, "size": self.size,
                                 "path": self.rel}
        if self.lfs:
            entry["lfs"] = {"oid": self.sha256, "size": self.size,
                            "pointerSize": self.pointer_size}
        return entry


class Snapshot:
    """One commit of a repository: the files of a directory."""

    def __init__(self, repo_id: str, directory: Path) -> None:
        self.directory = directory
        rels = sorted(str(p.relative_to(directory)).replace(os.sep, "/")
                      for p in directory.rglob("*") if p.is_file())
        self.files = {rel: RepoFileEntry(directory, rel) for rel in rels}
        digest = hashlib.sha1(repo_id.encode())
        for rel, entry in self.files.items():
            digest.update(f"{rel}\0{entry.oid}\0".encode())
        self.commit = digest.hexdigest()

    def directories(self) -> list[str]:
        dirs = set()
        for rel in self.files:
            parts = rel.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:depth]))
        return sorted(dirs)


class Repo:
    def __init__(self, repo_id: str, spec: dict[str, Any]) -> None:
        self.id = repo_id
        self.private = bool(spec.get("private"))
        self.gated = bool(spec.get("gated"))
        self.tokens = set(spec.get("tokens", []))
        self.refs: dict[str, str] = {}
        self.commits: dict[str, Snapshot] = {}
        for ref, directory in spec["revisions"].items():
            self.set_revision(ref, Path(directory))

    def set_revision(self, ref: str, directory: Path) -> str:
        snap = Snapshot(self.id, directory)
        self.commits[snap.commit] = snap
        self.refs[ref] = snap.commit
        return snap.commit

    def resolve(self, rev: str) -> Snapshot | None:
        if rev in self.refs:
            return self.commits[self.refs[rev]]
        if rev in self.commits:
            return self.commits[rev]
        matches = [c for c in self.commits if len(rev) >= 7 and c.startswith(rev)]
        return self.commits[matches[0]] if len(matches) == 1 else None


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


class HubStandin(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, repos: dict[str, dict[str, Any]], host: str = "127.0.0.1",
                 port: int = 0, tokens: list[str] | None = None, page_size: int = 1000,
                 log_file: str | None = None) -> None:
        super().__init__((host, port), _Handler)
        self.repos = {repo_id: Repo(repo_id, spec) for repo_id, spec in repos.items()}
        self.tokens = set(tokens or [])
        for repo in self.repos.values():
            self.tokens |= repo.tokens
        self.page_size = page_size
        self.requests: list[dict[str, Any]] = []
        self.drop_after: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.tamper: dict[str, Any] = {}
        self.log_file = log_file
        self._lock = threading.Lock()
        self.blobs: dict[str, Path] = {}
        for repo in self.repos.values():
            self._index_blobs(repo)

    def _index_blobs(self, repo: Repo) -> None:
        for snap in repo.commits.values():
            for entry in snap.files.values():
                if entry.lfs:
                    self.blobs[entry.sha256] = entry.path

    def set_revision(self, repo_id: str, ref: str, directory: Path) -> str:
        """Point a branch or tag at the content of `directory` (a new commit); return it."""
        commit = self.repos[repo_id].set_revision(ref, Path(directory))
        self._index_blobs(self.repos[repo_id])
        return commit

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://localhost:{self.server_address[1]}"

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log_file:
                with open(self.log_file, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry) + "\n")

    def body_bytes(self, path_contains: str = "") -> int:
        """Body bytes sent for requests whose path contains `path_contains`."""
        return sum(r["sent"] for r in self.requests if path_contains in r["path"])

    def start(self) -> HubStandin:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: HubStandin
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    # --- plumbing -------------------------------------------------------------------------

    def _dispatch(self, head: bool) -> None:
        self._sent = 0
        self._status = 0
        self._lfs_path: str | None = None
        split = urlsplit(self.path)
        try:
            token = self._token()
            if split.path.startswith("/api/models/"):
                self._api(split.path[len("/api/models/"):], parse_qs(split.query), token, head)
            elif split.path.startswith("/cdn/"):
                self._cdn(split.path[len("/cdn/"):], head)
            else:
                self._resolve(split.path.lstrip("/"), token, head)
        except HubError as error:
            self._error(error, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        self.server.record({"method": self.command, "path": unquote(split.path),
                            "range": self.headers.get("Range"), "status": self._status,
                            "sent": self._sent, "auth": bool(self.headers.get("Authorization")),
                            "time": time.time()})

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if not auth:
            return None
        token = auth.removeprefix("Bearer ").strip()
        if token not in self.server.tokens:
            raise HubError(401, None, "Invalid credentials in Authorization header")
        return token

    def _send(self, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        self._status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", headers.get("Content-Length", str(len(body))))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
            self._sent += len(body)

    def _json(self, data: Any, head: bool, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self._send(200, {"Content-Type": "application/json; charset=utf-8", **(extra or {})},
                   body, head)

    def _error(self, error: HubError, head: bool) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8",
                   "X-Error-Message": error.message, **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        self._send(error.status, headers, json.dumps({"error": error.message}).encode(), head)

    # --- repositories and access ----------------------------------------------------------

    def _repo(self, repo_id: str, token: str | None, for_files: bool) -> Repo:
        repo = self.server.repos.get(repo_id)
        if repo is None or (repo.private and token not in repo.tokens):
            if token is None:
                raise HubError(401, "RepoNotFound", "Repository not found")
            raise HubError(404, "RepoNotFound", "Repository not found")
        if for_files and repo.gated and token not in repo.tokens:
            if token is None:
                raise HubError(401, "GatedRepo", f"Access to model {repo_id} is restricted. You "
                               "must have access to it and be authenticated to access it.")
            raise HubError(403, "GatedRepo", f"Access to model {repo_id} is restricted and you "
                           "are not in the authorized list.")
        return repo

    @staticmethod
    def _snapshot(repo: Repo, rev: str) -> Snapshot:
        snap = repo.resolve(rev)
        if snap is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return snap

    @staticmethod
    def _split_repo(rest: str) -> tuple[str, list[str]]:
        parts = rest.split("/")
        if len(parts) < 2:
            raise HubError(404, "RepoNotFound", "Repository not found")
        return f"{parts[0]}/{parts[1]}", parts[2:]

    # --- /api/models ----------------------------------------------------------------------

    def _api(self, rest: str, query: dict[str, list[str]], token: str | None,
             head: bool) -> None:
        repo_id, tail = self._split_repo(rest)
        repo = self._repo(repo_id, token, for_files=False)
        if not tail or tail[0] == "revision":
            rev = unquote(tail[1]) if len(tail) > 1 else "main"
            snap = self._snapshot(repo, rev)
            tamper = self.server.tamper
            info = {"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
                    "id": repo_id, "author": repo_id.split("/")[0],
                    "sha": tamper.get("sha", snap.commit),
                    "private": repo.private, "gated": "auto" if repo.gated else False,
                    "disabled": False, "lastModified": "2026-11-30T12:00:00.000Z",
                    "tags": ["safetensors"], "library_name": "transformers",
                    "siblings": [{"rfilename": rel} for rel in snap.files]}
            if tamper.get("pad"):
                info["cardData"] = {"pad": "x" * int(tamper["pad"])}
            self._json(info, head)
            return
        if tail[0] == "tree" and len(tail) >= 2:
            snap = self._snapshot(repo, unquote(tail[1]))
            self._tree(repo, snap, unquote("/".join(tail[2:])), query, head)
            return
        raise HubError(404, None, "Not Found")

    def _tree(self, repo: Repo, snap: Snapshot, sub: str, query: dict[str, list[str]],
              head: bool) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = f"{sub}/" if sub else ""
        if sub and sub not in snap.directories():
            raise HubError(404, "EntryNotFound", f"{sub} does not exist on {snap.commit}",
                           {"X-Repo-Commit": snap.commit})

        def visible(rel: str) -> bool:
            if not rel.startswith(prefix):
                return False
            return recursive or "/" not in rel[len(prefix):]

        entries = [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(),
                    "size": 0, "path": d} for d in snap.directories() if visible(d)]
        entries += [{**e.tree_entry(), **self.server.tamper.get("entry", {})}
                    for rel, e in snap.files.items() if visible(rel)]
        entries.sort(key=lambda e: e["path"])
        start = int(query.get("cursor", ["0"])[0])
        page = entries[start:start + self.server.page_size]
        extra = {}
        if self.server.tamper.get("loop"):
            extra["Link"] = f'<{self.server.url}{self.path}>; rel="next"'
        elif start + self.server.page_size < len(entries):
            split = urlsplit(self.path)
            args = {k: v[0] for k, v in query.items() if k != "cursor"}
            args["cursor"] = str(start + self.server.page_size)
            qs = "&".join(f"{k}={quote(v)}" for k, v in args.items())
            extra["Link"] = f'<{self.server.url}{split.path}?{qs}>; rel="next"'
        self._json(page, head, extra)

    # --- /{repo}/resolve/{rev}/{path} ------------------------------------------------------

    def _resolve(self, rest: str, token: str | None, head: bool) -> None:
        repo_id, tail = self._split_repo(rest)
        if len(tail) < 3 or tail[0] != "resolve":
            raise HubError(404, None, "Not Found")
        repo = self._repo(repo_id, token, for_files=True)
        snap = self._snapshot(repo, unquote(tail[1]))
        rel = unquote("/".join(tail[2:]))
        entry = snap.files.get(rel)
        if entry is None:
            raise HubError(404, "EntryNotFound", f"{rel} does not exist on {snap.commit}",
                           {"X-Repo-Commit": snap.commit})
        base = {"X-Repo-Commit": snap.commit, "Accept-Ranges": "bytes",
                "Access-Control-Expose-Headers": "X-Repo-Commit,X-Linked-Etag,X-Linked-Size"}
        if entry.lfs:
            location = f"{self.server.cdn_url}/cdn/{entry.sha256}?sig={snap.commit[:12]}"
            body = f"Found. Redirecting to {location}".encode()
            self._send(302, {**base, "Location": location, "ETag": f'"{entry.oid}"',
                             "X-Linked-Etag": f'"{entry.sha256}"',
                             "X-Linked-Size": str(entry.size),
                             "Content-Type": "text/plain; charset=utf-8"}, body, head)
            return
        self._file(entry.path, rel, {**base, "ETag": f'"{entry.oid}"'}, head)

    def _cdn(self, rest: str, head: bool) -> None:
        sha = rest.split("?")[0]
        path = self.server.blobs.get(sha)
        if path is None:
            raise HubError(404, None, "NoSuchKey")
        rel = next((e.rel for r in self.server.repos.values() for s in r.commits.values()
                    for e in s.files.values() if e.sha256 == sha), sha)
        self._lfs_path = rel
        self._file(path, rel, {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"}, head)

    def _file(self, path: Path, rel: str, headers: dict[str, str], head: bool) -> None:
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
            if not match or (not match.group(1) and not match.group(2)):
                raise HubError(416, None, "Invalid range", {"Content-Range": f"bytes */{size}"})
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:
                start = max(size - int(match.group(2)), 0)
            if start >= size or start > end:
                raise HubError(416, None, "Requested range not satisfiable",
                               {"Content-Range": f"bytes */{size}"})
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
        length = end - start + 1
        self._status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if head:
            return
        drop = self.server.drop_after.pop(rel, None)
        corrupt = rel in self.server.corrupt
        with open(path, "rb") as handle:
            handle.seek(start)
            left = length
            while left > 0:
                block = handle.read(min(CHUNK, left))
                if not block:
                    break
                if corrupt and handle.tell() - len(block) == start:
                    block = bytes([block[0] ^ 0xFF]) + block[1:]
                if drop is not None and self._sent + len(block) > drop:
                    self.wfile.write(block[: max(drop - self._sent, 0)])
                    self._sent = drop
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(block)
                self._sent += len(block)
                left -= len(block)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve model directories as a Hub stand-in.")
    parser.add_argument("--spec", required=True,
                        help='JSON: {"repos": {"org/name": {"revisions": {"main": DIR}}}, '
                        '"tokens": [...]}')
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="append one JSON line per request to this file")
    parser.add_argument("--url-file", help="write the URL here once serving (after hashing)")
    parser.add_argument("--idle-exit", type=float, default=0,
                        help="exit after this many seconds without a request (0: never)")
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    server = HubStandin(spec["repos"], host=args.host, port=args.port,
                        tokens=spec.get("tokens"), log_file=args.log)
    print(server.url, flush=True)
    for repo in server.repos.values():
        for ref, commit in repo.refs.items():
            print(f"{repo.id}@{ref} {commit}", flush=True)
    if args.url_file:
        Path(args.url_file).write_text(server.url)
    if args.idle_exit:
        server.timeout = args.idle_exit
        server.last_request = time.time()
    with contextlib.suppress(KeyboardInterrupt):
        if not args.idle_exit:
            server.serve_forever()
        while args.idle_exit:
            server.handle_request()
            idle = time.time() - max([r["time"] for r in server.requests[-1:]] or
                                     [server.last_request])
            if idle >= args.idle_exit:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
