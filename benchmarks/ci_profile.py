"""Where a CI run's time went: a table per phase from the log of `scripts/test.sh`.

`scripts/test.sh` pipes everything it prints through `--tee LOG`, which passes each line on
unchanged and writes it to LOG with the time it arrived (seconds since the epoch, then a
space). Given such a log this prints, as markdown:

- the phases: bootstrap, ruff, ansible-lint, the syntax check, the quick tests and the
  scenarios (or one pytest run), each pytest folder (fuzz, integration, roles, unit: from its
  per-file lines, or summed from `--durations=0` when the tests ran on several workers) and each
  molecule scenario's steps (create, prepare, converge, idempotence, verify, destroy, from
  molecule's own "Executing"/"Executed" lines);
- the slowest tests inside each scenario's verify (testinfra's verbose lines, timed from one
  to the next), and pytest's own `--durations` lines where the log has them;
- the slowest Ansible tasks where the log holds `profile_tasks` summaries.

A log without time stamps (CI's plain output) still gives the `--durations` and task tables.

    python benchmarks/ci_profile.py results/ci/test.log           # the tables
    python benchmarks/ci_profile.py --json results/ci/test.log    # the same as JSON
    CMD 2>&1 | python benchmarks/ci_profile.py --tee LOG          # what scripts/test.sh does
    python benchmarks/ci_profile.py --counts results/ci/test.log  # closing lines, and their sum

Standard library only: it runs before the project's venv exists.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

STAMP = re.compile(r"^(\d{9,11}\.\d+) (.*)$")
# scripts/test.sh's own headers, and bootstrap's prefix.
HEADER = re.compile(
    r"^== (ruff|ansible-lint|ansible-playbook --syntax-check|pytest quick|pytest molecule|pytest)")
BOOTSTRAP = "[bootstrap]"
# molecule >= 25: "INFO     [default > converge] Executing" / "... Executed: Successful".
MOLECULE_STEP = re.compile(r"^\S+\s+\[(?P<scenario>[\w-]+) > (?P<step>[\w-]+)\] "
                           r"(?P<what>Executing|Executed)")
# tests/molecule_runs.py: "===== molecule test -s fleet (started at 1796383584.5)", then each
# of the scenario's lines as "[fleet +612.3s] ...".
RUN_HEADER = re.compile(
    r"===== molecule test -s (?P<scenario>[\w-]+) \(started at (?P<at>\d+\.\d+)\)")
RUN_LINE = re.compile(r"^\[(?P<scenario>[\w-]+) \+(?P<offset>\d+\.\d+)s\] ?(?P<line>.*)$")
# pytest's progress line for one test file of the outer run.
PYTEST_FILE = re.compile(r"^(?P<path>tests/(?P<dir>[\w-]+)/\S+\.py) [.sFEx]*\s*(\[\s*\d+%\])?$")
# testinfra's verbose line for one test of a scenario's verify: the test's id, then (at its
# end, on the same line, or on a later one when the scenario prints: `s: true`) its outcome.
VERIFY_TEST = re.compile(r"^(?P<test>\S+\.py::\S+)")
OUTCOME = re.compile(r"(^|\s)(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(\s+\[\s*\d+%\])?\s*$")
# pytest --durations: "12.34s call     tests/unit/test_x.py::test_y".
DURATION = re.compile(r"^(?P<seconds>\d+\.\d+)s (?P<when>call|setup|teardown)\s+(?P<test>\S+)")
# profile_tasks' summary: "role : Task name --------- 12.34s".
TASK = re.compile(r"^(?P<task>.+?) -{3,} (?P<seconds>\d+\.\d+)s$")
# pytest's closing line of a run (not a scenario's inner one, which carries its prefix).
SUMMARY = re.compile(r"^=+ (?P<counts>.*(passed|failed|error|no tests ran).*) in [\d.]+s")
COUNT = re.compile(r"(?P<n>\d+) (?P<what>passed|failed|errors?|skipped)\b")


@dataclass
class Profile:
    phases: OrderedDict[str, float] = field(default_factory=OrderedDict)  # one after another
    inner: OrderedDict[str, float] = field(default_factory=OrderedDict)  # inside pytest
    verify_tests: list[tuple[str, str, float]] = field(default_factory=list)
    durations: list[tuple[str, str, float]] = field(default_factory=list)
    tasks: dict[str, float] = field(default_factory=dict)
    total: float = 0.0

    def add(self, phase: str, seconds: float, *, inner: bool = True) -> None:
        table = self.inner if inner else self.phases
        table[phase] = table.get(phase, 0.0) + max(seconds, 0.0)


def _lines(text: str):
    for raw in text.splitlines():
        match = STAMP.match(raw)
        if match:
            yield float(match[1]), match[2].rstrip()
        else:
            yield None, raw.rstrip()


def parse(text: str) -> Profile:
    prof = Profile()
    first: float | None = None
    last: float | None = None
    phase: str | None = None
    phase_started = 0.0
    pytest_started: float | None = None
    pytest_mark: float | None = None  # when the last pytest file line (or the session) began
    run_started: dict[str, float] = {}  # scenario -> when tests/molecule_runs.py started it
    run_last: dict[str, float] = {}
    steps: dict[str, float] = {}  # "molecule <scenario> <step>" -> when it began
    verify_mark: dict[str, float] = {}  # scenario -> when its last verify test ended
    pending: dict[str, str] = {}  # scenario -> the verify test that began and has no outcome yet

    def close_phase(now: float) -> None:
        if phase is not None:
            prof.add(phase, now - phase_started, inner=False)

    for stamp, line in _lines(text):
        scenario: str | None = None
        if (match := RUN_HEADER.search(line)) is not None:
            run_started[match["scenario"]] = float(match["at"])
        elif (match := RUN_LINE.match(line)) is not None and match["scenario"] in run_started:
            scenario, line = match["scenario"], match["line"]
            stamp = run_started[scenario] + float(match["offset"])
            run_last[scenario] = stamp
        if stamp is not None:
            first = stamp if first is None else min(first, stamp)
            last = stamp if last is None else max(last, stamp)
        text_line = line.strip()
        if (match := DURATION.match(text_line)) is not None:
            prof.durations.append((match["test"], match["when"], float(match["seconds"])))
            continue
        if (match := TASK.match(text_line)) is not None and not text_line.startswith("="):
            prof.tasks[match["task"]] = prof.tasks.get(match["task"], 0.0) + float(
                match["seconds"])
            continue
        if stamp is None:
            continue
        if phase is None and pytest_started is None and line.startswith(BOOTSTRAP):
            phase, phase_started = "bootstrap", stamp
            continue
        if (match := HEADER.match(line)) is not None:
            close_phase(stamp)
            phase, phase_started = match[1], stamp
            if match[1].startswith("pytest"):
                pytest_started = stamp if pytest_started is None else pytest_started
                pytest_mark = stamp
            continue
        if (match := MOLECULE_STEP.search(text_line)) is not None:
            scenario = scenario or match["scenario"]
            key = f"molecule {match['scenario']} {match['step']}"
            if match["what"] == "Executing":
                steps[key] = stamp
                verify_mark[scenario] = stamp
            elif key in steps:
                prof.add(key, stamp - steps.pop(key))
            continue
        if scenario is None and (match := PYTEST_FILE.match(text_line)) is not None:
            if pytest_mark is not None and match["dir"] != "molecule":
                prof.add(f"pytest {match['dir']}", stamp - pytest_mark)
            pytest_mark = stamp
            continue
        owner = scenario or next(iter(verify_mark), "?")
        if (match := VERIFY_TEST.match(text_line)) is not None:
            pending[owner] = match["test"]
        if OUTCOME.search(text_line) and owner in pending:
            prof.verify_tests.append((owner, pending.pop(owner),
                                      stamp - verify_mark.get(owner, stamp)))
            verify_mark[owner] = stamp
    for scenario, started in run_started.items():
        if scenario in run_last:
            prof.add(f"molecule {scenario}, all steps", run_last[scenario] - started)
    if last is not None:
        close_phase(last)
    if not any(name.startswith("pytest ") for name in prof.inner):
        # Quick tests spread over workers print no per-file lines: each folder's test time,
        # summed over its tests (--durations=0), stands in for it.
        for test, _when, seconds in prof.durations:
            parts = test.split("/")
            if len(parts) > 2 and parts[0] == "tests" and parts[1] != "molecule":
                prof.add(f"pytest {parts[1]} (test time, all workers)", seconds)
    if first is not None and last is not None:
        prof.total = last - first
    return prof


def _fmt(seconds: float) -> str:
    return f"{seconds:,.0f}" if seconds >= 10 else f"{seconds:.1f}"


def render(prof: Profile, top: int = 15) -> str:
    out: list[str] = []
    if prof.phases:
        out += ["| phase | seconds | share |", "|---|---:|---:|"]
        for name, seconds in prof.phases.items():
            share = 100 * seconds / prof.total if prof.total else 0
            out.append(f"| {name} | {_fmt(seconds)} | {share:.0f} % |")
        accounted = sum(prof.phases.values())
        out.append(f"| other (between phases) | {_fmt(prof.total - accounted)} | |")
        out.append(f"| **total** | **{_fmt(prof.total)}** | |")
    else:
        out.append("(no time stamps on the log's own lines: phase table skipped; see --tee)")
    if prof.inner:
        out += ["", "Inside pytest (the two molecule scenarios run side by side, after the other "
                "tests, so their rows overlap; a folder's test time spread over workers is "
                "more than the wall time it took):", "",
                "| part | seconds |", "|---|---:|"]
        out += [f"| {name} | {_fmt(seconds)} |" for name, seconds in prof.inner.items()]
    if prof.verify_tests:
        out += ["", f"Slowest verify tests (top {top}):", "",
                "| scenario | test | seconds |", "|---|---|---:|"]
        for scenario, test, seconds in sorted(prof.verify_tests, key=lambda t: -t[2])[:top]:
            out.append(f"| {scenario} | `{test}` | {_fmt(seconds)} |")
    if prof.durations:
        out += ["", f"Slowest pytest items (--durations, top {top}):", "",
                "| test | when | seconds |", "|---|---|---:|"]
        for test, when, seconds in sorted(prof.durations, key=lambda t: -t[2])[:top]:
            out.append(f"| `{test}` | {when} | {_fmt(seconds)} |")
    if prof.tasks:
        out += ["", f"Slowest Ansible tasks, summed over every run (profile_tasks, top {top}):",
                "", "| task | seconds |", "|---|---:|"]
        for task, seconds in sorted(prof.tasks.items(), key=lambda t: -t[1])[:top]:
            out.append(f"| {task.replace('|', '/')} | {_fmt(seconds)} |")
    return "\n".join(out)


def _summary_matches(text: str) -> list[re.Match[str]]:
    """The closing line of every pytest run in the log (not a scenario's inner one), matched."""
    return [match for _stamp, line in _lines(text) if (match := SUMMARY.match(line.strip()))]


def summaries(text: str) -> list[str]:
    """The closing line of every pytest run in the log (not a scenario's inner one)."""
    return [match.string for match in _summary_matches(text)]


def counts(text: str) -> dict[str, int]:
    """The tests of every pytest run in the log, summed: passed, failed (errors too), skipped."""
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for match in _summary_matches(text):
        for count in COUNT.finditer(match["counts"]):
            what = "failed" if count["what"].startswith("error") else count["what"]
            total[what] += int(count["n"])
    return total


def tee(log: Path) -> int:
    """Copy stdin to stdout unchanged and to LOG with arrival times; line by line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        for line in sys.stdin.buffer:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            sink.write(b"%.1f " % time.time() + line)
            sink.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", nargs="?", type=Path, help="a log written with --tee")
    parser.add_argument("--tee", type=Path, metavar="LOG",
                        help="copy stdin to stdout, and to LOG with time stamps")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.add_argument("--counts", action="store_true",
                        help="print only each pytest run's closing line in LOG, then their sum")
    parser.add_argument("--top", type=int, default=15, help="rows in the per-test tables")
    args = parser.parse_args(argv)
    if args.tee:
        return tee(args.tee)
    if args.log is None:
        parser.error("give a LOG, or --tee LOG")
    try:
        text = args.log.read_text(errors="replace")
    except OSError as err:
        print(f"ci_profile: cannot read {args.log}: {err.strerror}", file=sys.stderr)
        return 2
    if args.counts:
        for line in summaries(text):
            print(line)
        total = counts(text)
        skipped = f", {total['skipped']} skipped" if total["skipped"] else ""
        print(f"total: {total['passed']} passed, {total['failed']} failed{skipped}")
        return 0
    prof = parse(text)
    if args.json:
        print(json.dumps({"total": prof.total, "phases": prof.phases, "inner": prof.inner,
                          "verify_tests": prof.verify_tests, "durations": prof.durations,
                          "tasks": prof.tasks}, indent=2))
    else:
        print(render(prof, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
