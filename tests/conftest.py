"""Session-wide order of the test run: the molecule scenarios start first and report last.

The scenarios (tests/molecule) take most of the run and mostly wait; the other tests keep the
cores busy meanwhile. So the selected scenarios start in the background as soon as collection
ends, side by side (tests/molecule_runs.py), every other test runs in the meantime, and the
scenarios' own tests come last, each printing its scenario's log in one piece.
"""

from __future__ import annotations

import molecule_runs
import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # trylast: after -m/-k deselection, so only the scenarios that will run are moved.
    items.sort(key=lambda item: item.get_closest_marker("molecule") is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or not molecule_runs.parallel_wanted():
        return
    names = [item.callspec.params["scenario"] for item in session.items
             if item.get_closest_marker("molecule") is not None and hasattr(item, "callspec")]
    if names and molecule_runs.docker_problem() is None:
        molecule_runs.start_all(names)
