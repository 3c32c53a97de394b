"""systemd.time(7) spans in seconds: the watch's intervals and windows, the monitoring's
watch interval (stdlib only: it ships to nodes with the watch)."""

from __future__ import annotations

import re

# systemd.time(7) units, in seconds; a bare number is seconds.
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60,
          "min": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hour": 3600,
          "hours": 3600, "d": 86400, "day": 86400, "days": 86400, "w": 604800,
          "week": 604800, "weeks": 604800}
_SPAN = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)")


def timespan_seconds(text: str) -> float:
    """A systemd time span ("60s", "1h 30min", "8") in seconds; ValueError when it is not one."""
    total, at = 0.0, 0
    text = text.strip()
    while at < len(text):
        match = _SPAN.match(text, at)
        if not match or match.group(2) not in ("", *_UNITS):
            raise ValueError(f"{text!r} is not a systemd time span (e.g. 60s, 5min, 1h)")
        total += float(match.group(1)) * _UNITS.get(match.group(2), 1)
        at = match.end()
    if total <= 0:
        raise ValueError(f"{text!r} is not a positive time span")
    return total
