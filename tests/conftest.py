"""Session-wide order of the test run: every other test first, then the real-engine tier, then
the molecule scenarios, which start with the tier (session_order).

The quick tests run alone (some race real HAProxy checks on loopback: CPU taken by two
converging fleets made one of them flaky). Then the selected scenarios start together, side by
side (tests/molecule_runs.py), and each scenario's test prints its scenario's log in one piece.

And the NVML double every test that loads it shares (`libdir`), compiled once per run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import molecule_runs
import pytest

NVML_DOUBLE = Path(__file__).resolve().parent / "nvml_double"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # trylast: after -m/-k deselection, so only the scenarios that will run are moved.
    items[:] = session_order(items)


def session_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """Every other test first, then the real-engine tier (tests/real_engine), then the
    scenarios' tests. The scenarios start in the background when the tier's first test runs
    (pytest_runtest_setup), so the tier runs while they create and converge, and is done
    long before `fleet`'s verify gets to the tests whose HAProxy checks, drains and waits have
    short timeouts (stop 58's CI lost the fleet scenario while the tier's servers started
    beside its reboot test)."""
    def marked(item: pytest.Item, name: str) -> bool:
        return item.get_closest_marker(name) is not None

    scenarios = [item for item in items if marked(item, "molecule")]
    tier = [item for item in items if marked(item, "real_engine") and not marked(item, "molecule")]
    placed = {id(item) for item in scenarios + tier}
    rest = [item for item in items if id(item) not in placed]
    return rest + tier + scenarios


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("real_engine") is not None:
        molecule_runs.start_early()


def pytest_collection_finish(session: pytest.Session) -> None:
    # The scenarios the first molecule test starts together (when they run side by side).
    molecule_runs.selected[:] = [
        item.callspec.params["scenario"] for item in session.items
        if item.get_closest_marker("molecule") is not None and hasattr(item, "callspec")]


@pytest.fixture(scope="session")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NVML double (tests/nvml_double), compiled once per run: the folder that holds its
    libnvidia-ml.so.1, for LD_LIBRARY_PATH (nvml_double_harness.double_env)."""
    if str(NVML_DOUBLE) not in sys.path:
        sys.path.insert(0, str(NVML_DOUBLE))
    from build_double import build

    out = tmp_path_factory.mktemp("nvml-double")
    build(out)
    return out
