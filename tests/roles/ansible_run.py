"""Run the nvidia_driver / container_runtime roles with ansible-playbook against localhost.

The host is faked only in its operating system identity (tests/roles/ansible/library) and its
sysfs tree (the roles' sysfs-root seam); every run is --check or touches nothing but a temp dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent

def _os(name: str, major: str, version: str, release: str, family: str, kernel: str) -> dict:
    return {
        "distribution": name, "distribution_major_version": major,
        "distribution_version": version, "distribution_release": release,
        "os_family": family, "kernel": kernel,
    }


OS = {
    "debian12": _os("Debian", "12", "12.8", "bookworm", "Debian", "6.1.0-28-amd64"),
    "ubuntu22": _os("Ubuntu", "22", "22.04", "jammy", "Debian", "5.15.0-126-generic"),
    "ubuntu24": _os("Ubuntu", "24", "24.04", "noble", "Debian", "6.8.0-49-generic"),
    "rocky9": _os("Rocky", "9", "9.4", "Blue Onyx", "RedHat", "5.14.0-427.el9.x86_64"),
}


def run_playbook(playbook: str, hosts: dict[str, dict], tmp_path: Path, check: bool,
                 *, diff: bool = False, path_first: Path | None = None,
                 groups: dict[str, list[str]] | None = None) -> dict:
    """Run tests/roles/ansible/<playbook> for `hosts` (name -> vars); return the json output.

    `path_first` puts a folder of test doubles first on PATH (the modules run locally).
    """
    inventory: dict = {"all": {"hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hvars}
        for name, hvars in hosts.items()
    }}}
    if groups:
        inventory["all"]["children"] = {group: {"hosts": {name: {} for name in members}}
                                        for group, members in groups.items()}
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_LIBRARY": f"{HERE / 'ansible' / 'library'}:{REPO / 'library'}",
        "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": ":".join(str(p) for p in (path_first, BIN) if p) + ":" + os.environ.get("PATH", ""),
    }
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inv), str(HERE / "ansible" / playbook),
           "-e", f"out_dir={tmp_path}", "--forks", "10"]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook gave no JSON (rc {proc.returncode}):\n"
                    f"{proc.stdout}\n{proc.stderr}")


def host_outcome(data: dict, host: str) -> dict:
    """Per host: the failed task's name and message, and the tasks that changed before it."""
    changed: list[str] = []
    for play in data["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(host)
            if result is None:
                continue
            # "role : Task name." -> "Task name."
            name = task["task"]["name"].split(" : ", 1)[-1]
            if result.get("failed"):
                return {"failed_task": name, "msg": result.get("msg", ""),
                        "changed": changed}
            if result.get("changed"):
                changed.append(name)
    return {"failed_task": None, "msg": "", "changed": changed}
