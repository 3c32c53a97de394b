"""Resolve the engine's requirements into a hash-locked requirements file with uv.

`uv pip compile --generate-hashes` for the image's interpreter and platform (not the
controller's), torch's index first and the others as extra indexes (mirrors are just other
URLs); uv's failures become one line naming the index or the requirement.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import EngineLockError
from .target import Target

UV_TIMEOUT = 600.0
HTTP_TIMEOUT = 30
INPUT_NAME = "engine-requirements.in"


@dataclass(frozen=True)
class Resolved:
    text: str
    uv_version: str
    seconds: float
    command: list[str]


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
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise EngineLockError(f"uv at {uv} does not run: {err}") from None
    return out.split()[1] if len(out.split()) > 1 else out.strip()


def index_args(index_url: str, extra_index_urls: list[str]) -> list[str]:
    args = ["--index-url", index_url] if index_url else []
    for url in extra_index_urls:
        args += ["--extra-index-url", url]
    return args


def compile_command(uv: str, target: Target, index_url: str, extra_index_urls: list[str],
                    cache_dir: Path | None) -> list[str]:
    command = [uv, "pip", "compile", "--quiet", "--no-config", "--no-python-downloads",
               "--generate-hashes", "--no-header", "--python-version", target.python,
               "--python-platform", target.uv_platform, "--index-strategy", "unsafe-best-match",
               *index_args(index_url, extra_index_urls)]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    return [*command, INPUT_NAME]


def explain(stderr: str, indexes: list[str]) -> str:
    """One line for a failed `uv pip compile`: the unreachable index, or the conflict."""
    fetched = re.search(r"Failed to fetch: `?(\S+?)`?$", stderr, re.MULTILINE)
    if fetched:
        url = fetched.group(1)
        index = next((i for i in indexes if url.startswith(i.rstrip("/"))), url)
        causes = [line.split("cause:", 1)[1].strip() for line in stderr.splitlines()
                  if "cause:" in line]
        last = causes[-1] if causes else "no answer"
        return f"the package index {index} is unreachable (fetching {url}: {last})"
    because = re.search(r"Because (.+?)(?:, we can conclude|\.?$)", stderr, re.MULTILINE)
    if because:
        return f"the engine's requirements cannot be resolved: {because.group(1)}"
    errors = [line.strip() for line in stderr.splitlines() if line.strip().startswith("error")]
    detail = " / ".join(line.strip() for line in stderr.splitlines()
                        if line.strip() and "warning" not in line)[-400:]
    return f"uv pip compile failed: {errors[0] if errors else detail}"


def resolve(requirements: list[str], target: Target, index_url: str,
            extra_index_urls: list[str], cache_dir: Path | None = None,
            timeout: float = UV_TIMEOUT) -> Resolved:
    """Hash-locked requirements for `requirements` on `target` from the given indexes."""
    uv = uv_binary()
    version = uv_version(uv)
    command = compile_command(uv, target, index_url, extra_index_urls, cache_dir)
    env = {**os.environ, "UV_HTTP_TIMEOUT": str(HTTP_TIMEOUT), "UV_NO_PROGRESS": "1",
           "NO_COLOR": "1"}
    for name in ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX",
                 "UV_FIND_LINKS", "UV_CONSTRAINT", "UV_OVERRIDE"):
        env.pop(name, None)  # the lock names its indexes itself
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onecat-engine-lock-") as work:
        Path(work, INPUT_NAME).write_text("".join(f"{r}\n" for r in requirements))
        try:
            proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise EngineLockError(f"uv pip compile did not finish in {timeout:.0f} s "
                                  f"(indexes: {', '.join([index_url, *extra_index_urls])})") \
                from None
    if proc.returncode != 0:
        raise EngineLockError(explain(proc.stderr, [index_url, *extra_index_urls]))
    return Resolved(proc.stdout, version, time.monotonic() - started, command[1:])
