"""Small statistics helpers for benchmark reports."""

from __future__ import annotations

import resource
import statistics
import sys

__all__ = ["peak_rss_mb", "percentiles"]


def percentiles(samples_ms: list[float], points: tuple[int, ...] = (50, 95)) -> dict[str, float]:
    """The given percentiles (default p50 / p95) of a list of milliseconds, rounded to 0.1 ms."""
    if not samples_ms:
        return {f"p{p}": 0.0 for p in points}
    ordered = sorted(samples_ms)
    out = {}
    for p in points:
        value = statistics.median(ordered) if p == 50 else ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]
        out[f"p{p}"] = round(value, 1)
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)
