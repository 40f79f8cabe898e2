"""Reading the arguments a model passes to memory tools: a bad one is a `ModelRetry` that says
what to send instead (the tools of `agents.tools` and `agents.graph` share these)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic_ai import ModelRetry

__all__ = ["parse_when"]


def parse_when(value: str | None, name: str) -> datetime | None:
    """An ISO date or datetime from a model, as an aware datetime; a clear ModelRetry otherwise."""
    if value is None or value == "":
        return None
    try:
        when = datetime.fromisoformat(value.strip())
    except (TypeError, ValueError):
        raise ModelRetry(f"{name}={value!r} is not a date; use ISO format like 2024-05-01 or 2024-05-01T14:30") from None
    try:
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+14:00: before year 1 once in UTC
        raise ModelRetry(f"{name}={value!r} is outside the years 1 to 9999 once taken to UTC; send a date within them") from None
