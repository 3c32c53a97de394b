"""Verify helpers of this scenario: the shared ones, in molecule/shared/verify_helpers.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from verify_helpers import (
    LOADED_MODULE,
    PROJECT,
    PlaybookRun,
    boot_start,
    driver_userspace,
    read_lock,
    run_playbook,
    wait_booted,
    wait_healthy,
)

__all__ = ["LOADED_MODULE", "PROJECT", "PlaybookRun", "boot_start", "driver_userspace",
           "read_lock", "run_playbook", "wait_booted", "wait_healthy"]
