"""One writer of the watch's action state at a time (issue 46).

Three commands read action.json, decide and write it back: a look (the timer's, or an
operator's `--once`), `--release` and `--repair`. Without a lock the last writer wins: an
operator's release that lands while a look decides from the state before it (the look reads
HELD, the release writes IN, the look writes HELD) is lost, and the node stays out while the
operator was told "held -> in". An advisory flock(2) on a file beside action.json orders them:
each holds it from its read to its last write. The kernel drops it with its holder, so a look
killed by its unit's timeout never blocks a release.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = "action.lock"
# A holder keeps it for a decision and a few small writes (milliseconds; a floor question to
# the gateway host is bounded by its own timeout, well under this).
WAIT_S = 30.0


class ActionBusy(OSError):
    """Another watch command kept the action state for longer than WAIT_S."""


@contextlib.contextmanager
def held(state_dir: Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the action state's lock for the block, waiting up to `wait_s` for another holder."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ActionBusy(
                        f"another watch command has held {state_dir / LOCK_FILE} for over "
                        f"{wait_s:g} s (fuser -v {state_dir / LOCK_FILE} names it)") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing drops the lock
