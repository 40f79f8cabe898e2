"""Small statistics helpers for benchmark reports."""

from __future__ import annotations

import resource
import statistics
import sys

__all__ = ["peak_rss_mb", "percentiles"]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50 / p95 of a list of milliseconds, rounded to 0.1 ms."""
    if not samples_ms:
        return {"p50": 0.0, "p95": 0.0}
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50": round(statistics.median(ordered), 1), "p95": round(p95, 1)}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)
