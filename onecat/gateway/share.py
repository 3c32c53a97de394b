"""Per-node share of the requests that went through the gateway, from HAProxy's stats.

`onecat bench --url http://GATEWAY:8000 --gateway-stats URL` reads the stats CSV before and
after the run; the difference of each server's `stot` (sessions since start) is the number
of requests that node served during the benchmark. `onecat report` shows the share next to
each node's own results.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from onecat.httpsync import BadAnswer, TooLarge, request

from .runtime import parse_stat, servers

BACKEND = "onecat_nodes"


# HAProxy's CSV is about 1 KiB a server: far more than any fleet's, far less than a hostile answer.
MAX_STATS_BYTES = 8 * 1024 * 1024


def fetch_stats(url: str, timeout: float = 10.0, limit: int = MAX_STATS_BYTES) -> str:
    """HAProxy's stats as CSV: an http(s) URL of the stats page (';csv' is appended).

    ValueError (one line) for a URL that is not http(s), an answer that is not well-formed
    HTTP or not a 200, or one over `limit` bytes; OSError when nothing answers."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL of HAProxy's stats page: {url[:80]!r}")
    if not url.endswith(";csv"):
        url = url.rstrip("/") + ";csv"
    try:
        answer = request(url, timeout=timeout, limit=limit)
    except TooLarge:
        raise ValueError(f"the stats answer is over {limit} bytes: not HAProxy's stats "
                         "page") from None
    except BadAnswer as error:
        raise ValueError(f"a malformed HTTP answer ({error})") from None
    if answer.status != 200:
        raise ValueError(f"the stats page answered HTTP {answer.status}")
    return answer.text()


def _totals(rows: list[dict[str, str]], names: list[str]) -> dict[str, int]:
    """Each server's stot summed over every back end it is in (onecat_keyless with affinity)."""
    totals = dict.fromkeys(names, 0)
    for row in rows:
        if row.get("svname") in totals and row.get("pxname"):
            totals[row["svname"]] += int(row.get("stot") or 0)
    return totals


def share(before_csv: str, after_csv: str, backend: str = BACKEND) -> dict[str, Any]:
    """{"backend", "total", "servers": {name: {"requests", "share", "status"}}}.

    A node's requests are counted in every back end it is a server of: with affinity routing
    the requests without a routing key go through onecat_keyless to the same nodes."""
    after_rows = parse_stat(after_csv)
    rows = servers(after_rows, backend)
    names = [s.server for s in rows]
    before = _totals(parse_stat(before_csv), names)
    after = _totals(after_rows, names)
    counts = {name: max(0, after[name] - before.get(name, 0)) for name in names}
    total = sum(counts.values())
    return {
        "backend": backend,
        "total": total,
        "servers": {s.server: {"requests": counts[s.server],
                               "share": round(counts[s.server] / total, 4) if total else 0.0,
                               "status": s.status}
                    for s in rows},
    }
