"""Summary statistics exactly as `vllm bench serve` computes them with numpy's defaults.

mean, population std (ddof=0), median, and percentiles with numpy's default
"linear" method: virtual index (n - 1) * p / 100, interpolated with numpy's
_lerp (which computes from the upper neighbour when the fraction is >= 0.5,
so results match numpy to the last bit). Empty input gives None, not 0, so a
level where nothing succeeded does not look infinitely fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILES = (90, 99)


def mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def std(values: Sequence[float]) -> float | None:
    m = mean(values)
    if m is None:
        return None
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / len(values))


def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    ordered = sorted(values)
    virtual = (len(ordered) - 1) * (p / 100)
    lo = math.floor(virtual)
    hi = min(lo + 1, len(ordered) - 1)
    t = virtual - lo
    a, b = ordered[lo], ordered[hi]
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def summarize(name: str, seconds: Sequence[float]) -> dict[str, float | None]:
    """`mean_<name>_ms`, `median_`, `std_`, `p90_`, `p99_` from values in seconds."""
    ms = [v * 1000.0 for v in seconds]
    out: dict[str, float | None] = {
        f"mean_{name}_ms": mean(ms),
        f"median_{name}_ms": median(ms),
        f"std_{name}_ms": std(ms),
    }
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = percentile(ms, p)
    return out
