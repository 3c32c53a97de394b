"""Fetch a model once (from the Hub, a mirror or a controller directory) with its manifest.

Controller side; the only module that talks to the Hub, always through the real
``huggingface_hub`` client. The endpoint is ``HF_ENDPOINT`` (a mirror, or a test stand-in),
read when a call is made; the token is ``HF_TOKEN``, a token file, or the client's own stored
token. The token is handed to the client only: never printed, logged or written anywhere.
Proxies come from the usual ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` environment.

Nothing half-written: files land in ``DEST.partial/`` (kept between attempts, so a retry
resumes where the last one stopped), are checked against the Hub's sha256 (LFS) and then
``DEST.partial`` is renamed to ``DEST`` with ``onecat-manifest.json`` inside.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .manifest import (
    MANIFEST_NAME,
    MAX_FILES,
    MAX_SIZE,
    SHA256_RE,
    ManifestError,
    NotRegularFile,
    build_manifest,
    check_regular,
    hash_file,
    load_manifest,
    open_regular,
    verify_dir,
    write_json_atomic,
)
from .source import ENGINE_FILES, Source, SourceError, parse_source, select_engine_files

GIB = 1024**3
PARTIAL_SUFFIX = ".partial"
# Small files the planner reads; everything else is read as safetensors headers.
PLAN_FILES = ("config.json", "hf_quant_config.json", "generation_config.json",
              "model.safetensors.index.json")
SPARSE_BLOCK = 1024 * 1024
# What the Hub's answers may be: a commit is 40 hex digits (an LFS oid: SHA256_RE); an engine file's
# name is plain (no glob characters: names go to the client as allow_patterns).
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9_.+=,@-]{1,255}")
# Every call to the Hub: connect within 10 s, no 60 s silence on a read (huggingface_hub's
# API calls pass no timeout of their own), and no API answer over 64 MiB held in memory.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
MAX_API_BODY = 64 * 1024 * 1024


class FetchError(Exception):
    """A fetch that cannot proceed: one line for a human, exit status 2."""


@dataclass
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # the Hub's LFS sha256; None for files stored in git


@dataclass
class RemoteSnapshot:
    source: Source
    commit: str
    files: list[RemoteFile] = field(default_factory=list)

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class FetchResult:
    dest: str
    manifest: dict[str, Any]
    downloaded: bool  # False when DEST already held this exact artifact


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token_transport(token: str | None) -> None:
    """A token travels over https only (loopback excepted): plain http would show it to
    every hop between here and the mirror."""
    from urllib.parse import urlsplit

    url = urlsplit(endpoint())
    if token and url.scheme != "https" and not _loopback(url.hostname or ""):
        raise FetchError(f"HF_ENDPOINT {endpoint()} is plain {url.scheme or 'http'}: the Hub "
                         "token would cross the network in clear; use an https mirror, or "
                         "unset HF_TOKEN (and --token-file) for a mirror that needs none")


def read_token(token_file: str | None = None) -> str | None:
    """HF_TOKEN, else the token file, else None (the client then uses its stored login)."""
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        check_token_transport(token)
        return token
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as error:
            raise FetchError(f"token file {token_file}: cannot read: "
                             f"{error.strerror or error}") from error
        if not token:
            raise FetchError(f"token file {token_file} is empty")
        check_token_transport(token)
        return token
    return None


def _hub():
    try:
        import huggingface_hub
    except ImportError as error:  # pragma: no cover - a broken install
        raise FetchError("the Python package huggingface_hub is missing: "
                         "pip install -c constraints.txt -e .") from error
    # Its warnings would repeat what our one-line errors say.
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    _bound_the_client(huggingface_hub)
    return huggingface_hub


def _bound_the_client(hub: Any) -> None:
    """Give the client's shared HTTP session timeouts and a bound on API answers (once)."""
    if getattr(hub, "_onecat_bounded", False):
        return
    import importlib

    # The module that owns the client factory (huggingface_hub >= 1.0).
    http = importlib.import_module("huggingface_hub.utils._http")
    default = getattr(http, "default_client_factory", None)
    if default is None:  # pragma: no cover - another client generation: keep its defaults
        return
    timeouts = {"connect": CONNECT_TIMEOUT_S, "read": READ_TIMEOUT_S,
                "write": READ_TIMEOUT_S, "pool": READ_TIMEOUT_S}

    def with_timeouts(request: Any) -> None:
        current = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {key: current.get(key) or value
                                         for key, value in timeouts.items()}

    def bounded(response: Any) -> None:
        length = response.headers.get("Content-Length", "")
        if response.request.url.path.startswith("/api/") and length.isdigit() and \
                int(length) > MAX_API_BODY:
            response.close()
            raise FetchError(f"{endpoint()} answered {response.request.url.path} with "
                             f"{int(length) / 1024**2:.3g} MiB (at most "
                             f"{MAX_API_BODY / 1024**2:.3g} MiB expected): is HF_ENDPOINT a "
                             "Hugging Face Hub?")

    def factory() -> Any:
        client = default()
        hooks = client.event_hooks
        client.event_hooks = {"request": [with_timeouts, *hooks.get("request", [])],
                              "response": [bounded, *hooks.get("response", [])]}
        return client

    http.set_client_factory(factory)
    hub._onecat_bounded = True


