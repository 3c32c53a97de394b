"""Verify helpers of this scenario: the shared ones, in molecule/shared/verify_helpers.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from verify_helpers import (
    PROJECT,
    PlaybookRun,
    read_lock,
    run_playbook,
    wait_booted,
)

__all__ = ["PROJECT", "PlaybookRun", "read_lock", "run_playbook", "wait_booted"]
