"""Saturating time arithmetic: a date near year 1 or 9999 shifts to the edge, never past it.

Records may be dated anywhere from year 1 to 9999 (naive means UTC), and a query may name such
a day. A window around it ("that day, give or take one"), a reply's neighbourhood or the next
version's stamp would step outside what `datetime` holds and raise `OverflowError`; here they
stop at `EARLIEST` / `LATEST` instead, so one record dated 0001-01-01 cannot break its scope's
searches. Pure, no I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["EARLIEST", "LATEST", "shift"]

EARLIEST = datetime.min.replace(tzinfo=UTC)
"""The first instant a record can carry (0001-01-01 00:00 UTC)."""
LATEST = datetime.max.replace(tzinfo=UTC)
"""The last instant a record can carry (9999-12-31 23:59:59.999999 UTC)."""


def shift(when: datetime, *deltas: timedelta) -> datetime:
    """`when` plus every delta, held at the first or last representable instant (in `when`'s own
    time zone) when the sum falls outside the years 1 to 9999."""
    total = sum(deltas, timedelta(0))
    try:
        return when + total
    except OverflowError:
        edge = datetime.max if total > timedelta(0) else datetime.min
        return edge.replace(tzinfo=when.tzinfo)