def _explain(error: BaseException, source: Source, token: str | None) -> FetchError:
    """One line a human can act on, for everything the client raises."""
    hub = _hub()
    errors = hub.errors
    where = f"{source} at {endpoint()}"
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, errors.RevisionNotFoundError):
        return FetchError(f"{where}: revision {source.revision!r} not found (404): check the "
                          "branch, tag or commit")
    if isinstance(error, errors.GatedRepoError):
        if token:
            return FetchError(f"{where}: gated repository and this HF_TOKEN has not been "
                              f"granted access ({status}): accept the license on the Hub with "
                              "the token's account")
        return FetchError(f"{where}: gated repository ({status}): set HF_TOKEN (or "
                          "--token-file) to a token whose account accepted the license")
    if isinstance(error, errors.RepositoryNotFoundError):
        if token:
            return FetchError(f"{where}: repository not found ({status}), or HF_TOKEN cannot "
                              "see it: check ORG/NAME and the token's access")
        return FetchError(f"{where}: repository not found or private ({status}): check "
                          "ORG/NAME; for a private repository set HF_TOKEN (or --token-file)")
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return FetchError(f"{where}: a listed file is missing on the server (404): the "
                          "repository changed during the fetch, try again")
    if isinstance(error, errors.HfHubHTTPError) and status in (401, 403):
        return FetchError(f"{where}: access denied ({status}): HF_TOKEN is invalid or lacks "
                          "read access")
    if isinstance(error, errors.HfHubHTTPError):
        return FetchError(f"{where}: the server answered HTTP {status}: try again later or "
                          "use a mirror (HF_ENDPOINT)")
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    if _is_connection_error(error):
        return FetchError(f"cannot reach {endpoint()} ({text}): check the network, proxy "
                          "(HTTPS_PROXY) or the mirror in HF_ENDPOINT")
    return FetchError(f"{where}: {text}")


def _is_connection_error(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"ConnectError", "TimeoutException", "ProxyError", "NetworkError",
                         "RemoteProtocolError", "ConnectionError", "LocalEntryNotFoundError",
                         "OfflineModeIsEnabled"})


@contextlib.contextmanager
def _translated(source: Source, token: str | None):
    try:
        yield
    except (FetchError, SourceError, ManifestError):
        raise
    except OSError as error:
        if isinstance(error, FileNotFoundError | PermissionError) or error.errno in (
                errno.ENOSPC, errno.EROFS, errno.EDQUOT):
            raise FetchError(f"{source}: {error}") from error
        raise _explain(error, source, token) from error
    except Exception as error:
        raise _explain(error, source, token) from error


