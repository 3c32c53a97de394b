"""Parse `vllm serve` command lines with the installed vLLM's own parser; run with the engine
venv's python (onecat's venv has no vllm).

stdin: a JSON list of argv lists, each starting with "serve" as the serve role writes them
(onecat/serve/flags.py serve_argv). stdout: a JSON list, one per argv, in order:
{"ok": true} or {"ok": false, "error": "<the parser's message>"}.

The parser is built the way `vllm serve` builds it (vllm/entrypoints/cli/main.py: a
FlexibleArgumentParser with a "serve" subparser from ServeSubcommand.subparser_init, which calls
make_arg_parser in vllm/entrypoints/launchers/cli_args.py), so FlexibleArgumentParser's own
rewriting of a `serve` argv applies too. After parsing, the subcommand's validate (its
validate_parsed_serve_args) runs, as main() does before dispatching: it checks flag combinations
without loading a model. Last, a value the parser keeps as a plain string but one of vLLM's
configs checks (CONFIG_VALUES) is given to that config: --attention-backend's type is a string,
and AttentionConfig refuses a backend vLLM does not have.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

# Parsed name -> (the vllm.config class, its field) that refuses a value the parser let through.
CONFIG_VALUES = {"attention_backend": ("AttentionConfig", "backend")}


class ParseError(Exception):
    """argparse's error, raised instead of printing usage and exiting 2."""


def build_parser() -> tuple[argparse.ArgumentParser, Any]:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Raising(FlexibleArgumentParser):
        # Subparsers are made with type(parent) (argparse.add_subparsers), so the serve
        # subparser raises too; FlexibleArgumentParser.error still adds its hints first.
        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            raise ParseError((message or "").strip() or f"exit {status}")

    # prog "vllm": the messages read as `vllm serve` writes them ("vllm serve: error: ...").
    parser = Raising(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
    return parser, command


def check(parser: argparse.ArgumentParser, command: Any, argv: list[str]) -> dict[str, Any]:
    try:
        args = parser.parse_args(argv)
        if args.subparser != command.name:
            return {"ok": False, "error": f"not a serve command: {argv[:1]}"}
        command.validate(args)
        config_values(args)
    except (ParseError, ValueError, TypeError) as error:
        return {"ok": False, "error": str(error)}
    return {"ok": True}


def config_values(args: argparse.Namespace) -> None:
    import vllm.config

    for name, (config, field) in CONFIG_VALUES.items():
        value = getattr(args, name, None)
        if value is not None:
            # pydantic's ValidationError is a ValueError: the config's own message.
            getattr(vllm.config, config)(**{field: value})


def main() -> None:
    argvs = json.load(sys.stdin)
    parser, command = build_parser()
    json.dump([check(parser, command, [str(a) for a in argv]) for argv in argvs], sys.stdout)


if __name__ == "__main__":
    main()
