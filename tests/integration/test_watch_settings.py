"""The watch role refuses settings that would add lines to its root script or its timer,
before it writes anything (roles/watch/tasks/validate.yml, run with the real ansible-playbook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAY = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: watch
        tasks_from: validate
"""


def run(tmp_path: Path, extra: dict) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    bindir = Path(sys.executable).parent
    return subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
         "-e", json.dumps(extra)],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


@pytest.mark.parametrize("extra", [
    {},
    {"watch_interval": "8s"},
    {"watch_interval": "1h 30min", "watch_environment": {"LD_LIBRARY_PATH": "/opt/x"}},
])
def test_good_settings_pass(tmp_path: Path, extra: dict) -> None:
    done = run(tmp_path, extra)
    assert done.returncode == 0, done.stdout[-2000:]


@pytest.mark.parametrize(("extra", "named"), [
    ({"watch_interval": "8s\nOnBootSec=1"}, '"8s\\nOnBootSec=1"'),
    ({"watch_interval": "5 ; rm -rf /"}, '"5 ; rm -rf /"'),
    ({"watch_environment": {"A=1; touch /tmp/x; B": "v"}}, '["A=1; touch /tmp/x; B"]'),
    ({"watch_environment": {"1ABC": "v", "OK": "v"}}, '["1ABC"]'),
])
def test_settings_that_would_add_lines_are_refused_by_name(tmp_path: Path, extra: dict,
                                                           named: str) -> None:
    done = run(tmp_path, extra)
    flat = " ".join(done.stdout.split())
    assert done.returncode == 2, done.stdout[-2000:]
    assert "watch on localhost: watch_interval" in flat
    assert named in flat, flat[-2000:]


@pytest.mark.parametrize("extra", [
    {"watch_xid_events_file": "/var/lib/x\nExecStartPre=/bin/sh -c id"},
    {"watch_xid_events_file": "relative/xid-events.jsonl"},
    {"watch_xid_events_restart_s": 60, "watch_xid_events_restart_max_s": 30},
    {"watch_xid_events_max_records": 0},
])
def test_xid_event_listener_settings_that_do_not_fit_are_refused(tmp_path: Path,
                                                                 extra: dict) -> None:
    """The listener's events file goes into its unit and its root script; its waits into the
    unit: refused before anything is written, the values named."""
    done = run(tmp_path, extra)
    flat = " ".join(done.stdout.split())
    assert done.returncode == 2, done.stdout[-2000:]
    assert "watch on localhost: watch_xid_events_max_records" in flat, flat[-2000:]
