"""`onecat model fetch SOURCE DEST` and `onecat model verify DIR`.

Exit status: 0 done (or already current / verified), 1 the directory does not match its
manifest (verify: every missing or changed file is named), 2 invalid input (one line on
stderr: source not found, access denied, mirror unreachable, no safetensors, DEST too
small, corrupt download, no manifest).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .fetch import FetchError, fetch
from .manifest import VERIFY_MODES, ManifestError, verify_dir
from .source import ENGINE_FILES


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "model", help="fetch a model once with its manifest, or verify a copy",
        description="Models as pinned, verified artifacts: fetch from the Hugging Face Hub "
        "(or a mirror in HF_ENDPOINT) or a directory, with onecat-manifest.json "
        "(files, sizes, sha256, source, commit); verify a copy against it.")
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION")
    fetch_parser = sub.add_parser(
        "fetch", help="download (or copy) SOURCE into DEST with its manifest",
        description="Download hf:ORG/NAME@REVISION (branch, tag or commit; the commit is "
        "recorded) or copy file:/path into DEST. Only what the engine loads is fetched: "
        f"{', '.join(ENGINE_FILES)}. The token comes from HF_TOKEN or --token-file and is "
        "never printed. An interrupted fetch resumes from DEST.partial.",
        epilog="Exit status: 0 fetched or already current, 2 invalid input or a failed "
        "fetch (one line on stderr; DEST is left as it was).")
    fetch_parser.add_argument("source", metavar="SOURCE",
                              help="hf:ORG/NAME[@REVISION] or file:/path")
    fetch_parser.add_argument("dest", metavar="DEST", help="the model's directory")
    fetch_parser.add_argument("--token-file", help="file holding a Hub token (when HF_TOKEN "
                              "is not set)")
    fetch_parser.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch_parser.add_argument("--json", action="store_true",
                              help="print the result (dest, commit, digest, sizes) as JSON")
    fetch_parser.set_defaults(func=run_fetch)
    verify_parser = sub.add_parser(
        "verify", help="check DIR against its onecat-manifest.json",
        description="Check every file of DIR against its manifest. --mode fast trusts files "
        "whose size and mtime equal what the last full check recorded; --mode full hashes "
        "everything.",
        epilog="Exit status: 0 every file matches, 1 files are missing or changed (each is "
        "named), 2 no or unreadable manifest.")
    verify_parser.add_argument("model_dir", metavar="DIR")
    verify_parser.add_argument("--mode", choices=VERIFY_MODES, default="full",
                               help="full hashes every file (default); fast trusts the "
                               "last full check's size+mtime stamp")
    verify_parser.add_argument("--json", action="store_true", help="print the result as JSON")
    verify_parser.set_defaults(func=run_verify)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_fetch(args: argparse.Namespace) -> int:
    try:
        result = fetch(args.source, args.dest, token_file=args.token_file,
                       progress=not args.quiet and not args.json)
    except FetchError as error:
        print(f"onecat model fetch: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # DEST's folder not writable, a disk that went away
        print(f"onecat model fetch: {args.dest}: {error.strerror or error} "
              f"({getattr(error, 'filename', '') or args.dest})", file=sys.stderr)
        return 2
    manifest = result.manifest
    summary = {"dest": result.dest, "source": manifest.get("source"),
               "commit": manifest.get("commit"), "digest": manifest["digest"],
               "files": len(manifest["files"]), "total_size": manifest["total_size"],
               "downloaded": result.downloaded}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        state = "fetched" if result.downloaded else "already current"
        print(f"{state}: {result.dest} ({summary['files']} files, "
              f"{summary['total_size'] / 1024**3:.2f} GiB, commit {summary['commit'] or '-'}, "
              f"manifest {summary['digest'][:12]})")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    try:
        result = verify_dir(args.model_dir, mode=args.mode)
    except ManifestError as error:
        print(f"onecat model verify: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    elif result["ok"]:
        print(f"ok: {args.model_dir} matches its manifest ({result['hashed']} hashed, "
              f"{result['trusted']} unchanged since the last full check; commit "
              f"{result['commit'] or '-'})")
    else:
        print(f"{args.model_dir}: {len(result['problems'])} file(s) do not match the manifest:",
              file=sys.stderr)
        for line in result["problems"]:
            print(f"  - {line}", file=sys.stderr)
    return 0 if result["ok"] else 1