def _tree(api: Any, hub: Any, source: Source, commit: str) -> dict[str, Any]:
    """The repository's files by path; a listing that repeats itself (a paging loop) or
    never ends is refused, not followed."""
    by_path: dict[str, Any] = {}
    for item in api.list_repo_tree(source.repo, revision=commit, recursive=True):
        if not isinstance(item, hub.hf_api.RepoFile):
            continue
        if item.path in by_path:
            raise FetchError(f"{source}: the server listed {str(item.path)[:80]!r} twice (its "
                             "pages loop): is HF_ENDPOINT a Hugging Face Hub?")
        if len(by_path) >= MAX_FILES:
            raise FetchError(f"{source}: the server listed more than {MAX_FILES} files: not a "
                             "model repository")
        by_path[item.path] = item
    return by_path


def _remote_file(source: Source, item: Any) -> RemoteFile:
    """One chosen file, its name, size and LFS sha256 checked (the Hub's answers are input)."""
    name, size = item.path, item.size
    if not _FILE_NAME_RE.fullmatch(name) or name in (".", ".."):
        raise FetchError(f"{source}: the repository's file {name[:80]!r} has a name onecat "
                         "does not fetch (letters, digits and ._+=,@- only): ask the "
                         "repository's owner, or copy the model and use a file: source")
    if type(size) is not int or not 0 <= size <= MAX_SIZE:
        raise FetchError(f"{source}: the server listed {name} with size {size!r:.40}: "
                         "is HF_ENDPOINT a Hugging Face Hub?")
    sha = item.lfs.sha256 if item.lfs is not None else None
    if sha is not None and not (isinstance(sha, str) and SHA256_RE.fullmatch(sha)):
        raise FetchError(f"{source}: the server gave {name} the sha256 {sha!r:.80}: "
                         "is HF_ENDPOINT a Hugging Face Hub?")
    return RemoteFile(name, size, sha)


def _commit(source: Source, sha: Any) -> str:
    """The resolved commit: 40 hex digits, and the requested one when a commit was asked."""
    if not sha:
        raise FetchError(f"{source}: the server named no commit for this revision: is "
                         f"{endpoint()} a Hugging Face Hub (HF_ENDPOINT)?")
    if not (isinstance(sha, str) and _COMMIT_RE.fullmatch(sha)):
        raise FetchError(f"{source}: the server named the commit {sha!r:.80} (not 40 "
                         "hex digits): is HF_ENDPOINT a Hugging Face Hub?")
    asked = (source.revision or "").lower()
    if _COMMIT_RE.fullmatch(asked) and sha != asked:
        raise FetchError(f"{source}: asked for commit {asked} and the server answered {sha}: "
                         "refusing a mirror that serves another commit")
    return sha


def remote_snapshot(source: Source, token: str | None) -> RemoteSnapshot:
    """Resolve the revision to its commit and list the files the engine loads."""
    hub = _hub()
    api = hub.HfApi(endpoint=endpoint(), token=token)
    with _translated(source, token):
        info = api.repo_info(source.repo, revision=source.revision)
        commit = _commit(source, info.sha)
        by_path = _tree(api, hub, source, commit)
    try:
        chosen = select_engine_files([p for p in by_path if isinstance(p, str)])
    except SourceError as error:
        raise FetchError(f"{source}: {error}") from error
    return RemoteSnapshot(source, commit, [_remote_file(source, by_path[p]) for p in chosen])


def check_free_space(dest: str, needed: int) -> None:
    parent = os.path.dirname(os.path.abspath(dest)) or "/"
    probe = parent
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise FetchError(f"{dest}: {free / GIB:.2f} GiB free on its filesystem but the model "
                         f"needs {needed / GIB:.2f} GiB more: free space or choose another "
                         "DEST")


def _partial_bytes(partial: str) -> int:
    total = 0
    for root, _, names in os.walk(partial):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def _current(dest: str, commit: str | None, digest: str | None = None) -> dict | None:
    """DEST's manifest when DEST already holds this commit (or digest) and verifies."""
    try:
        manifest = load_manifest(dest)
    except ManifestError:
        return None
    if commit is not None and manifest.get("commit") != commit:
        return None
    if digest is not None and manifest.get("digest") != digest:
        return None
    return manifest if verify_dir(dest, manifest, mode="fast")["ok"] else None


