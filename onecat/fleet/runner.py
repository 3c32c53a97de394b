"""Run a onecat playbook through ansible-runner with live per-host progress.

Used by `onecat deploy`, `onecat health -i` and `onecat bench -i`. Each run
gets an id (UTC time + short git hash) and keeps ansible-runner's artifacts
under ``results/<run-id>/``; Ansible errors reach the user as one line per
host, not as a JSON dump.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from onecat.fleet.rollout import render_table

REPO = Path(__file__).resolve().parents[2]
COUNTED = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


def new_run_id(now: _dt.datetime | None = None) -> str:
    """Timestamp plus the short git hash of the checkout, e.g. 20261202T153000Z-56bdcba."""
    stamp = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = "nogit"
    return f"{stamp}-{rev}"


@dataclass
class HostProgress:
    stage: str = ""
    task: str = ""
    counts: dict[str, int] = field(
        default_factory=lambda: {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0,
                                 "skipped": 0}
    )
    errors: list[str] = field(default_factory=list)


class ProgressPrinter:
    """ansible-runner event handler: one line per host event, errors kept per host."""

    def __init__(self, stream: TextIO = sys.stderr, quiet: bool = False) -> None:
        self.stream = stream
        self.quiet = quiet
        self.hosts: dict[str, HostProgress] = {}
        self.play = ""

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
        if kind not in COUNTED:
            return True
        host = data.get("host", "?")
        progress = self.hosts.setdefault(host, HostProgress())
        progress.stage, progress.task = self.play, data.get("task", "")
        result = data.get("res", {}) or {}
        if data.get("ignore_errors") and kind == "runner_on_failed":
            return True
        progress.counts[COUNTED[kind]] += 1
        if kind == "runner_on_ok" and result.get("changed"):
            progress.counts["changed"] += 1
        if kind in ("runner_on_failed", "runner_on_unreachable"):
            progress.errors.append(f"{progress.task}: {error_line(result)}")
        if not self.quiet:
            c = progress.counts
            print(
                f"[{progress.stage}] {host}: {progress.task} "
                f"(ok={c['ok']} changed={c['changed']} failed={c['failed']})",
                file=self.stream,
                flush=True,
            )
        return True


def error_line(result: dict[str, Any]) -> str:
    """The one readable line of a failed task result."""
    message = result.get("msg") or result.get("stderr") or result.get("reason") or ""
    if not message and result.get("results"):
        failed = [r for r in result["results"] if r.get("failed")]
        message = error_line(failed[0]) if failed else ""
    text = " ".join(str(message).split())
    return text or json.dumps(result, sort_keys=True)[:300]


@dataclass
class RunOutcome:
    run_id: str
    run_dir: Path
    rc: int
    status: str
    hosts: dict[str, HostProgress]

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(h for h, p in self.hosts.items() if p.counts["failed"] or
                      p.counts["unreachable"])


def run_playbook(
    playbook: str,
    inventory: str,
    *,
    limit: str | None = None,
    check: bool = False,
    extra_vars: Sequence[str] = (),
    tags: str | None = None,
    results_dir: Path | None = None,
    quiet: bool = False,
    stream: TextIO = sys.stderr,
) -> RunOutcome:
    """Run ``playbooks/<playbook>`` (or site.yml) against ``inventory``."""
    import ansible_runner  # imported late: `onecat plan` and friends need no Ansible

    run_id = new_run_id()
    run_dir = (results_dir or REPO / "results") / run_id
    (run_dir / "runner").mkdir(parents=True, exist_ok=True)
    cmdline: list[str] = []
    if check:
        cmdline.append("--check")
    for item in extra_vars:
        cmdline += ["-e", absolute_file_arg(item)]
    printer = ProgressPrinter(stream=stream, quiet=quiet)
    runner = ansible_runner.run(
        private_data_dir=str(run_dir / "runner"),
        project_dir=str(REPO),
        playbook=str(REPO / playbook),
        inventory=str(Path(inventory).resolve()),
        limit=absolute_file_arg(limit) if limit else None,
        tags=tags,
        cmdline=" ".join(_quote(c) for c in cmdline) or None,
        extravars={"onecat_run_id": run_id, "onecat_results_dir": str(run_dir)},
        envvars=runner_env(),
        event_handler=printer,
        quiet=True,
        ident="ansible",
    )
    return RunOutcome(run_id, run_dir, int(runner.rc), str(runner.status), printer.hosts)


def runner_env() -> dict[str, str]:
    """The environment of the ansible-playbook that ansible-runner starts.

    ansible-runner turns SSH host-key checking off unless told otherwise
    (ANSIBLE_HOST_KEY_CHECKING=False in its default environment); onecat says True, so a
    machine that answers at a node's address without the node's key gets no root session.
    The simulated fleet turns it off in its own inventory."""
    return {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # The ansible-playbook installed beside this Python (the venv) comes first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def absolute_file_arg(value: str) -> str:
    """`@file` arguments (-e @vars.yml, --limit @retry) made absolute: ansible-playbook runs
    from the repository, not from the directory the user typed the command in."""
    return f"@{Path(value[1:]).resolve()}" if value.startswith("@") else value


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def print_outcome(outcome: RunOutcome, stream: TextIO = sys.stdout) -> None:
    """Per-host table, then one line per host error, then where the artifacts are."""
    print(f"{'host':<24} {'stage reached':<40} {'ok':>4} {'chg':>4} {'fail':>4}", file=stream)
    for host in sorted(outcome.hosts):
        p = outcome.hosts[host]
        c = p.counts
        print(
            f"{host:<24} {p.stage[:40]:<40} {c['ok']:>4} {c['changed']:>4} "
            f"{c['failed'] + c['unreachable']:>4}",
            file=stream,
        )
    rollout = outcome.run_dir / "rollout.json"
    if rollout.is_file():
        print("\n" + render_table(json.loads(rollout.read_text())) + "\n", file=stream)
    for host in outcome.failed_hosts:
        for error in outcome.hosts[host].errors:
            print(f"{host}: FAILED {error}", file=stream)
    if outcome.rc != 0 and not outcome.failed_hosts:
        # A playbook-level error (bad --limit, unreadable -e file, syntax): show Ansible's words.
        for line in playbook_errors(outcome.run_dir):
            print(line, file=stream)
    print(f"run {outcome.run_id}: {outcome.status}; artifacts in {outcome.run_dir}", file=stream)


def playbook_errors(run_dir: Path, limit: int = 20) -> list[str]:
    """The ERROR lines of ansible-playbook's output, else its last lines."""
    stdout = run_dir / "runner" / "artifacts" / "ansible" / "stdout"
    try:
        lines = stdout.read_text(errors="replace").splitlines()
    except OSError:
        return []
    errors = [line for line in lines if "ERROR" in line]
    return (errors or lines)[-limit:]
