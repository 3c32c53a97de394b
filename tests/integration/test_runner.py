"""ansible-runner wiring: live progress, one readable line per failed host, artifacts."""

from __future__ import annotations

import io
import re
from pathlib import Path

from onecat.fleet.runner import (
    ProgressPrinter,
    absolute_file_arg,
    error_line,
    new_run_id,
    print_outcome,
    run_playbook,
)

REPO = Path(__file__).resolve().parents[2]
SYSFS = REPO / "tests" / "fixtures" / "sysfs"


def write_inventory(tmp_path: Path, hosts: dict[str, str]) -> Path:
    lines = ["all:", "  children:", "    v100:", "      hosts:"]
    for name, tree in hosts.items():
        lines += [
            f"        {name}:",
            "          ansible_connection: local",
            "          ansible_become: false",
            f"          ansible_python_interpreter: {__import__('sys').executable}",
            f"          preflight_sysfs_root: {SYSFS / tree}",
            "          preflight_disk_requirements: []",
        ]
    path = tmp_path / "hosts.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_run_id_is_time_and_git_hash():
    assert re.fullmatch(r"\d{8}T\d{6}Z-([0-9a-f]{7,}|nogit)", new_run_id())


def test_error_line_prefers_msg_and_flattens_whitespace():
    assert error_line({"msg": "node1 cannot\n  become a node"}) == "node1 cannot become a node"
    looped = {"results": [{"failed": False}, {"failed": True, "stderr": "boom"}]}
    assert error_line(looped) == "boom"


def test_progress_counts_changed_and_failures():
    printer = ProgressPrinter(stream=io.StringIO())
    printer({"event": "playbook_on_play_start", "event_data": {"play": "Preflight"}})
    printer({"event": "runner_on_ok", "event_data": {"host": "a", "task": "t1",
                                                     "res": {"changed": True}}})
    printer({"event": "runner_on_failed", "event_data": {"host": "a", "task": "t2",
                                                         "res": {"msg": "bad card"}}})
    progress = printer.hosts["a"]
    assert progress.counts == {"ok": 1, "changed": 1, "failed": 1, "unreachable": 0,
                               "skipped": 0}
    assert progress.errors == ["t2: bad card"]
    assert "[Preflight] a: t2 (ok=1 changed=1 failed=1)" in printer.stream.getvalue()


def test_real_run_reports_the_failed_host_in_one_line(tmp_path):
    inventory = write_inventory(tmp_path, {"good-node": "pcie-pair", "bad-node": "no-gpu"})
    stream = io.StringIO()
    outcome = run_playbook(
        "playbooks/preflight.yml", str(inventory), results_dir=tmp_path / "results",
        stream=stream,
    )
    assert outcome.rc == 2
    assert outcome.failed_hosts == ["bad-node"]
    assert outcome.hosts["good-node"].counts["failed"] == 0
    (error,) = outcome.hosts["bad-node"].errors
    assert error.startswith("Stop the host when it cannot become a node.: bad-node cannot "
                            "become a onecat node: no NVIDIA GPU found")
    assert "[Preflight | Check that every host can become a onecat node.] good-node" in (
        stream.getvalue()
    )
    assert (outcome.run_dir / "runner" / "artifacts" / "ansible" / "rc").read_text() == "2"


def test_playbook_level_error_reaches_the_user(tmp_path):
    inventory = write_inventory(tmp_path, {"good-node": "pcie-pair"})
    outcome = run_playbook(
        "playbooks/preflight.yml", str(inventory), limit="no-such-host",
        results_dir=tmp_path / "results", stream=io.StringIO(),
    )
    assert outcome.rc != 0
    assert outcome.failed_hosts == []
    out = io.StringIO()
    print_outcome(outcome, stream=out)
    assert "no hosts" in out.getvalue().lower(), out.getvalue()


def test_at_file_arguments_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_file_arg("@vars.yml") == f"@{tmp_path}/vars.yml"
    assert absolute_file_arg("onecat_serve_batch=50%") == "onecat_serve_batch=50%"