def _replace_dest(partial: str, dest: str) -> None:
    """Atomically put `partial` at `dest`; an older DEST is moved aside, then removed."""
    old = None
    if os.path.lexists(dest):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.old-",
                               dir=os.path.dirname(os.path.abspath(dest)))
        os.rename(dest, os.path.join(old, "dir"))
    os.rename(partial, dest)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def fetch_hf(source: Source, dest: str, *, token: str | None,
             progress: bool = True) -> FetchResult:
    snap = remote_snapshot(source, token)
    existing = _current(dest, snap.commit)
    if existing is not None:
        return FetchResult(dest, existing, downloaded=False)
    partial = dest.rstrip("/") + PARTIAL_SUFFIX
    check_free_space(dest, max(snap.total_size - _partial_bytes(partial), 0))
    os.makedirs(partial, exist_ok=True)
    _seed_from_siblings(partial, dest, snap.files)
    hub = _hub()
    names = [f.path for f in snap.files]
    old_bars = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    if not progress:
        hub.utils.disable_progress_bars()
    try:
        with _translated(source, token):
            hub.snapshot_download(
                source.repo, revision=snap.commit, local_dir=partial,
                allow_patterns=names, endpoint=endpoint(), token=token,
                cache_dir=os.path.join(partial, ".cache", "hub"), max_workers=4,
            )
    finally:
        if not progress and old_bars is None:
            hub.utils.enable_progress_bars()
    shutil.rmtree(os.path.join(partial, ".cache"), ignore_errors=True)
    _remove_unlisted(partial, {f.path for f in snap.files})
    rows, bad = [], []
    for remote in snap.files:
        path = os.path.join(partial, remote.path)
        try:
            size = check_regular(partial, remote.path).st_size
        except OSError:
            bad.append(f"{remote.path} missing")
            continue
        digest = hash_file(path)
        if size != remote.size or (remote.sha256 and digest != remote.sha256):
            bad.append(f"{remote.path} (sha256 {digest[:12]}..., the Hub says "
                       f"{(remote.sha256 or '?')[:12]}...; {size} of {remote.size} bytes)")
            os.unlink(path)  # the next attempt downloads it again
            _forget_download(partial, remote.path)
            continue
        rows.append({"path": remote.path, "size": size, "sha256": digest})
    if bad:
        raise FetchError(f"{source}: downloaded files do not match the Hub's manifest: "
                         f"{'; '.join(bad)}: removed, run the fetch again (a mirror serving "
                         "corrupt data would fail again)")
    manifest = build_manifest(rows, source=str(source), repo=source.repo,
                              revision=source.revision, commit=snap.commit)
    write_json_atomic(os.path.join(partial, MANIFEST_NAME), manifest)
    _replace_dest(partial, dest)
    return FetchResult(dest, manifest, downloaded=True)


def _remove_unlisted(folder: str, keep: set[str]) -> None:
    """Nothing in DEST that its manifest does not list (a leftover of an older attempt, a
    file the client wrote beside the ones asked for)."""
    for root, dirs, names in os.walk(folder, topdown=False):
        for name in names:
            path = os.path.join(root, name)
            if os.path.relpath(path, folder).replace(os.sep, "/") not in keep:
                os.unlink(path)
        for name in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(root, name))
            if os.path.islink(os.path.join(root, name)):
                os.unlink(os.path.join(root, name))


