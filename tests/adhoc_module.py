"""Run one of library/'s modules through Ansible on localhost and return its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_module(module: str, args: dict[str, Any], *, check: bool = False) -> dict[str, Any]:
    """`ansible localhost -c local -m MODULE -a ARGS` (with --check), as the module's result."""
    env = {
        **os.environ,
        "ANSIBLE_LIBRARY": str(REPO / "library"),
        "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_NOCOLOR": "1",
    }
    command = [
        str(BIN / "ansible"),
        "localhost",
        "-c",
        "local",
        "-i",
        "localhost,",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        module,
        "-a",
        json.dumps(args),
    ]
    if check:
        command.append("--check")
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, check=False, cwd=REPO, timeout=120
    )
    return json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
