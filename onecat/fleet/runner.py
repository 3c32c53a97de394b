"""Run a onecat playbook through ansible-runner with live per-host progress.

Used by `onecat deploy`, `onecat health -i` and `onecat bench -i`. Each run
gets an id (UTC time + short git hash, plus -2, -3, ... when another run took that
second) and keeps ansible-runner's artifacts under ``results/<run-id>/``; Ansible
errors reach the user as one line per host, not as a JSON dump.

Secrets stay out of those artifacts: extra variables (`-e key=value`, inline JSON/YAML)
reach ansible-playbook as `-e @file` from a private temporary folder removed after the
run, so ansible-runner's record of the command line holds only file names; its env/ files
and fact cache are not written; and the controller environment it records in
``artifacts/<ident>/command`` is cut down to variables that hold no credentials.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from onecat.fleet.rollout import render_table
from onecat.text import one_line

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


def inventory_problem(inventory: str, group: str = "v100") -> str | None:
    """Why `inventory` cannot drive a run (does not parse, or has no host in `group`), or None.

    Asked of ansible-inventory itself (the same parser and ansible.cfg as the run), before
    the run starts, so a bad -i costs one line and leaves nothing under results/.
    """
    command = [str(Path(sys.executable).parent / "ansible-inventory"), "-i", inventory, "--list"]
    if not Path(command[0]).exists():
        command[0] = "ansible-inventory"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"}
    fix = "pass -i with an inventory file such as inventory/v100-hosts.yml"
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot run ansible-inventory to read {inventory}: {error}"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if "ERROR" in line] or \
            done.stderr.strip().splitlines()[-1:] or ["(no message)"]
        reason = " ".join(lines[0].replace("[ERROR]:", "").replace("ERROR!", "").split())
        return f"inventory {inventory} cannot be parsed ({reason[:300]}): fix it or {fix}"
    try:
        groups = json.loads(done.stdout)
    except ValueError:
        return f"inventory {inventory}: ansible-inventory printed no JSON: {fix}"
    if not _hosts_of(groups, group, set()):
        return (f"inventory {inventory} has no hosts in group {group}, so the run would do "
                f"nothing: list your nodes under {group}, or {fix}")
    return None


def _hosts_of(groups: dict[str, Any], group: str, seen: set[str]) -> set[str]:
    entry = groups.get(group)
    if not isinstance(entry, dict) or group in seen:
        return set()
    seen.add(group)
    hosts = set(entry.get("hosts") or [])
    for child in entry.get("children") or []:
        hosts |= _hosts_of(groups, child, seen)
    return hosts


def claim_run_dir(root: Path, run_id: str) -> tuple[str, Path]:
    """Create the run's folder exclusively: a second run in the same second gets run_id-2."""
    root.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        candidate = run_id if attempt == 1 else f"{run_id}-{attempt}"
        try:
            (root / candidate).mkdir()
        except FileExistsError:
            continue
        return candidate, root / candidate
    raise RuntimeError(f"{root}: 999 runs named {run_id}: clean up the results folder")


# Environment variables whose values may stay in the artifacts (no credentials in them).
KEPT_ENV = re.compile(r"^(ANSIBLE_\w+|PATH|HOME|USER|LOGNAME|SHELL|LANG|LC_\w+|TERM|TZ|PWD|"
                      r"VIRTUAL_ENV|PYTHONPATH|PYTHONUNBUFFERED|PROJECT_DIR|RUNNER_\w+|"
                      r"JOB_ID|INVENTORY_ID|ANSIBLE_\w+)$")
SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|KEY|CRED|AUTH|SESSION|COOKIE", re.IGNORECASE)
REDACTED = "<redacted by onecat>"


def redact_env(env: dict[str, Any]) -> dict[str, Any]:
    """The environment as artifacts may keep it: values only for harmless variables."""
    return {name: value if KEPT_ENV.match(name) and not SECRET_NAME.search(name) else REDACTED
            for name, value in env.items()}


def scrub_artifacts(private_dir: Path) -> None:
    """Cut the controller environment out of ansible-runner's command record(s)."""
    for command in private_dir.glob("artifacts/*/command"):
        try:
            record = json.loads(command.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("env"), dict):
            record["env"] = redact_env(record["env"])
            command.write_text(json.dumps(record, ensure_ascii=False))


def extra_vars_files(extra_vars: Sequence[str], folder: Path) -> list[str]:
    """Each -e value as ansible-playbook arguments that name a file, never the value itself.

    `@file` stays (made absolute); inline JSON/YAML is written as it is; `key=value` pairs
    are parsed as ansible-playbook parses them and written as JSON. Files are 0600.
    """
    from ansible.parsing.splitter import parse_kv

    arguments: list[str] = []
    for index, item in enumerate(extra_vars):
        if not item:
            continue
        if item.startswith("@"):
            arguments += ["-e", absolute_file_arg(item)]
            continue
        path = folder / f"extra-vars-{index}.yml"
        text = item if item[0] in "[{" else json.dumps(dict(parse_kv(item)))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        arguments += ["-e", f"@{path}"]
    return arguments


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
        if self.play.startswith("Inventory |") and kind != "runner_on_failed":
            return True  # the controller's inventory check is not a host of the fleet
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

    run_id, run_dir = claim_run_dir(results_dir or REPO / "results", new_run_id())
    private = run_dir / "runner"
    private.mkdir(mode=0o700)
    secrets = Path(tempfile.mkdtemp(prefix="onecat-run-"))
    try:
        cmdline: list[str] = ["--check"] if check else []
        run_vars = json.dumps({"onecat_run_id": run_id, "onecat_results_dir": str(run_dir)})
        cmdline += extra_vars_files([run_vars, *extra_vars], secrets)
        printer = ProgressPrinter(stream=stream, quiet=quiet)
        runner = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(REPO),
            playbook=str(REPO / playbook),
            inventory=str(Path(inventory).resolve()),
            limit=absolute_file_arg(limit) if limit else None,
            tags=tags,
            cmdline=" ".join(_quote(c) for c in cmdline),
            envvars=runner_env(),
            # No env/ files (they would repeat the command line and environment) and no
            # fact cache on disk (nodes' facts include their environment): run-only facts.
            suppress_env_files=True,
            fact_cache_type="memory",
            event_handler=printer,
            quiet=True,
            ident="ansible",
        )
    finally:
        shutil.rmtree(secrets, ignore_errors=True)
        scrub_artifacts(private)
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
        # An inventory that does not parse fails the run (it would skip every play).
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",
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
            f"{one_line(host):<24} {one_line(p.stage)[:40]:<40} {c['ok']:>4} {c['changed']:>4} "
            f"{c['failed'] + c['unreachable']:>4}",
            file=stream,
        )
    rollout = outcome.run_dir / "rollout.json"
    if rollout.is_file():
        print("\n" + render_table(json.loads(rollout.read_text())) + "\n", file=stream)
    # An error is what a node or its engine said (a journal's last lines): each of its lines
    # printable (onecat.text.one_line), the later ones indented under the host's.
    for host in outcome.failed_hosts:
        for error in outcome.hosts[host].errors:
            first, *rest = str(error).splitlines() or [""]
            print(f"{one_line(host)}: FAILED {one_line(first)}", file=stream)
            for line in rest:
                print(f"    {one_line(line)}", file=stream)
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
