"""The real engine's fixtures: one vLLM CPU server shared by a module's tests
(tests/real_engine/engine.py).

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


def _wanted() -> None:
    if os.environ.get("ONECAT_REAL_ENGINE") == "0":
        pytest.skip("ONECAT_REAL_ENGINE=0: the real-engine tier is off")


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engine.Server]:
    """The real vLLM server, started once for the module that asks for it and stopped after it
    (its 1 GB goes back before the rest of the run): tests must leave it serving."""
    _wanted()
    try:
        server = engine.start(tmp_path_factory.mktemp("real-engine"), one_process=True)
    except engine.EngineUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()
