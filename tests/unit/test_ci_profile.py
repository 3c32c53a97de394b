"""benchmarks/ci_profile.py: a time-stamped CI log becomes the table of where the time went."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "ci_profile.py"
spec = importlib.util.spec_from_file_location("ci_profile", SCRIPT)
assert spec is not None and spec.loader is not None
ci_profile = importlib.util.module_from_spec(spec)
sys.modules["ci_profile"] = ci_profile
spec.loader.exec_module(ci_profile)

T0 = 1_800_000_000.0
LOG = "\n".join([
    f"{T0:.1f} [bootstrap] installing Debian packages: docker.io",
    f"{T0 + 100:.1f} == ruff",
    f"{T0 + 101:.1f} == ansible-lint (production profile)",
    f"{T0 + 121:.1f} == ansible-playbook --syntax-check",
    f"{T0 + 122:.1f} == pytest (unit, integration, molecule)",
    f"{T0 + 130:.1f} tests/integration/test_a.py ....                 [ 10%]",
    f"{T0 + 190:.1f} tests/unit/test_b.py ..F.                        [ 50%]",
    # The scenario's lines are printed late, with their own offsets from its start.
    f"{T0 + 900:.1f} ===== molecule test -s fleet (started at {T0 + 123:.1f})",
    f"{T0 + 900:.1f} [fleet +1.0s] INFO     [fleet > create] Executing",
    f"{T0 + 900:.1f} [fleet +11.0s] INFO     [fleet > create] Executed: Successful",
    f"{T0 + 900:.1f} [fleet +11.0s] INFO     [fleet > verify] Executing",
    f"{T0 + 900:.1f} [fleet +411.0s] tests/test_rollout.py::test_first PASSED [ 50%]",
    # With `s: true` the test prints between its id and its outcome.
    f"{T0 + 900:.1f} [fleet +411.5s] tests/test_rollout.py::test_second ",
    f"{T0 + 900:.1f} [fleet +500.0s] second rollout: 88 s",
    f"{T0 + 900:.1f} [fleet +611.0s] FAILED [100%]",
    f"{T0 + 900:.1f} [fleet +612.0s] INFO     [fleet > verify] Executed: Failed",
    f"{T0 + 901:.1f} 12.50s call     tests/unit/test_b.py::test_slow",
    f"{T0 + 901:.1f} serve : Build the engine image -------------------------- 42.10s",
    f"{T0 + 902:.1f} ============= 3 passed, 1 failed in 780.00s (0:13:00) ==============",
])


def test_phases_one_after_another_add_up_to_the_total():
    prof = ci_profile.parse(LOG)
    assert prof.phases["bootstrap"] == 100
    assert prof.phases["ansible-lint"] == 20
    assert prof.phases["pytest"] == 902 - 122
    assert prof.total == 902
    assert sum(prof.phases.values()) == prof.total


def test_inside_pytest_each_folder_and_each_scenario_step():
    prof = ci_profile.parse(LOG)
    assert prof.inner["pytest integration"] == 8
    assert prof.inner["pytest unit"] == 60
    assert prof.inner["molecule fleet create"] == 10
    assert prof.inner["molecule fleet verify"] == 601
    assert prof.inner["molecule fleet, all steps"] == 612


def test_verify_tests_timed_from_one_to_the_next_with_their_scenario():
    prof = ci_profile.parse(LOG)
    assert prof.verify_tests == [("fleet", "tests/test_rollout.py::test_first", 400.0),
                                 ("fleet", "tests/test_rollout.py::test_second", 200.0)]


def test_durations_and_task_times_are_read_with_or_without_stamps():
    plain = "\n".join(line.split(" ", 1)[1] for line in LOG.splitlines())
    for text in (LOG, plain):
        prof = ci_profile.parse(text)
        assert prof.durations == [("tests/unit/test_b.py::test_slow", "call", 12.5)]
        assert prof.tasks == {"serve : Build the engine image": 42.1}
    # CI's plain output: no phase table, but each scenario's lines carry their own offsets.
    prof = ci_profile.parse(plain)
    assert not prof.phases and prof.inner["molecule fleet verify"] == 601
    assert "phase table skipped" in ci_profile.render(prof)


def test_tee_passes_lines_through_and_stamps_the_log(tmp_path):
    log = tmp_path / "ci" / "test.log"
    done = subprocess.run([sys.executable, str(SCRIPT), "--tee", str(log)],
                          input=b"== ruff\nline two\n", capture_output=True, check=True)
    assert done.stdout == b"== ruff\nline two\n"
    stamped = log.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["== ruff", "line two"]
    assert all(ci_profile.STAMP.match(line) for line in stamped)


def test_an_unreadable_log_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.log")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("ci_profile: cannot read ") and done.stderr.count("\n") == 1


# scripts/test.sh on CI: the quick tests on two workers (no per-file lines; every test's
# duration), then the scenarios in a pytest run of their own.
SPLIT = "\n".join([
    f"{T0:.1f} == ruff",
    f"{T0 + 1:.1f} == pytest quick (unit, integration, roles, fuzz: 2 workers)",
    f"{T0 + 2:.1f} created: 2/2 workers",
    f"{T0 + 200:.1f} 30.00s call     tests/integration/test_a.py::test_one",
    f"{T0 + 200:.1f} 20.00s call     tests/integration/test_a.py::test_two",
    f"{T0 + 200:.1f} 0.50s setup    tests/unit/test_b.py::test_three",
    f"{T0 + 200:.1f} ===== 3 passed, 1 skipped, 2 deselected in 199.00s (0:03:19) =====",
    f"{T0 + 201:.1f} == pytest molecule (the scenarios, side by side)",
    f"{T0 + 900:.1f} [fleet +1.0s] ===== 15 passed in 600.00s =====",
    f"{T0 + 901:.1f} ===== 1 failed, 1 passed, 1 error, 4 deselected in 700.00s (0:11:40) =====",
])


def test_the_quick_tests_and_the_scenarios_are_phases_of_their_own():
    prof = ci_profile.parse(SPLIT)
    assert prof.phases["pytest quick"] == 200
    assert prof.phases["pytest molecule"] == 700
    assert sum(prof.phases.values()) == prof.total == 901
    # No per-file lines: each folder's test time, summed from the durations.
    assert prof.inner["pytest integration (test time, all workers)"] == 50
    assert prof.inner["pytest unit (test time, all workers)"] == 0.5


def test_counts_sum_every_pytest_run_but_not_a_scenarios_inner_one(tmp_path):
    assert ci_profile.counts(SPLIT) == {"passed": 4, "failed": 2, "skipped": 1}
    log = tmp_path / "ci.log"
    log.write_text(SPLIT)
    out = subprocess.run([sys.executable, str(SCRIPT), "--counts", str(log)],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "===== 3 passed, 1 skipped, 2 deselected in 199.00s (0:03:19) =====",
        "===== 1 failed, 1 passed, 1 error, 4 deselected in 700.00s (0:11:40) =====",
        "total: 4 passed, 2 failed, 1 skipped"]
