"""The real engine's fixtures: one vLLM CPU server shared by the run's tests
(tests/real_engine/engine.py).

ONECAT_REAL_ENGINE=0 skips the tier on a machine that cannot carry it; anywhere else a missing
part is an error that says what to install, never a silent skip.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The test that kills the shared server runs after every other test that needs it.
    items.sort(key=lambda item: "dying_server" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engine.Server]:
    """The real vLLM server, started once for the run, in vLLM's own process layout (the
    engine core a process of its own, as on a fleet): tests leave it serving, but the one
    that takes `dying_server`."""
    if engine.off():
        pytest.skip(engine.OFF_REASON)
    try:
        server = engine.start(tmp_path_factory.mktemp("real-engine"))
        server.warm()
    except engine.EngineUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def dying_server(real_server: engine.Server) -> engine.Server:
    """The shared server, for the one test that kills it (run last: see above)."""
    return real_server
