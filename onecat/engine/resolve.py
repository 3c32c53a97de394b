"""Resolve the engine's requirements into a hash-locked requirements file with uv.

`uv pip compile --generate-hashes` for the image's interpreter and platform (not the
controller's), from a generated pyproject.toml that pins the torch family to the torch index
(an `explicit` index, indexes.py says why), everything else from the default index under uv's
`first-index` strategy, wheels only (`--no-build`: an sdist would be built in the image with
unpinned, unhashed build tools), in an environment without any UV_* setting. After resolving,
every package is checked against the index it came from (`--emit-index-annotation`): a torch
family package the torch index hosts that came from anywhere else is refused. uv's failures
become one line naming the index or the requirement.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from .errors import EngineLockError
from .indexes import (
    Layout,
    clean_environment,
    is_family,
    requirement_name,
    same_index,
    strip_credentials,
)
from .target import Target

UV_TIMEOUT = 600.0
HTTP_TIMEOUT = 30
INPUT_NAME = "pyproject.toml"
# A family package found outside the routed set sends the resolution round again, with it
# routed; more rounds than this means the answers keep changing.
MAX_ROUNDS = 3


@dataclass(frozen=True)
class Resolved:
    text: str
    uv_version: str
    seconds: float
    command: list[str]
    index_of: dict[str, str] = field(default_factory=dict)  # package -> index (no credentials)
    routed: tuple[str, ...] = ()  # the names pinned to the torch index
    runs: int = 1


def uv_binary() -> str:
    """The uv executable: the `uv` package's own binary, else uv on PATH."""
    try:
        from uv import find_uv_bin  # the PyPI package ships the binary and this finder

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if not found:
        raise EngineLockError("uv is not installed: pip install uv (onecat depends on it)")
    return found


def uv_version(uv: str) -> str:
    try:
        out = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30,
                             check=True, env=clean_environment()).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise EngineLockError(f"uv at {uv} does not run: {err}") from None
    return out.split()[1] if len(out.split()) > 1 else out.strip()


def compile_command(uv: str, target: Target, layout: Layout, cache_dir: Path | None,
                    input_name: str = INPUT_NAME) -> list[str]:
    # Every choice uv could read from a setting is spelled out: strategy, resolution,
    # pre-releases, no builds, no torch backend guessing.
    command = [uv, "pip", "compile", "--quiet", "--no-config", "--no-python-downloads",
               "--generate-hashes", "--no-header", "--emit-index-annotation",
               "--python-version", target.python, "--python-platform", target.uv_platform,
               "--index-strategy", "first-index", "--resolution", "highest",
               "--prerelease", "if-necessary-or-explicit", "--no-build", *layout.uv_args()]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    return [*command, input_name]


def explain(stderr: str, indexes: list[str]) -> str:
    """One line for a failed `uv pip compile`: the sdist, the unreachable index, the conflict."""
    wheels = re.search(r"Wheels are required for `([^`]+)`", stderr)
    if wheels:
        return (f"the engine's requirements need {wheels.group(1)}, which has no wheel for the "
                "image (only a source distribution): onecat builds nothing from source, since "
                "the build would run unpinned tools; pin a version that has a wheel, or build "
                "the wheel yourself and serve it from your index")
    fetched = re.search(r"Failed to fetch: `?(\S+?)`?$", stderr, re.MULTILINE)
    if fetched:
        url = fetched.group(1)
        index = next((i for i in indexes if url.startswith(i.rstrip("/"))), url)
        causes = [line.split("cause:", 1)[1].strip() for line in stderr.splitlines()
                  if "cause:" in line]
        last = causes[-1] if causes else "no answer"
        return (f"the package index {strip_credentials(index)} is unreachable (fetching "
                f"{strip_credentials(url)}: {last})")
    because = re.search(r"Because (.+?)(?:, we can conclude|\.?$)", stderr, re.MULTILINE)
    if because:
        return f"the engine's requirements cannot be resolved: {because.group(1)}"
    errors = [line.strip() for line in stderr.splitlines() if line.strip().startswith("error")]
    detail = " / ".join(line.strip() for line in stderr.splitlines()
                        if line.strip() and "warning" not in line)[-400:]
    return f"uv pip compile failed: {errors[0] if errors else detail}"


