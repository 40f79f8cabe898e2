"""Temporal query parsing (pure): absolute, relative and anchored expressions, year ends."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memos.retrieval.temporal import TimeWindow, parse_time_window

NOW = datetime(2026, 1, 5, 15, 30, tzinfo=UTC)  # a Monday, five days into a new year


def span(query: str, now: datetime = NOW) -> tuple[date, date] | None:
    window = parse_time_window(query, now)
    return (window.since.date(), window.until.date()) if window else None


@pytest.mark.parametrize(("query", "expected"), [
    ("What did Maria donate in December 2023?", (date(2023, 12, 1), date(2024, 1, 1))),  # a month ends a year
    ("Who came to dinner on May 3, 2023?", (date(2023, 5, 2), date(2023, 5, 5))),  # a day, one day of slack
    ("What happened on 7 July, 2023?", (date(2023, 7, 6), date(2023, 7, 9))),
    ("the party on 31 December 2025", (date(2025, 12, 30), date(2026, 1, 2))),  # the slack crosses the year
    ("notes from 2024-01-01", (date(2023, 12, 31), date(2024, 1, 3))),
    ("a trip in summer 2021", (date(2021, 6, 1), date(2021, 9, 1))),
    ("what did we plan in winter 2025", (date(2025, 12, 1), date(2026, 3, 1))),  # a season across a year end
    ("anything in 2022?", (date(2022, 1, 1), date(2023, 1, 1))),
])
def test_absolute_dates(query, expected):
    assert span(query) == expected


@pytest.mark.parametrize(("query", "expected"), [
    ("What did I buy in December?", (date(2025, 12, 1), date(2026, 1, 1))),  # asked in January: last December
    ("and in January?", (date(2026, 1, 1), date(2026, 2, 1))),  # the current month is this year's
    ("the gift on 24 December", (date(2025, 12, 23), date(2025, 12, 26))),  # a day not yet reached this year
    ("what happened on 2 January", (date(2026, 1, 1), date(2026, 1, 4))),
    ("last year", (date(2025, 1, 1), date(2026, 1, 1))),
    ("this year", (date(2026, 1, 1), date(2027, 1, 1))),
    ("last month", (date(2025, 12, 1), date(2026, 1, 1))),  # December of the year before
    ("last week", (date(2025, 12, 29), date(2026, 1, 5))),  # the week spanning the year end
    ("last weekend", (date(2026, 1, 3), date(2026, 1, 5))),
    ("yesterday", (date(2026, 1, 4), date(2026, 1, 5))),
    ("two months ago", (date(2025, 11, 1), date(2025, 12, 1))),
    ("where did she move from 4 years ago", (date(2022, 1, 1), date(2023, 1, 1))),
    ("3 days ago", (date(2026, 1, 2), date(2026, 1, 3))),
])
def test_relative_dates_resolve_against_now(query, expected):
    assert span(query) == expected


@pytest.mark.parametrize(("query", "now", "expected"), [
    # NOW is a Monday: the most recent Tuesday before it was 30 December (one day of slack either side)
    ("Who did I meet with during the lunch last Tuesday?", NOW, (date(2025, 12, 29), date(2026, 1, 1))),
    ("What time did I reach the clinic on Monday?", NOW, (date(2025, 12, 28), date(2025, 12, 31))),  # today's is not "on Monday"
    ("the artist I started to listen to last Friday", NOW, (date(2026, 1, 1), date(2026, 1, 4))),
    ("what did we say this Monday", NOW, (date(2026, 1, 4), date(2026, 1, 7))),  # this week's: today
    ("last Sunday", datetime(2024, 3, 4, 9, 0, tzinfo=UTC), (date(2024, 3, 2), date(2024, 3, 5))),  # yesterday
    ("half a year ago", NOW, (date(2025, 7, 1), date(2025, 8, 1))),
    ("what did I do on Feb 29", datetime(2026, 3, 1, tzinfo=UTC), (date(2024, 2, 28), date(2024, 3, 2))),  # the last leap day
    ("the day before yesterday", NOW, (date(2026, 1, 3), date(2026, 1, 4))),  # not yesterday
    ("what did I cook last night", NOW, (date(2026, 1, 4), date(2026, 1, 5))),
    ("this morning", NOW, (date(2026, 1, 5), date(2026, 1, 6))),
    ("in the past two weeks", NOW, (date(2025, 12, 22), date(2026, 1, 6))),  # a span up to today
    ("over the last 3 months", NOW, (date(2025, 10, 5), date(2026, 1, 6))),
    ("the last few days", NOW, (date(2026, 1, 2), date(2026, 1, 6))),
    ("this past weekend", NOW, (date(2026, 1, 3), date(2026, 1, 5))),  # the weekend just gone, not the past week
    ("last winter", datetime(2026, 3, 4, tzinfo=UTC), (date(2025, 12, 1), date(2026, 3, 1))),  # the last one that has ended
    ("last spring", datetime(2026, 3, 4, tzinfo=UTC), (date(2025, 3, 1), date(2025, 6, 1))),
    ("this winter", NOW, (date(2025, 12, 1), date(2026, 3, 1))),
    ("in early 2025", NOW, (date(2025, 1, 1), date(2025, 5, 1))),
    ("late 2024", NOW, (date(2024, 9, 1), date(2025, 1, 1))),
])
def test_weekdays_half_years_and_leap_days(query, now, expected):
    assert span(query, now) == expected


@pytest.mark.parametrize("query", ["Turbocharged Tuesdays", "the rotation on a Sunday", "Sunday mass at St. Mary's", "Ash Wednesday"])
def test_a_weekday_that_names_no_day_is_no_window(query):
    assert span(query) is None



@pytest.mark.parametrize(("query", "expected"), [
    ("What did John do the week before August 3, 2023?", (date(2023, 7, 26), date(2023, 8, 4))),
    ("the puppy she got two weeks before August 11, 2023", (date(2023, 7, 27), date(2023, 8, 12))),
    ("What did she do last weekend before April 10, 2023?", (date(2023, 3, 31), date(2023, 4, 11))),
    ("what changed after 2023-12-28", (date(2023, 12, 28), date(2024, 1, 13))),  # runs into the next year
    ("plans for the days after 2 January, 2024", (date(2024, 1, 2), date(2024, 1, 18))),
])
def test_anchored_expressions_take_the_date_they_hang_on(query, expected):
    assert span(query) == expected


def test_the_most_specific_expression_wins_over_an_earlier_vaguer_one():
    assert span("last year, in fact on 3 March 2025, what did we sign?") == (date(2025, 3, 2), date(2025, 3, 5))
    assert parse_time_window("in December 2023", NOW).phrase == "December 2023"


@pytest.mark.parametrize("query", [
    "What console does Nate own?", "May I ask you something?", "the 2023 budget line", "room 2024", "",
    "31 February 2023 is not a day", "before the trip", "March on", "the year 1850",
])
def test_no_window_or_no_false_day(query):
    window = parse_time_window(query, NOW)
    if query.startswith("31 February"):  # not a day: read as the month it names
        assert window is not None and (window.since.date(), window.until.date()) == (date(2023, 2, 1), date(2023, 3, 1))
    else:
        assert window is None


def test_window_membership_is_half_open_and_naive_now_is_utc():
    window = parse_time_window("in 2022", datetime(2026, 1, 5))
    assert isinstance(window, TimeWindow)
    assert datetime(2022, 1, 1, tzinfo=UTC) in window and datetime(2023, 1, 1, tzinfo=UTC) not in window
    assert datetime(2022, 12, 31, 23, 59, tzinfo=UTC) in window
