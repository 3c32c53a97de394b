"""Where Debian's Prometheus tools are: on PATH, else unpacked by scripts/bootstrap.sh.

scripts/bootstrap.sh unpacks Debian 12's prometheus (2.42) and prometheus-alertmanager (0.25)
packages into .cache/prometheus/root, the same builds the monitoring stage installs on a
monitoring host: promtool, amtool, prometheus and prometheus-alertmanager.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

UNPACKED = Path(__file__).resolve().parents[1] / ".cache" / "prometheus" / "root" / "usr" / "bin"


def tool(name: str) -> str:
    """The path of a Prometheus tool; skips the test on a developer's machine without it, and
    fails it in CI (CI=true), where scripts/bootstrap.sh always provides it."""
    found = shutil.which(name) or (str(UNPACKED / name) if (UNPACKED / name).is_file() else None)
    if found:
        return found
    message = f"{name} is missing: run scripts/bootstrap.sh (it unpacks Debian's prometheus tools)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
    raise AssertionError(message)  # unreachable: pytest.skip raises
