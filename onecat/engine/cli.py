"""`onecat engine lock`: make, reuse or check the engine's lock file.

Exit status: 0 the lock was written, reused or checked clean; 1 `--check` found drift (each
drifted item named on stderr); 2 bad input, one line on stderr (an unreachable index or
registry, a wrong checksum, a wheel for another platform, an unresolvable requirement, a
lock that does not parse or lacks hashes, a digest that does not match its reference).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from onecat.text import one_line

from . import defaults
from .errors import EngineLockError
from .lock import Inputs, Outcome, check, ensure, frozen
from .net import plain_http_refused

DEFAULT_PYPI = "https://pypi.org/simple"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "engine", help="the engine's lock: wheel, requirements and base digest",
        description="The 1Cat-vLLM engine's pins, made once per release and committed.")
    sub = parser.add_subparsers(dest="engine_command", metavar="ACTION")
    lock = sub.add_parser(
        "lock", help="make (or reuse, or --check) the engine lock file",
        description="Fetch the release wheel into the controller cache and verify its SHA256, "
        "resolve its Requires-Dist (markers evaluated for CPython 3.12 on x86_64 manylinux) "
        "with torch through uv into hash-pinned requirements (the torch family only from the "
        "torch index, wheels only, no UV_* setting), and read the base image's "
        "digests from its registry (HTTP API v2; no Docker). Writes one JSON file, reused "
        "while its inputs are the same. Defaults come from roles/vllm_serve/defaults/main.yml.",
        epilog="Exit status: 0 written, reused or checked clean; 1 --check found drift (each "
        "item named); 2 bad input (one line on stderr).")
    add_arguments(lock)
    lock.set_defaults(func=main)
    parser.set_defaults(func=lambda args: _usage(parser))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are None so that --check can tell what was asked for explicitly.
    parser.add_argument("--engine-version", help="engine release (default: the serve role's "
                        "vllm_serve_engine_version)")
    parser.add_argument("--wheel", metavar="URL|PATH", help="the release wheel (default: the "
                        "serve role's vllm_serve_wheel_url for the release)")
    parser.add_argument("--wheel-sha256", metavar="HEX", help="its SHA256 (default: the serve "
                        "role's vllm_serve_wheel_sha256s entry for the release)")
    parser.add_argument("--torch", metavar="SPEC", help="torch requirement locked with the "
                        "wheel's (default: vllm_serve_image_torch_spec; '' for none)")
    parser.add_argument("--index-url", metavar="URL", help="the torch index (or a mirror of "
                        "it): the torch family comes only from it (default: "
                        "vllm_serve_image_torch_index_url, with PyPI for everything else)")
    parser.add_argument("--extra-index-url", metavar="URL", action="append",
                        help="index for everything else (repeatable, in priority order; the "
                        "last is uv's default index); with --index-url and no "
                        "--extra-index-url, --index-url serves everything")
    parser.add_argument("--base", metavar="IMAGE", help="base image reference, REPO:TAG "
                        "(default: vllm_serve_image_base)")
    parser.add_argument("--registry-mirror", metavar="URL", default="",
                        help="ask this registry (a pull-through mirror) for the base image")
    parser.add_argument("--out", metavar="FILE", type=Path, help="the lock file (default: "
                        "inventory/engine/1cat-vllm-<version>.lock.json)")
    parser.add_argument("--cache-dir", metavar="DIR", type=Path,
                        help="controller cache of wheels and uv (default: .cache/engine)")
    parser.add_argument("--check", action="store_true", help="verify the lock against the "
                        "wheel (downloaded again) and the registry; exit 1 naming what drifted")
    parser.add_argument("--frozen", action="store_true", help="use the lock as it is: never "
                        "resolve or write; exit 2 when it is missing, does not parse or was made "
                        "from other inputs (check mode of the serve stage)")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def inputs_of(args: argparse.Namespace) -> tuple[Inputs, set[str]]:
    """The lock's inputs from the flags, the rest from the serve role's defaults."""
    role = defaults.read()
    version = args.engine_version or role.engine_version
    given = {name for name in ("engine_version", "wheel", "wheel_sha256", "torch", "base",
                               "index_url") if getattr(args, name) is not None}
    if args.extra_index_url is not None:
        given.add("extra_index_urls")
    if args.index_url is None and args.extra_index_url is None:
        index_url = role.torch_index_url or role.pip_index_url
        extras = [role.pip_index_url or DEFAULT_PYPI] if role.torch_index_url else []
    else:
        index_url = args.index_url or ""
        extras = list(args.extra_index_url or [])
    # Indexes and a registry mirror over plain http off loopback can be answered by anyone on
    # the path (the wheel and the base are pinned by digest; the resolution is not).
    for what, url in ([("--index-url", index_url)] + [("--extra-index-url", e) for e in extras]
                      + [("--registry-mirror", args.registry_mirror or "")]):
        if url.startswith("http://") and (refused := plain_http_refused(url)):
            raise EngineLockError(f"{what}: {refused}")
    sha256 = args.wheel_sha256 if args.wheel_sha256 is not None \
        else role.wheel_sha256s.get(version, "")
    inputs = Inputs(
        engine_version=version,
        wheel=args.wheel or role.wheel_url(version),
        wheel_sha256=sha256.strip().lower(),
        base=args.base or role.base,
        torch=args.torch if args.torch is not None else role.torch_spec,
        index_url=index_url,
        extra_index_urls=tuple(extras),
        registry_mirror=args.registry_mirror,
        cache_dir=args.cache_dir or defaults.cache_dir(),
    )
    return inputs, given


def _say(outcome: Outcome, as_json: bool) -> None:
    if as_json:
        print(json.dumps(outcome.as_json(), indent=2, sort_keys=True))
        return
    lock, stats = outcome.lock, outcome.stats
    if outcome.action == "reused":
        print(f"engine lock {outcome.path}: up to date (made {lock['created_at']}; nothing "
              "resolved)")
        return
    if outcome.action == "checked":
        state = "drifted" if outcome.reasons else "matches the wheel and the registry"
        print(f"engine lock {outcome.path}: {state}")
        return
    # Names, digests and reasons came from an index or a registry: one printable line each.
    why = f" ({one_line('; '.join(outcome.reasons))})" if outcome.reasons else ""
    packages = sum(1 for line in lock["requirements"]["lock"].splitlines()
                   if "==" in line and not line.startswith((" ", "#")))
    print(f"engine lock {outcome.path}: {outcome.action}{why}: wheel "
          f"{one_line(lock['wheel']['filename'])} sha256 {one_line(lock['wheel']['sha256'][:12])}, "
          f"{packages} packages locked by uv {one_line(lock['tools']['uv'])} in "
          f"{stats.resolve_seconds:.1f} s, base {one_line(lock['base']['image'])}"
          f"@{one_line(lock['base']['digest'])} (linux/amd64 "
          f"{one_line(lock['base']['manifest_digest'][:19])}); commit it with your inventory")


def main(args: argparse.Namespace) -> int:
    try:
        inputs, given = inputs_of(args)
        path = args.out or defaults.lock_path(inputs.engine_version)
        if args.check:
            if not path.exists():
                raise EngineLockError(f"there is no engine lock {path} to check: make it with "
                                      "onecat engine lock")
            outcome = check(inputs, path, given)
        elif args.frozen:
            outcome = frozen(inputs, path)
        else:
            outcome = ensure(inputs, path)
    except EngineLockError as err:
        print(f"onecat engine lock: {one_line(err)}", file=sys.stderr)
        return 2
    _say(outcome, args.json)
    for drift in outcome.reasons if outcome.action == "checked" else ():
        print(f"onecat engine lock: drift: {one_line(drift)}", file=sys.stderr)
    return 1 if outcome.action == "checked" and outcome.reasons else 0
