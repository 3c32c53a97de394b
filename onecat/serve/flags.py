"""The `vllm serve` command line of a node: planner flags + user overrides, checked.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.serve.flags``.
Flags an engine no longer accepts are caught here, when the unit is templated, so a
typo or a seed-article flag is one clear message instead of a crash loop.
"""

from __future__ import annotations

import re
from typing import Any

from .fork_flags import FORK_ONLY_FLAGS, FORK_REPO, fork_only_value

ENGINES = ("1cat-vllm", "vllm")

# Flags gone from the engines' CLI: flag -> why, and what to do instead.
REMOVED_FLAGS: dict[str, str] = {
    "--swap-space": "was removed from vLLM's CLI with the V0 engine (the V1 engine has no CPU "
    "swap space); delete it",
}
# Values an engine rejects: (flag, value) -> why, and what to do instead.
REFUSED_VALUES: dict[tuple[str, str], str] = {
    ("--quantization", "nvfp4"): "is not a vLLM quantization method ('Unknown quantization "
    "method: nvfp4'); the NVFP4 format is detected from the checkpoint, so drop --quantization",
}
# V100 (sm_70) has no bfloat16: vLLM refuses it below compute capability 8.0.
BF16_VALUES = ("bfloat16", "bf16")
# Flags the role owns: set them through the role's variables, never as engine arguments.
ROLE_FLAGS: dict[str, str] = {
    "--host": "vllm_serve_bind_address",
    "--port": "vllm_serve_port",
    "--served-model-name": "vllm_serve_served_model_name",
    "--model": "vllm_serve_model_dir",
    "--api-key": "vllm_serve_api_key (it is read from a root-only environment file, "
    "never put on the command line)",
    "--middleware": "vllm_serve_api_key (the role loads its key guard as middleware)",
    # vLLM reads every flag from a YAML file given here (its --config): host, api-key and
    # middleware would come around the role's checks.
    "--config": "vllm_serve_args, one flag at a time (a --config YAML file could set --host, "
    "--api-key or --middleware around the role's checks)",
}
# The middleware that makes every path need a key (roles/vllm_serve/files/onecat_guard.py).
GUARD_MIDDLEWARE = "onecat_guard.Guard"
# The head of the command, in this order; the rest keep the planner's order.
HEAD_ORDER = ("--dtype", "--tensor-parallel-size", "--max-model-len",
              "--gpu-memory-utilization", "--max-num-seqs")
_FLAG_RE = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
_SAFE_RE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def normalise_flag(item: str) -> str:
    """A long flag as vLLM's parser reads it: '--api_key=x' -> '--api-key=x' (name part only)."""
    text = str(item)
    if not text.startswith("--"):
        return text
    name, sep, value = text.partition("=")
    return "--" + name[2:].replace("_", "-") + sep + value


def flag_name(key: str) -> str:
    """'max_num_seqs' / 'max-num-seqs' / '--max_num_seqs' -> '--max-num-seqs'."""
    name = str(key).strip()
    if not name.startswith("-"):
        name = "--" + name
    return normalise_flag(name)


