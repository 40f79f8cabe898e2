"""Pure parsing of time expressions in a query into a time window.

"What did Maria donate in December 2023?", "on 7 July, 2023", "last year", "two weeks ago", "last Tuesday",
"the week before August 3, 2023": `parse_time_window(query, now)` finds the most specific
such expression (the earliest of that kind) and returns the window it names (`since` inclusive, `until` exclusive, UTC).
Search uses it as a boost, never as a filter: records inside the window rise, nothing is
hidden because a phrase was misread.

Dates without a year ("in May", "on 3 June") mean the most recent such date that is not in the
future, so "in December" asked on 5 January is last December. Relative expressions are
relative to `now` (the memory's clock). No I/O, no model. Chinese expressions (昨天, 上个月,
2023年5月8日, 春节前) are read by `memos.retrieval.temporal_zh` with the same rules, first when the query
holds Chinese.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

from memos.time_bounds import shift

from .temporal_zh import one_spelling, parse_zh, zh_sources
from .time_windows import (
    ANCHOR_REACH,
    DAY_SLACK,
    TimeWindow,
    ago_window,
    day_window,
    last_weekday,
    latest_year,
    month_window,
    named_day,
    relative_window,
    span_back,
    week_day,
    year_window,
)

__all__ = ["TimeWindow", "ago_window", "day_window", "mentions_time", "month_window", "parse_time_window", "relative_window"]

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3, "several": 3}
_COUNT = r"(?P<count>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_WEEKDAY = r"(?P<wd>" + "|".join(_WEEKDAYS) + r")"

_HAN = re.compile("[\u4e00-\u9fff]")
_NOT_AFTER, _NOT_BEFORE = r"(?<![A-Za-z0-9_-])", r"(?![A-Za-z0-9_-])"

def _pattern(text: str) -> re.Pattern[str]:
    # ASCII boundaries: a CJK character is a word character to `\w`, and "我last week去了" reads "last week"
    return re.compile(_NOT_AFTER + text + _NOT_BEFORE, re.IGNORECASE)


# (name, pattern), most specific first: the first pattern that names a valid window wins (the
# earliest match of it in the query), so "last weekend before April 10, 2023" is read by its date.
_DAY_MONTH_YEAR = rf"{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}"
_MONTH_DAY_YEAR = rf"{_MONTH}\s+{_DAY},?\s+{_YEAR}"
_ISO = r"(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)"
_FULL_DATES = [re.compile(p, re.IGNORECASE) for p in (_ISO, _DAY_MONTH_YEAR, _MONTH_DAY_YEAR)]

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("anchored", re.compile(rf"{_NOT_AFTER}(?:(?:the\s+)?(?P<span>{_COUNT}\s+{_UNIT}|week(?:end)?|day)\s+)?(?P<dir>before|after)\s+(?:the\s+)?",
                            re.IGNORECASE)),
    ("iso", _pattern(_ISO)),
    ("day_month_year", _pattern(_DAY_MONTH_YEAR)),
    ("month_day_year", _pattern(_MONTH_DAY_YEAR)),
    ("day_month", _pattern(rf"{_DAY}\s+(?:of\s+)?{_MONTH}")),
    ("month_day", _pattern(rf"{_MONTH}\s+{_DAY}")),
    ("month_year", _pattern(rf"{_MONTH},?\s+(?:of\s+)?{_YEAR}")),
    ("season_year", _pattern(r"(?P<season>spring|summer|autumn|fall|winter)\s+(?:of\s+)?" + _YEAR)),
    ("half_year_ago", _pattern(r"half\s+a\s+year\s+ago")),  # before "a year ago" in it
    ("ago", _pattern(rf"{_COUNT}\s+{_UNIT}\s+ago")),
    ("span_back", _pattern(rf"(?:past|last)\s+(?P<count>\d{{1,3}}|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
                           rf"|a\s+few|few|several|a\s+couple\s+of|couple\s+of)\s+{_UNIT}")),
    ("season_rel", _pattern(r"(?P<which>last|this)\s+(?P<season>spring|summer|autumn|fall|winter)")),
    ("year_part", _pattern(rf"(?P<part>early|mid|late)[\s-]+{_YEAR}")),
    ("day_before_yesterday", _pattern(r"(?:the\s+)?day\s+before\s+yesterday")),
    ("relative", _pattern(r"(?P<which>last|this|past|previous)\s+(?P<unit>week(?:end)?|month|year)")),
    ("weekday", _pattern(rf"(?:(?P<which>last|this|past|previous)|on)\s+{_WEEKDAY}")),
    ("named_day", _pattern(r"(?P<which>yesterday|today|tonight|last\s+night|this\s+(?:morning|afternoon|evening))")),
    ("month", _pattern(rf"(?:in|during|since|by|of|early|late|mid)[\s-]+{_MONTH}")),
    ("year", _pattern(rf"(?:in|during|since|by|of)\s+{_YEAR}")),
]


def mentions_time(text: str) -> bool:
    """Whether `text` names a time `parse_time_window` can read (a date, a month, "yesterday",
    "last week", "three days ago", `昨天`, `上个月`, ...; "before" / "after" alone do not count).
    It runs on every candidate of a search that asks "when" (`memos.retrieval.answer_types`), so all the
    patterns are searched at once, on the lower-cased text (several times faster than a case-blind
    search of them one by one), after one cheap search for a word every
    time expression holds."""
    global _ANY_TIME
    spelled = one_spelling(text[:2000])  # 國慶節, ｌａｓｔ ｗｅｅｋ: the cheap search reads the usual spelling too
    if not _TIME_WORD.search(spelled):
        return False
    if _ANY_TIME is None:
        english = [_GROUP.sub("(?:", p.pattern).replace(_NOT_AFTER, r"\b").replace(_NOT_BEFORE, r"\b")
                   for name, p in _PATTERNS if name != "anchored"]
        chinese = [_GROUP.sub("(?:", source) for source in zh_sources()]
        _ANY_TIME = re.compile("|".join(f"(?:{source})" for source in english + chinese), re.ASCII)  # \b between ASCII words
    return _ANY_TIME.search(spelled.lower()) is not None


_ANY_TIME: re.Pattern[str] | None = None
_GROUP = re.compile(r"\(\?P<\w+>")
_TIME_WORD = re.compile(
    r"\d|\b(?:yesterday|today|tonight|ago|weeks?|weekends?|months?|years?|spring|summer|autumn|fall|winter"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|days?|night|morning|afternoon|evening"
    r"|jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|august|september"
    r"|october|november|december)\b|[年月日号天周期拜春节庆旦]|五一", re.IGNORECASE | re.ASCII)
"""A word every time expression `mentions_time` finds holds (a digit, a month, a unit, ...)."""


def parse_time_window(query: str, now: datetime) -> TimeWindow | None:
    """The time window the most specific time expression in `query` names, or None. Days are the
    days of `now`'s time zone ("yesterday" asked at 07:00 in Beijing is the Beijing day before, not
    the UTC one); the window is in UTC. A naive `now` is UTC."""
    offset = now.utcoffset() or timedelta(0)
    found = _parse_local(query, now.replace(tzinfo=UTC))  # the wall clock of `now`, read as if it were UTC
    if found is None or not offset:
        return found
    return TimeWindow(shift(found.since, -offset), shift(found.until, -offset), found.phrase)


def _parse_local(query: str, now: datetime) -> TimeWindow | None:
    text = one_spelling(query[:2000])
    if _HAN.search(text):
        found = parse_zh(text, now)
        if found is not None:
            return TimeWindow(*found)
    for name, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if name == "anchored":
                date = next((m for m in (p.match(text, match.end()) for p in _FULL_DATES) if m), None)
                window = _anchored(match, date) if date else None
                phrase = text[match.start() : date.end()] if date else ""
            else:
                window, phrase = _window(name, match, now), match.group(0)
            if window is not None:
                return TimeWindow(window[0], window[1], phrase)
    return None


def _window(name: str, m: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    g = m.groupdict()
    try:
        if name in ("iso", "day_month_year", "month_day_year"):
            return _full_date(g)
        if name in ("day_month", "month_day"):
            month, day = _month(g["month"]), int(g["day"])
            return day_window(latest_year(month, day, now), month, day)
        if name == "month_year":
            return month_window(int(g["year"]), _month(g["month"]), 1)
        if name == "season_year":
            first, months = _SEASONS[g["season"].lower()]
            return month_window(int(g["year"]), first, months)
        if name == "ago":
            return ago_window(_count(g["count"]), g["unit"].lower(), now)
        if name == "relative":
            return relative_window(g["which"].lower(), g["unit"].lower(), now)
        if name == "half_year_ago":
            return ago_window(6, "month", now)
        if name == "weekday":  # "this Friday": this week's; "last Friday", "on Friday": the most recent before today
            weekday = _WEEKDAYS[g["wd"].lower()]
            return named_day(week_day(weekday, now) if (g["which"] or "").lower() == "this" else last_weekday(weekday, now))
        if name in ("named_day", "day_before_yesterday"):
            today = datetime(now.year, now.month, now.day, tzinfo=UTC)
            which = g.get("which") or ""
            back = 2 if name == "day_before_yesterday" else 1 if which.lower() in ("yesterday", "last night") else 0
            start = shift(today, -timedelta(days=back))
            return start, shift(start, timedelta(days=1))
        if name == "span_back":
            count = " ".join(g["count"].lower().split())
            count = "a few" if count == "few" else "a couple of" if count == "couple of" else count
            return span_back(_count(count), g["unit"].lower(), now)
        if name == "season_rel":  # "this summer": this year's; "last summer": the most recent one that has ended
            first, months = _SEASONS[g["season"].lower()]
            if g["which"].lower() == "this":  # a winter begun last December is this winter
                return month_window(now.year - 1 if first == 12 and now.month < 12 else now.year, first, months)
            year = now.year
            while month_window(year, first, months)[1] > datetime(now.year, now.month, 1, tzinfo=UTC):
                year -= 1
            return month_window(year, first, months)
        if name == "year_part":
            first = {"early": 1, "mid": 5, "late": 9}[g["part"].lower()]
            return month_window(int(g["year"]), first, 4)
        if name == "month":
            month = _month(g["month"])
            return month_window(latest_year(month, 1, now), month, 1)
        if name == "year":
            return year_window(int(g["year"]))
    except ValueError:  # "31 February", "0 May": not a date
        return None
    return None


def _full_date(g: dict[str, str]) -> tuple[datetime, datetime]:
    """The window of a date written with day, month and year (ValueError if it is no date)."""
    return day_window(int(g["year"]), _month(g["month"]), int(g["day"]))


def _month(text: str) -> int:
    return int(text) if text.isdigit() else _MONTHS[text.lower().rstrip(".")]


def _count(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBERS[" ".join(text.lower().split())]


def _anchored(match: re.Match[str], date: re.Match[str]) -> tuple[datetime, datetime] | None:
    """ "the week before August 3, 2023", "two weeks before 11 August 2023", "after 2023-05-01"."""
    day = date.groupdict()
    try:
        anchor = datetime(int(day["year"]), _month(day["month"]), int(day["day"]), tzinfo=UTC)
    except ValueError:
        return None
    g = match.groupdict()
    span = (g.get("span") or "").lower()
    if g.get("count"):
        reach = _unit_length(g["unit"] or "day") * _count(g["count"] or "1")
    elif span.startswith("weekend"):
        reach = timedelta(days=9)  # the last weekend before a date is within 9 days of it
    elif span.startswith("week"):
        reach = timedelta(weeks=1)
    elif span == "day":
        reach = timedelta(days=1)
    else:
        reach = ANCHOR_REACH
    if (g.get("dir") or "").lower() == "before":
        return shift(anchor, -reach, -DAY_SLACK), shift(anchor, DAY_SLACK)
    return anchor, shift(anchor, timedelta(days=1), reach, DAY_SLACK)


def _unit_length(unit: str) -> timedelta:
    return {"day": timedelta(days=1), "week": timedelta(weeks=1), "month": timedelta(days=31)}.get(
        unit.lower().rstrip("s"), timedelta(days=366))
