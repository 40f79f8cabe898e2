"""Calendar windows shared by the English and the Chinese time parsers (`memos.retrieval.temporal`,
`memos.retrieval.temporal_zh`): the window types, the slack around a named day, and the spans that
"3 weeks ago", "last month", "May 2023" or a single day name. Pure, no I/O.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memos.time_bounds import LATEST, shift

__all__ = ["ANCHOR_REACH", "DAY_SLACK", "TimeWindow", "ago_window", "day_window", "first_of", "last_weekday", "latest_year",
           "month_window", "named_day", "relative_window", "shift_months", "span_back", "week_day", "year_window"]

DAY_SLACK = timedelta(days=1)
"""A named day also covers the day before and after (time zones; "that evening")."""
ANCHOR_REACH = timedelta(days=14)
""""before X" / "after X" without a length means within this long of X."""


@dataclass(frozen=True)
class TimeWindow:
    """A span of time a query refers to: `since` <= t < `until` (UTC)."""

    since: datetime
    until: datetime
    phrase: str
    """The words of the query it was read from."""

    def __contains__(self, when: datetime) -> bool:
        return self.since <= when < self.until


def day_window(year: int, month: int, day: int) -> tuple[datetime, datetime]:
    """A named day, with `DAY_SLACK` either side (ValueError if it is no date)."""
    return named_day(datetime(year, month, day, tzinfo=UTC))


def named_day(start: datetime) -> tuple[datetime, datetime]:
    """The day starting at `start` ("on 7 July", "last Tuesday", `上周三`), with `DAY_SLACK` either side."""
    return shift(start, -DAY_SLACK), shift(start, timedelta(days=1), DAY_SLACK)


def week_day(weekday: int, now: datetime, weeks_back: int = 0) -> datetime:
    """The start of day `weekday` (Monday 0) of this week, or of the week `weeks_back` weeks before:
    "this Friday", `这周五`, `上周三`, `上上周三`."""
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    return shift(today, timedelta(days=weekday - today.weekday()), -timedelta(weeks=weeks_back))


def last_weekday(weekday: int, now: datetime) -> datetime:
    """The start of the most recent day before today that is `weekday` (Monday 0): "on Tuesday",
    "last Tuesday", `周二` asked on a Tuesday mean a week ago, on a Wednesday yesterday."""
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    return shift(today, -timedelta(days=(today.weekday() - weekday - 1) % 7 + 1))


def latest_year(month: int, day: int, now: datetime) -> int:
    """The year of the most recent (month, day) that is not in the future: 29 February asked in
    a year without one is the last leap year's (ValueError for no date: 30 February)."""
    year = now.year if (month, day) <= (now.month, now.day) else now.year - 1
    if month == 2 and day == 29:
        while not calendar.isleap(year):
            year -= 1
    return year


def month_window(year: int, month: int, months: int) -> tuple[datetime, datetime]:
    """`months` calendar months from the first of `month` (a season is three)."""
    start = datetime(year, month, 1, tzinfo=UTC)
    end_month = month - 1 + months
    return start, first_of(year + end_month // 12, end_month % 12 + 1)


def year_window(year: int) -> tuple[datetime, datetime]:
    """The calendar year `year` (ValueError if it is outside 1 to 9999)."""
    return datetime(year, 1, 1, tzinfo=UTC), first_of(year + 1, 1)


def first_of(year: int, month: int) -> datetime:
    """The first instant of `month` in `year`, or `LATEST` for the month after December 9999
    (the end of a window that runs to the last day there is)."""
    return LATEST if year > 9999 else datetime(year, month, 1, tzinfo=UTC)


def shift_months(when: datetime, months: int) -> datetime:
    index = when.year * 12 + when.month - 1 - months
    year, month = divmod(index, 12)
    return when.replace(year=year, month=month + 1, day=min(when.day, calendar.monthrange(year, month + 1)[1]))


def ago_window(count: int, unit: str, now: datetime) -> tuple[datetime, datetime]:
    """ "3 weeks ago": that week; "4 years ago": that year (a loose reading, it is a boost)."""
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if unit == "day":
        start = shift(today, -timedelta(days=count))
        return start, shift(start, timedelta(days=1))
    if unit == "week":
        start = shift(today, -timedelta(weeks=count))
        return shift(start, -timedelta(days=3)), shift(start, timedelta(days=4))
    if unit == "month":
        start = shift_months(today.replace(day=1), count)
        return start, shift_months(start, -1)
    return year_window(now.year - count)


def span_back(count: int, unit: str, now: datetime) -> tuple[datetime, datetime]:
    """ "the past two weeks", "over the last 3 months", `最近三天`: from `count` units before today
    to the end of today."""
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if unit in ("day", "week"):
        start = shift(today, -timedelta(days=count * (7 if unit == "week" else 1)))
    else:
        start = shift_months(today, count * (12 if unit == "year" else 1))
    return start, shift(today, timedelta(days=1))


def relative_window(which: str, unit: str, now: datetime) -> tuple[datetime, datetime]:
    """ "last" / "this" / "past" week, weekend, month or year, relative to `now`."""
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if unit == "weekend" and which == "past":  # "this past weekend": the most recent one (this one, if it has begun)
        which = "this" if today.weekday() >= 5 else "last"
    if unit in ("week", "weekend"):
        monday = shift(today, -timedelta(days=today.weekday()))
        if which == "past":
            return shift(today, -timedelta(days=7)), shift(today, timedelta(days=1))
        start = monday if which == "this" else shift(monday, -timedelta(weeks=1))
        if unit == "weekend":
            saturday = shift(start, timedelta(days=5))
            return saturday, shift(saturday, timedelta(days=2))
        return start, shift(start, timedelta(weeks=1))
    if unit == "month":
        first = today.replace(day=1)
        if which == "past":
            return shift(today, -timedelta(days=31)), shift(today, timedelta(days=1))
        start = first if which == "this" else shift_months(first, 1)
        return start, shift_months(start, -1)
    if which == "past":
        return shift(today, -timedelta(days=366)), shift(today, timedelta(days=1))
    return year_window(now.year if which == "this" else now.year - 1)
