"""The one error of the engine lock: bad input, reported as one line and exit status 2."""

from __future__ import annotations


class EngineLockError(Exception):
    """Input onecat cannot lock: an unreachable index or registry, a wrong checksum, ..."""
