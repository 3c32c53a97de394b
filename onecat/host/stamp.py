"""Stage stamps: whether a stage that passed on a node still has nothing to do there.

When a stage (driver, runtime) passes on a node, the node keeps a stamp: the digest of what
the controller wanted (the role's files, the host's variables, the lock entry) and a
fingerprint of what the stage manages on the node (its files, its packages' dpkg state, its
units' states, the running kernel, settings of the GPUs such as persistence mode, symlinks such
as the NVIDIA devices' /dev/char links). A later run recomputes both; the stage is skipped on the
node only when both still match, so a wanted change and drift by hand (a file edited, a
package removed or unheld, a unit stopped, a new kernel booted, persistence mode turned off, a
link removed) both run the stage again.

Stdlib only, relative imports: shipped to nodes by library/stage_stamp.py.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

STAMP_FORMAT = 1
# Always part of a fingerprint: a new kernel or a distribution upgrade needs the stage again
# (a DKMS module for the new kernel, another package set).
HOST_FILES = ("/proc/sys/kernel/osrelease", "/etc/os-release")
ABSENT = "absent"
OWN_PREFIX = "onecat-"
CHUNK = 1 << 20


def file_state(path: str) -> str:
    """Content digest, mode and owner of a file ("absent" when it does not exist).

    A symlink is its target and the target's state: a model link moved to another revision
    is a change even when both revisions hold the same config.json.
    """
    if os.path.islink(path):
        return f"symlink to {os.readlink(path)}; {_target_state(path)}"
    return _target_state(path)


def _target_state(path: str) -> str:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return ABSENT
    except OSError as err:
        return f"unreadable ({err.strerror})"
    owner = f"{info.st_uid}:{info.st_gid}"
    mode = f"{stat.S_IMODE(info.st_mode):04o}"
    if stat.S_ISDIR(info.st_mode):
        return f"directory mode {mode} owner {owner}"
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            # /proc and /sys files report size 0: read until the end, not st_size bytes.
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                digest.update(chunk)
    except OSError as err:
        return f"unreadable ({err.strerror})"
    return f"sha256 {digest.hexdigest()} mode {mode} owner {owner}"


def path_state(pattern: str) -> str:
    """file_state of a path; for a glob (a path with *), the sorted states of every match.

    A glob covers the host's own files (apt entries and keys a role may reuse); onecat's own
    files in it (onecat-*) are left out: each belongs to the stage that writes it, which lists
    it by name, so one stage's new file is not another stage's drift.
    """
    if "*" not in pattern:
        return file_state(pattern)
    matches = sorted(
        path
        for path in glob.glob(pattern)
        if os.path.isfile(path) and not os.path.basename(path).startswith(OWN_PREFIX)
    )
    if not matches:
        return "no match"
    listing = "\n".join(f"{path} {file_state(path)}" for path in matches)
    return f"{len(matches)} files, sha256 {hashlib.sha256(listing.encode()).hexdigest()}"


def tree_state(top: str) -> str:
    """Every file under a folder by path, size and modification time, not content: a model of
    tens of GB is fingerprinted in a few stat calls, and a shard replaced or truncated behind
    onecat's back is seen. onecat's own bookkeeping (.onecat-*) is left out."""
    try:
        os.stat(top)
    except FileNotFoundError:
        return ABSENT
    except OSError as err:
        return f"unreadable ({err.strerror})"
    rows = []
    for folder, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(names):
            if name.startswith(".onecat-"):
                continue
            path = os.path.join(folder, name)
            try:
                info = os.stat(path)
            except OSError as err:
                rows.append(f"{os.path.relpath(path, top)} unreadable ({err.strerror})")
                continue
            rows.append(f"{os.path.relpath(path, top)} {info.st_size} {info.st_mtime_ns}")
    listing = "\n".join(rows)
    return f"{len(rows)} files, sha256 {hashlib.sha256(listing.encode()).hexdigest()}"


LINK_ARROW = " -> "


def link_state(spec: str) -> str:
    """The symlinks of a folder, "FOLDER -> PATTERN": those whose target, taken from FOLDER and
    normalized, matches the fnmatch PATTERN (without " -> PATTERN", every link of the folder).

    Each link is "name -> target" as the link holds it, by name, marked "(dangling)" when its
    target is missing: a link removed, added or pointed elsewhere changes the state
    ("/dev/char -> /dev/nvidia*": the NVIDIA devices' /dev/char/<major>:<minor> links).
    """
    folder, _, pattern = spec.partition(LINK_ARROW)
    folder, pattern = folder.strip(), pattern.strip()
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return ABSENT
    except OSError as err:
        return f"unreadable ({err.strerror})"
    rows = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            target = os.readlink(path)
        except OSError:  # not a link (or gone meanwhile)
            continue
        if pattern and not fnmatch.fnmatchcase(os.path.normpath(os.path.join(folder, target)),
                                               pattern):
            continue
        rows.append(f"{name} -> {target}" + ("" if os.path.exists(path) else " (dangling)"))
    if not rows:
        return "no links"
    return f"{len(rows)} links: " + ", ".join(rows)


# A field of `nvidia-smi --query-gpu` (nvidia-smi --help-query-gpu): persistence_mode, ...
GPU_FIELD = re.compile(r"[a-z][a-z0-9_.]*")


def gpu_query(fields: Iterable[str]) -> list[str]:
    """The nvidia-smi command that reads `fields` of every GPU, one CSV line each, index first
    (the query the driver stage verifies persistence mode with)."""
    return ["nvidia-smi", f"--query-gpu=index,{','.join(fields)}", "--format=csv,noheader"]


def gpu_states(fields: Iterable[str], output: str, rc: int) -> dict[str, str]:
    """Each field's value on every GPU, "0 Enabled, 1 Enabled", from gpu_query's output.

    A failed nvidia-smi (no driver loaded, a driver/library mismatch) gives every field
    "unreadable (nvidia-smi exit RC: its first line)"; a line that does not have one value per
    field is kept whole, so an answer of another shape is a change too.
    """
    names = list(fields)
    if rc != 0:
        first = (output.strip().splitlines() or [""])[0][:100]
        return {name: f"unreadable (nvidia-smi exit {rc}: {first})" for name in names}
    values: dict[str, list[str]] = {name: [] for name in names}
    for line in output.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(names) + 1:
            for name in names:
                values[name].append(f"?{line.strip()}")
            continue
        for name, value in zip(names, cells[1:], strict=True):
            values[name].append(f"{cells[0]} {value}")
    return {name: ", ".join(found) or "no GPU" for name, found in values.items()}


# dpkg-query's package name patterns are shell globs (dpkg-query(1)).
PATTERN_CHARS = frozenset("*?[")


def parse_dpkg(output: str, names: Iterable[str]) -> dict[str, str]:
    """Package name to "<status> <version>" from dpkg-query's tab-separated lines.

    The lines are `${Package}\\t${Version}\\t${db:Status-Abbrev}` (library/stage_stamp.py).

    A package dpkg does not list is "absent"; the status keeps the selection, so a hold
    released by hand (hi -> ii) counts as drift. A name with a dpkg-query pattern
    ("linux-image-[0-9]*") is every package it matches, each with its state: a kernel installed
    or removed behind the stage's back is a change too.
    """
    seen: dict[str, str] = {}
    for line in output.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0]:
            seen[fields[0]] = f"{fields[2].strip()} {fields[1]}".strip()
    states = {}
    for name in names:
        if not PATTERN_CHARS.intersection(name):
            states[name] = seen.get(name, ABSENT)
            continue
        matches = [f"{found} {seen[found]}" for found in sorted(seen)
                   if fnmatch.fnmatchcase(found, name)]
        states[name] = ", ".join(matches) or "no match"
    return states


UNIT_PROPERTIES = ("ActiveState", "UnitFileState", "FragmentPath", "DropInPaths")


def unit_state(output: str) -> str:
    """A unit's state from `systemctl show` with the UNIT_PROPERTIES.

    "<ActiveState>/<UnitFileState>", then each unit file and drop-in with its file_state: a
    drop-in added or edited by hand (docker.service.d/override.conf) is drift too.
    """
    props = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    state = (
        f"{props.get('ActiveState', '') or 'unknown'}/{props.get('UnitFileState', '') or 'none'}"
    )
    files = [props.get("FragmentPath", ""), *props.get("DropInPaths", "").split()]
    return "; ".join([state] + [f"{path} {file_state(path)}" for path in files if path])


def image_state(image: str, inspected: str, rc: int) -> str:
    """A container image's state from `docker image inspect --format {{.Id}} IMAGE`: what Docker
    itself says, whatever its image store (legacy or containerd) and data-root."""
    found = inspected.strip()
    if rc == 0 and found:
        return found
    return "absent" if rc == 1 else f"unreadable (docker exit {rc})"


def fingerprint(
    files: Mapping[str, str], packages: Mapping[str, str], units: Mapping[str, str],
    images: Mapping[str, str] | None = None, trees: Mapping[str, str] | None = None,
    gpus: Mapping[str, str] | None = None, links: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One flat, sorted map of everything a stage manages: "file:", "package:", "unit:",
    "image:", "tree:", "gpu:" (a field of every GPU) and "link:" keys."""
    items = {f"file:{path}": state for path, state in files.items()}  # path: a file or a glob
    items.update({f"package:{name}": state for name, state in packages.items()})
    items.update({f"unit:{name}": state for name, state in units.items()})
    items.update({f"image:{name}": state for name, state in (images or {}).items()})
    items.update({f"tree:{path}": state for path, state in (trees or {}).items()})
    items.update({f"gpu:{field}": state for field, state in (gpus or {}).items()})
    items.update({f"link:{spec}": state for spec, state in (links or {}).items()})
    return dict(sorted(items.items()))


# What a stage may manage, as the stamp lists it (library/stage_stamp.py has one option each).
MANAGED_KINDS = ("files", "packages", "units", "images", "trees", "gpus", "links")


def _short(state: object) -> str:
    """A state as a reason shows it: digests cut to 12 hex digits."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1…", str(state))


@dataclass(frozen=True)
class Verdict:
    """Whether the stage can be skipped on the node, and why not when it cannot."""

    current: bool
    reason: str


def compare(stamp: Mapping[str, object] | None, want: str, now: Mapping[str, str]) -> Verdict:
    """Compare a stored stamp with what is wanted now and what the node holds now."""
    if not stamp:
        return Verdict(
            False, "no stamp yet (the stage has not passed on this node since stamps exist)"
        )
    if stamp.get("format") != STAMP_FORMAT:
        return Verdict(False, f"stamp format {stamp.get('format')!r} is not {STAMP_FORMAT}")
    if stamp.get("want") != want:
        return Verdict(
            False,
            "what is wanted changed (the role's files, the host's variables or the lock file)",
        )
    then = stamp.get("fingerprint")
    if not isinstance(then, dict):
        return Verdict(False, "the stamp has no fingerprint")
    changed = [
        f"{key}: {_short(then.get(key, 'not recorded'))} -> {_short(now.get(key, 'not checked'))}"
        for key in sorted(set(then) | set(now))
        if then.get(key) != now.get(key)
    ]
    if changed:
        more = f" (+{len(changed) - 3} more)" if len(changed) > 3 else ""
        return Verdict(False, "drift on the node: " + "; ".join(changed[:3]) + more)
    return Verdict(True, "unchanged since the stage last passed")


def stamp_document(
    want: str,
    manages: Mapping[str, list[str]],
    now: Mapping[str, str],
    outputs: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The stamp file's content: what was wanted, what the stage manages, what it found, and
    what the stage reported when it passed (restored on a host where it is skipped)."""
    return {
        "format": STAMP_FORMAT,
        "want": want,
        "manages": {
            key: sorted(set(manages.get(key, [])))
            for key in MANAGED_KINDS
        },
        "fingerprint": dict(now),
        "outputs": dict(outputs or {}),
    }


def read_stamp(path: str) -> dict[str, object] | None:
    """The stored stamp, or None when it is missing or unreadable (the stage then runs)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_stamp(path: str, document: Mapping[str, object]) -> bool:
    """Write the stamp atomically; False when the same content is already there."""
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True
