"""Per-node share of the requests that went through the gateway, from HAProxy's stats.

`onecat bench --url http://GATEWAY:8000 --gateway-stats URL` reads the stats CSV before and
after the run; the difference of each server's `stot` (sessions since start) is the number
of requests that node served during the benchmark. `onecat report` shows the share next to
each node's own results.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from .runtime import parse_stat, servers

BACKEND = "onecat_nodes"


def fetch_stats(url: str, timeout: float = 10.0) -> str:
    """HAProxy's stats as CSV: an http(s) URL of the stats page (';csv' is appended)."""
    if not url.endswith(";csv"):
        url = url.rstrip("/") + ";csv"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8", "replace")


def share(before_csv: str, after_csv: str, backend: str = BACKEND) -> dict[str, Any]:
    """{"backend", "total", "servers": {name: {"requests", "share", "status"}}}."""
    before = {s.server: s.total for s in servers(parse_stat(before_csv), backend)}
    rows = servers(parse_stat(after_csv), backend)
    counts = {s.server: max(0, s.total - before.get(s.server, 0)) for s in rows}
    total = sum(counts.values())
    return {
        "backend": backend,
        "total": total,
        "servers": {s.server: {"requests": counts[s.server],
                               "share": round(counts[s.server] / total, 4) if total else 0.0,
                               "status": s.status}
                    for s in rows},
    }
