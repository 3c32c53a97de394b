"""The GPUs' reset lock: the repair runner holds it while it resets the GPUs, and the watch
reads no NVML meanwhile (issue 47). A reset needs the devices to itself: an NVML read in the
middle (the watch's timer does not know a repair runs) is one more client, which is what makes
`nvidia-smi -r` fail "In use by another client" (NVSentinel #1690), and what it reads of GPUs
half-way through a reset is no verdict. An advisory flock(2) on a file in the repair folder:
the kernel drops it when the runner dies, so a crashed runner never blinds the watch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = "gpu-reset.lock"


@contextlib.contextmanager
def held(folder: Path) -> Iterator[None]:
    """Hold the lock (exclusive, waiting for a reader) for the block."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def busy(folder: Path) -> bool:
    """Whether a runner holds the lock now (a reset is under way)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file: no runner ever reset here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