def _seed_from_siblings(partial: str, dest: str, files: list[RemoteFile]) -> None:
    """Hard-link LFS files other revisions in DEST's folder already hold (same sha256).

    A revision that changes only a config file then costs no weight download: the client
    finds the file in place, hashes it against the Hub's sha256 and keeps it.
    """
    wanted = {f.sha256: f.path for f in files if f.sha256}
    parent = os.path.dirname(os.path.abspath(dest))
    for sibling in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        folder = os.path.join(parent, sibling)
        if folder in (os.path.abspath(dest), os.path.abspath(partial)):
            continue
        try:
            manifest = load_manifest(folder)
        except ManifestError:
            continue
        for row in manifest["files"]:
            rel = wanted.get(row["sha256"])
            target = os.path.join(partial, rel) if rel else None
            if target and not os.path.lexists(target):
                with contextlib.suppress(OSError):
                    check_regular(folder, row["path"])
                    os.link(os.path.join(folder, row["path"]), target)


def _forget_download(partial: str, rel: str) -> None:
    meta = os.path.join(partial, ".cache", "huggingface", "download", rel + ".metadata")
    with contextlib.suppress(OSError):
        os.unlink(meta)


def sparse_copy(src: str, dst: str) -> None:
    """Copy a file keeping its holes (SEEK_DATA/SEEK_HOLE): a sparse checkpoint stays sparse."""
    with os.fdopen(open_regular(src), "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        fd = fin.fileno()
        offset = 0
        while offset < size:
            try:
                data = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:  # only a hole is left
                    break
                raise
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            fin.seek(data)
            fout.seek(data)
            left = hole - data
            while left > 0:
                block = fin.read(min(SPARSE_BLOCK, left))
                if not block:
                    break
                fout.write(block)
                left -= len(block)
            offset = hole
        fout.truncate(size)
    shutil.copystat(src, dst, follow_symlinks=False)


def fetch_file(source: Source, dest: str) -> FetchResult:
    """Copy a controller directory (an air-gapped fleet's internal copy) with its manifest.

    When the directory carries a onecat manifest (it was fetched before), the copy is checked
    against it and keeps its source and commit; otherwise every file is hashed here.
    """
    src = source.path or ""
    if not os.path.isdir(src):
        raise FetchError(f"{source}: no such directory on this machine")
    try:
        known = load_manifest(src)
    except ManifestError as error:
        if os.path.exists(os.path.join(src, MANIFEST_NAME)):
            raise FetchError(str(error)) from error
        known = None
    if known is not None:
        names = [f["path"] for f in known["files"]]
    else:
        try:
            names = select_engine_files(sorted(os.listdir(src)))
        except SourceError as error:
            raise FetchError(f"{source}: {error}") from error
        names = [n for n in names if not os.path.isdir(os.path.join(src, n))]
    sizes = {}
    for name in names:
        try:
            sizes[name] = check_regular(src, name).st_size
        except NotRegularFile as error:
            raise FetchError(f"{source}: {error}") from error
        except FileNotFoundError:
            sizes[name] = 0  # named by its manifest and missing: the check below says so
    existing = _current(dest, known.get("commit") if known else None,
                        known["digest"] if known else None)
    if existing is not None and (known is not None or existing.get("source") == str(source)):
        return FetchResult(dest, existing, downloaded=False)
    total = sum(sizes.values())
    partial = dest.rstrip("/") + PARTIAL_SUFFIX
    shutil.rmtree(partial, ignore_errors=True)
    check_free_space(dest, total)
    os.makedirs(partial)
    try:
        for name in names:
            if sizes[name] or os.path.lexists(os.path.join(src, name)):
                os.makedirs(os.path.dirname(os.path.join(partial, name)), exist_ok=True)
                sparse_copy(os.path.join(src, name), os.path.join(partial, name))
        if known is not None:
            result = verify_dir(partial, known, mode="full", write_stamp=False)
            if not result["ok"]:
                raise FetchError(f"{source}: the copy does not match the source's manifest: "
                                 f"{'; '.join(result['problems'])}")
            manifest = known
        else:
            rows = [{"path": n, "size": os.path.getsize(os.path.join(partial, n)),
                     "sha256": hash_file(os.path.join(partial, n))} for n in names]
            manifest = build_manifest(rows, source=str(source))
        write_json_atomic(os.path.join(partial, MANIFEST_NAME), manifest)
    except FileNotFoundError as error:
        shutil.rmtree(partial, ignore_errors=True)
        raise FetchError(f"{source}: {error.filename} vanished during the copy") from error
    except NotRegularFile as error:
        shutil.rmtree(partial, ignore_errors=True)
        raise FetchError(f"{source}: {error}") from error
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _replace_dest(partial, dest)
    return FetchResult(dest, manifest, downloaded=True)


def fetch(source_text: str, dest: str, *, token_file: str | None = None,
          progress: bool = True) -> FetchResult:
    """Fetch `source_text` into `dest` (a directory that holds only this model)."""
    try:
        source = parse_source(source_text)
    except SourceError as error:
        raise FetchError(str(error)) from error
    if source.kind == "node":
        raise FetchError(f"{source}: a node: source is already on every node; nothing to "
                         "fetch (the model stage verifies it there)")
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise FetchError(f"{dest}: exists and is not a directory")
    if os.path.isdir(dest) and os.listdir(dest) and not os.path.exists(
            os.path.join(dest, MANIFEST_NAME)):
        raise FetchError(f"{dest}: not empty and holds no {MANIFEST_NAME}: refusing to "
                         "replace a directory onecat did not write")
    if source.kind == "file":
        return fetch_file(source, dest)
    return fetch_hf(source, dest, token=read_token(token_file), progress=progress)


# --- planning over HTTP ------------------------------------------------------------------


def _write_header_file(path: str, tensors: dict[str, Any], metadata: dict[str, Any]) -> None:
    """A safetensors file with the real header and a sparse data region of the real size."""
    import json

    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    end = 0
    for name, info in tensors.items():
        header[name] = {"dtype": info.dtype, "shape": list(info.shape),
                        "data_offsets": list(info.data_offsets)}
        end = max(end, int(info.data_offsets[1]))
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + end)


