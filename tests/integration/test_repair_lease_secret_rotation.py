"""The gateway role's repair lease secret with the real ansible-playbook (local connection):
made once, left alone by a re-run, rotated on request with the old one kept as the retiring
secret, and retired by the next run without rotate (issue 49 item 7). The play imports the
role's own tasks file (roles/gateway/tasks/repair_lease_secret.yml) with the role's variable
values; its handler stands in for the unit restart, which needs a systemd host (molecule/fleet).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Run the role's secret tasks.
      ansible.builtin.import_tasks: {tasks}
  handlers:
    - name: Restart the repair lease server.
      ansible.builtin.debug:
        msg: restarted
"""


def run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(tasks=REPO / "roles/gateway/tasks/repair_lease_secret.yml"))
    state = tmp_path / "state"
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(play), "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"__gateway_repair_lease_secret_file={state / 'secret'}",
         "-e", f"__gateway_repair_lease_retiring_file={state / 'secret.retiring'}",
         "-e", "gateway_repair_lease_user=root", *extra],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


def changed(proc: subprocess.CompletedProcess) -> int:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return sum(int(n) for n in re.findall(r"changed=(\d+)", proc.stdout))


def test_made_once_rotated_with_the_old_kept_then_retired(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    secret, retiring = state / "secret", state / "secret.retiring"
    assert changed(run(tmp_path, "-e", "gateway_repair_lease_rotate=false")) > 0
    first = secret.read_text()
    assert len(first.strip()) == 64 and secret.stat().st_mode & 0o777 == 0o600
    assert changed(run(tmp_path, "-e", "gateway_repair_lease_rotate=false")) == 0
    assert secret.read_text() == first and not retiring.exists()

    rotate = run(tmp_path, "-e", "gateway_repair_lease_rotate=true")
    assert changed(rotate) > 0 and "restarted" in rotate.stdout
    assert retiring.read_text() == first and retiring.stat().st_mode & 0o777 == 0o600
    second = secret.read_text()
    assert second != first and len(second.strip()) == 64
    assert first.strip() not in rotate.stdout + rotate.stderr
    assert second.strip() not in rotate.stdout + rotate.stderr

    retire = run(tmp_path, "-e", "gateway_repair_lease_rotate=false")
    assert changed(retire) > 0 and "restarted" in retire.stdout
    assert not retiring.exists() and secret.read_text() == second
    assert changed(run(tmp_path, "-e", "gateway_repair_lease_rotate=false")) == 0


def test_an_earlier_releases_open_secret_is_made_owner_only(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "secret").write_text("x" * 64 + "\n")
    (state / "secret").chmod(0o644)
    assert changed(run(tmp_path, "-e", "gateway_repair_lease_rotate=false")) > 0
    assert (state / "secret").stat().st_mode & 0o777 == 0o600
    assert (state / "secret").read_text() == "x" * 64 + "\n"
