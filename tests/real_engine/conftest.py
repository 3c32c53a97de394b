"""The real engine's fixtures: one vLLM CPU server for the whole run (tests/real_engine/engine.py).

ONECAT_REAL_ENGINE=0 skips the tier on a machine that cannot carry it; anywhere else a missing
part is an error that says what to install, never a silent skip.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.real_engine)


def _wanted() -> None:
    if os.environ.get("ONECAT_REAL_ENGINE") == "0":
        pytest.skip("ONECAT_REAL_ENGINE=0: the real-engine tier is off")


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engine.Server]:
    """The real vLLM server, started once and shared: tests must leave it serving."""
    _wanted()
    try:
        server = engine.start(tmp_path_factory.mktemp("real-engine"))
    except engine.EngineUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[engine.Server]:
    """A real server of the test's own, for a test that breaks it."""
    _wanted()
    try:
        server = engine.start(tmp_path)
    except engine.EngineUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()
