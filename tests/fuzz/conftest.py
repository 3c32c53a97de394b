"""The fuzz tests' summary: how many generated inputs ran, and that none crashed or hung."""

from __future__ import annotations

from typing import Any

import fuzzkit
import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/fuzz/" in item.nodeid:
            item.add_marker(pytest.mark.fuzz)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tallies = fuzzkit.TALLIES
    if not tallies:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fuzz")
    for name, tally in sorted(tallies.items()):
        write(f"{name:<52} {tally.inputs:>6} inputs {tally.crashed:>3} crashed "
              f"{tally.hung:>2} hung {tally.seconds:5.1f} s (slowest "
              f"{tally.slowest * 1000:.0f} ms)")
    inputs = sum(t.inputs for t in tallies.values())
    crashed = sum(t.crashed for t in tallies.values())
    hung = sum(t.hung for t in tallies.values())
    seconds = sum(t.seconds for t in tallies.values())
    verdict = "none crashed or hung" if not (crashed or hung) else \
        f"{crashed} crashed, {hung} hung (replays while shrinking included)"
    write(f"fuzz: {len(tallies)} fuzzers ran {inputs} generated inputs in {seconds:.1f} s: "
          f"{verdict} (profile {fuzzkit.PROFILE}, hang limit {fuzzkit.HANG_S:g} s per input)")