def annotations(text: str) -> tuple[str, dict[str, str]]:
    """uv's output without its `# from INDEX` lines, and each package's index."""
    kept: list[str] = []
    index_of: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        head = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==", line)
        if head:
            current = str(canonicalize_name(head.group(1)))
        source = re.match(r"^\s+# from (\S+)\s*$", line)
        if source:
            if current:
                index_of[current] = strip_credentials(source.group(1))
            continue
        kept.append(line)
    return "".join(f"{line}\n" for line in kept), index_of


def _compile(uv: str, target: Target, layout: Layout, cache_dir: Path | None, timeout: float,
             requirements: list[str], routed: set[str]) -> tuple[str, list[str]]:
    command = compile_command(uv, target, layout, cache_dir)
    env = {**clean_environment(), "UV_HTTP_TIMEOUT": str(HTTP_TIMEOUT), "UV_NO_PROGRESS": "1",
           "NO_COLOR": "1"}
    indexes = [i for i in (layout.torch_index, *layout.indexes) if i]
    with tempfile.TemporaryDirectory(prefix="onecat-engine-lock-") as work:
        Path(work, INPUT_NAME).write_text(layout.pyproject(requirements, routed))
        try:
            proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise EngineLockError(f"uv pip compile did not finish in {timeout:.0f} s (indexes: "
                                  f"{', '.join(strip_credentials(i) for i in indexes)})") \
                from None
    if proc.returncode != 0:
        raise EngineLockError(explain(proc.stderr, indexes))
    return proc.stdout, command


def resolve(requirements: list[str], target: Target, layout: Layout,
            hosts: Callable[[str, str], bool], cache_dir: Path | None = None,
            timeout: float = UV_TIMEOUT, torch_spec: str = "") -> Resolved:
    """Hash-locked requirements for `requirements` on `target` from `layout`'s indexes.

    `hosts(index, name)` says whether an index serves a project (its simple page answers).
    """
    uv = uv_binary()
    version = uv_version(uv)
    started = time.monotonic()
    routed: set[str] = set()
    runs = 0
    if layout.torch_index:
        # torch's own closure, the torch index ranked first: the family names it brings.
        if torch_spec:
            closure = Layout("", (layout.torch_index, *layout.indexes))
            text, _ = _compile(uv, target, closure, cache_dir, timeout, [torch_spec], set())
            runs += 1
            _, found = annotations(text)
            routed |= {name for name, index in found.items()
                       if is_family(name) and same_index(index, layout.torch_index)}
        # Direct family names torch's closure did not bring (torch itself it did: its index
        # page, megabytes on download.pytorch.org, is not asked for again).
        direct = {str(canonicalize_name(requirement_name(r))) for r in requirements}
        routed |= {name for name in direct - routed
                   if is_family(name) and hosts(layout.torch_index, name)}
    for _ in range(MAX_ROUNDS):
        text, command = _compile(uv, target, layout, cache_dir, timeout, requirements, routed)
        runs += 1
        lock, index_of = annotations(text)
        if not layout.torch_index:
            break
        missed = {name for name in index_of if is_family(name) and name not in routed
                  and hosts(layout.torch_index, name)}
        if not missed:
            break
        routed |= missed
    else:
        raise EngineLockError(f"the torch family kept growing after {MAX_ROUNDS} resolutions "
                              f"(last: {', '.join(sorted(missed))}): the indexes answer "
                              "differently on each ask; try again")
    if layout.torch_index:
        astray = sorted(f"{name} from {index}" for name, index in index_of.items()
                        if name in routed and not same_index(index, layout.torch_index))
        if astray:
            raise EngineLockError(
                f"torch family packages came from outside the torch index "
                f"{strip_credentials(layout.torch_index)}: {', '.join(astray)}: refused (a "
                "name PyTorch publishes is taken only from its index)")
    return Resolved(lock, version, time.monotonic() - started, command[1:], index_of,
                    tuple(sorted(routed)), runs)