def merge_args(planned: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Planner flags updated by the user's; an override of None or False removes the flag."""
    merged = {flag_name(k): v for k, v in planned.items() if v is not None and v is not False}
    for key, value in overrides.items():
        name = flag_name(key)
        if value is None or value is False:
            merged.pop(name, None)
        else:
            merged[name] = value
    ordered = {name: merged[name] for name in HEAD_ORDER if name in merged}
    ordered.update({name: value for name, value in merged.items() if name not in ordered})
    return ordered


def args_to_argv(args: dict[str, Any]) -> list[str]:
    """{flag: value} -> argv; True is a bare flag."""
    argv: list[str] = []
    for name, value in args.items():
        argv.append(name)
        if value is not True:
            argv.append(str(value))
    return argv


def argv_pairs(argv: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value or None) for each flag in an argv list; --flag=value is split."""
    pairs: list[tuple[str, str | None]] = []
    for index, item in enumerate(argv):
        if not item.startswith("-") or re.match(r"^-\d", item):
            continue
        item = normalise_flag(item)
        if "=" in item:
            name, value = item.split("=", 1)
            pairs.append((name, value))
            continue
        following = argv[index + 1] if index + 1 < len(argv) else None
        value = following if following is not None and not following.startswith("--") else None
        pairs.append((item, value))
    return pairs


def accepted_flags(help_text: str) -> set[str]:
    """Every long flag an engine's `vllm serve --help=all` output mentions."""
    return set(_FLAG_RE.findall(help_text or ""))


def help_problems(help_text: str, required: bool) -> list[str]:
    """The flag check fails closed: a help text that lists no known flag is no answer."""
    if required and "--max-model-len" not in accepted_flags(help_text):
        return ["the engine image's `vllm serve --help=all` lists no flags (not even "
                "--max-model-len), so its flags cannot be checked; fix the image, or set "
                "vllm_serve_check_flags_with_image: false to skip the check deliberately"]
    return []


def role_flag_of(name: str, accepted: set[str] | None = None) -> str | None:
    """The role-owned flag `name` is, or abbreviates (argparse accepts unique prefixes)."""
    if name in ROLE_FLAGS:
        return name
    if accepted and name in accepted:
        return None
    if len(name) > 3:
        for owned in ROLE_FLAGS:
            if owned.startswith(name):
                return owned
    return None


def fork_only_problem(engine: str, name: str, value: str | None) -> str | None:
    """Why upstream vLLM (engine `vllm`) refuses a flag or value only the fork has, or None
    (fork_flags.py: the one list, checked against upstream's own parser by the real-engine
    tier): its parser stops at the flag, its AttentionConfig at the backend, in a crash loop
    the gate would only see after the unit started."""
    if engine != "vllm":
        return None
    if name in FORK_ONLY_FLAGS:
        return (f"{name} exists only in the {FORK_REPO} fork ({FORK_ONLY_FLAGS[name][1]}); "
                "upstream vLLM refuses it: remove it, or serve with vllm_serve_engine 1cat-vllm")
    where = fork_only_value(name, value or "")
    if where:
        return (f"{name} {value} exists only in the {FORK_REPO} fork ({where}); upstream vLLM "
                "refuses it: remove it, or serve with vllm_serve_engine 1cat-vllm")
    return None


def check_argv(engine: str, argv: list[str], capability: int,
               accepted: set[str] | None = None, role_owned: bool = True) -> list[str]:
    """Problems with these engine arguments, one actionable sentence each."""
    problems: list[str] = []
    if engine not in ENGINES:
        problems.append(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    for name, value in argv_pairs(argv):
        if name in REMOVED_FLAGS:
            problems.append(f"{name} {REMOVED_FLAGS[name]}")
            continue
        owned = role_flag_of(name, accepted) if role_owned else None
        if owned:
            what = name if owned == name else f"{name} (read as {owned})"
            problems.append(f"{what} is set by the role: use {ROLE_FLAGS[owned]}")
            continue
        fork_only = fork_only_problem(engine, name, value)
        if fork_only:
            problems.append(fork_only)
            continue
        lowered = (value or "").strip().lower()
        if (name, lowered) in REFUSED_VALUES:
            problems.append(f"{name} {value} {REFUSED_VALUES[(name, lowered)]}")
            continue
        if name == "--dtype" and lowered in BF16_VALUES and capability < 80:
            problems.append(f"--dtype {value}: this GPU (compute capability {capability // 10}."
                            f"{capability % 10}) has no bfloat16; use --dtype half")
            continue
        if accepted and name not in accepted:
            problems.append(f"{name} is not accepted by this engine image (its `vllm serve "
                            "--help=all` does not list it); remove it or pin an image that has it")
    return problems


def serve_argv(model_path: str, served_name: str, host: str, port: int,
               args: dict[str, Any], extra_args: list[str], guard: bool = False) -> list[str]:
    """The arguments after `vllm`: serve MODEL --served-model-name ... flags ... extra.

    Flag names are written as vLLM reads them (`_` -> `-`), so the unit says what runs."""
    head = ["serve", model_path, "--served-model-name", served_name, "--host", host,
            "--port", str(port)]
    if guard:
        head += ["--middleware", GUARD_MIDDLEWARE]
    return [*head, *args_to_argv(args), *[normalise_flag(str(a)) for a in extra_args]]


def systemd_quote(arg: str) -> str:
    """One argument as systemd's ExecStart parses it back: quoted when needed, % and $ escaped.

    A control character (a newline would end the unit's line and start a new directive) is
    refused with ValueError: no quoting makes it safe."""
    raw = str(arg)
    bad = _CONTROL_RE.search(raw)
    if bad:
        raise ValueError(f"{raw[:40]!r} contains the control character {bad.group()!r}")
    text = raw.replace("%", "%%").replace("$", "$$")
    if text and _SAFE_RE.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def group_lines(argv: list[str]) -> list[str]:
    """argv as systemd-quoted lines, one flag with its value per line (for a readable unit)."""
    lines: list[str] = []
    for item in argv:
        quoted = systemd_quote(item)
        is_value = not item.startswith("-") or bool(re.match(r"^-\d", item))
        # A value joins its flag; a leading positional ("serve MODEL") joins the one before.
        if lines and is_value and (" " not in lines[-1] or not lines[-1].startswith("-")):
            lines[-1] += " " + quoted
        else:
            lines.append(quoted)
    return lines
