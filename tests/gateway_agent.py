"""The gateway's node agent without systemd: the role's unit template rendered with the
filters the template task uses (Ansible's `quote` is shlex.quote), its ExecStart split and
unescaped as systemd does ($$ is $, %% is %), and run as the unit's User= (nobody) when the
tests run as root."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import jinja2

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "roles/gateway/templates/onecat-gateway-agent@.service.j2"


def render_unit(state_dir: Path, admitted_file: Path) -> str:
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters["quote"] = shlex.quote
    return environment.from_string(TEMPLATE.read_text()).render(
        gateway_node_state_dir=str(state_dir), gateway_node_admitted_file=str(admitted_file))


def exec_start(unit_text: str) -> list[str]:
    """ExecStart's words the way systemd splits them ($$ is a literal $, %% a literal %)."""
    line = next(x for x in unit_text.splitlines() if x.startswith("ExecStart="))
    return [word.replace("$$", "$").replace("%%", "%")
            for word in shlex.split(line[len("ExecStart="):])]


def _as_the_units_user(unit_text: str, folder: Path) -> list[str]:
    """A prefix that runs the command as the unit's User= when we are root (else nothing);
    the folders above `folder` are opened for it (0755, as the role creates its own)."""
    user = next((x.split("=", 1)[1] for x in unit_text.splitlines() if x.startswith("User=")),
                None)
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not user or setpriv is None:
        return []
    for parent in [folder, *folder.parents]:
        if parent == Path("/tmp") or parent == parent.parent:
            break
        parent.chmod(parent.stat().st_mode | 0o755)
    return [setpriv, f"--reuid={user}", "--regid=nogroup", "--clear-groups"]


def agent_command(tmp_path: Path, folder: Path) -> Callable[[], str]:
    """A function that asks the agent once and returns its one-line answer."""
    folder.mkdir(parents=True, exist_ok=True)
    admitted = tmp_path / "run-onecat-gateway" / "admitted"
    admitted.parent.mkdir(parents=True, exist_ok=True)
    admitted.write_text("admitted\n")
    text = render_unit(folder, admitted)
    argv = _as_the_units_user(text, folder) + exec_start(text)
    _as_the_units_user(text, admitted.parent)

    def ask() -> str:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30,
                              cwd="/")
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    return ask