def plan_remote(source_text: str, planner: Callable[..., dict[str, Any]], *,
                token_file: str | None = None, **options: Any) -> dict[str, Any]:
    """Plan a Hub model from its config files and safetensors headers, read over HTTP
    (range requests); the weights are never downloaded. ``planner`` is the on-disk
    planner (``plan_model``), run on a directory that holds the real config files and
    header-only safetensors files, so both plans are the same by construction."""
    try:
        source = parse_source(source_text)
    except SourceError as error:
        raise FetchError(str(error)) from error
    if source.kind != "hf":
        raise FetchError(f"{source}: only hf: sources are planned remotely")
    token = read_token(token_file)
    snap = remote_snapshot(source, token)
    hub = _hub()
    api = hub.HfApi(endpoint=endpoint(), token=token)
    names = {f.path for f in snap.files}
    with tempfile.TemporaryDirectory(prefix="onecat-plan-") as shadow:
        old = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
        hub.utils.disable_progress_bars()
        try:
            with _translated(source, token):
                for name in PLAN_FILES:
                    if name in names:
                        hub.hf_hub_download(source.repo, name, revision=snap.commit,
                                            local_dir=shadow, endpoint=endpoint(),
                                            token=token,
                                            cache_dir=os.path.join(shadow, ".cache", "hub"))
                for remote in snap.files:
                    if remote.path.endswith(".safetensors"):
                        meta = api.parse_safetensors_file_metadata(
                            source.repo, remote.path, revision=snap.commit)
                        _write_header_file(os.path.join(shadow, remote.path), meta.tensors,
                                           meta.metadata)
        finally:
            if old is None:
                hub.utils.enable_progress_bars()
        shutil.rmtree(os.path.join(shadow, ".cache"), ignore_errors=True)
        plan = planner(shadow, **options)
    label = f"hf:{source.repo}@{source.revision}"
    plan["model_dir"] = label if source.revision == snap.commit else f"{label} ({snap.commit})"
    plan["source"] = {"source": str(source), "commit": snap.commit,
                      "total_size": snap.total_size, "files": len(snap.files)}
    return plan


__all__ = ["ENGINE_FILES", "FetchError", "FetchResult", "fetch", "plan_remote",
           "remote_snapshot", "sparse_copy"]
