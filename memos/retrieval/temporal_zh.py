"""Chinese time expressions, read by the same rules as the English ones in `memos.retrieval.temporal`.

昨天, 前天, 上周, 上上周, 上个月, 去年五月, 三天前, 半年前, 2023年5月8日, 五月八号, 春节前, 国庆, 元旦, 周末, 周三, 上周三,
去年的今天, 今年夏天:
`parse_zh(query, now)` returns the window the most specific expression names (earliest of its
kind), or None. As in English, a date without a year is the most recent such date not in the
future ("五月" asked in January is last May; "春节" is the last Spring Festival that has begun),
a named day covers the day before and after, and "before / after X" reaches `ANCHOR_REACH`.
Numbers may be written in digits or in Chinese (十二月, 二〇二三年, 两周前). The Spring Festival
falls on a lunar date: `LUNAR_NEW_YEAR` lists it for 2015-2035 (no calendar dependency).
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from datetime import UTC, datetime, timedelta

from memos.time_bounds import shift

from .time_windows import (
    ANCHOR_REACH,
    DAY_SLACK,
    ago_window,
    day_window,
    last_weekday,
    latest_year,
    month_window,
    named_day,
    relative_window,
    shift_months,
    span_back,
    week_day,
    year_window,
)

__all__ = ["LUNAR_NEW_YEAR", "one_spelling", "parse_zh", "zh_sources"]

LUNAR_NEW_YEAR = {
    2015: (2, 19), 2016: (2, 8), 2017: (1, 28), 2018: (2, 16), 2019: (2, 5), 2020: (1, 25), 2021: (2, 12),
    2022: (2, 1), 2023: (1, 22), 2024: (2, 10), 2025: (1, 29), 2026: (2, 17), 2027: (2, 6), 2028: (1, 26),
    2029: (2, 13), 2030: (2, 3), 2031: (1, 23), 2032: (2, 11), 2033: (1, 31), 2034: (2, 19), 2035: (2, 8),
}
"""正月初一 (the first day of the Spring Festival) per Gregorian year."""

_DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_N = r"[0-9〇零一二两三四五六七八九十]"
_YEAR = r"(?P<year>(?:19|20)\d\d|[一二][〇零一二三四五六七八九]{3})年"
_MONTH = rf"(?P<month>{_N}{{1,3}})月"
_DAY = rf"(?P<day>{_N}{{1,3}})[日号號]"
_REL_YEAR = r"(?P<rel>今年|去年|大前年|前年|明年)"
_SEASONS = {"春": (3, 3), "夏": (6, 3), "秋": (9, 3), "冬": (12, 3)}
_SEASON = r"(?P<season>[春夏秋冬])(?:天|季)"
_UNITS = {"天": "day", "日": "day", "周": "week", "星期": "week", "礼拜": "week", "月": "month", "年": "year"}
_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_BEFORE = r"(?P<dir>之前|以前|前|之后|以后|后)"
_BACK = {"上上": 2, "上": 1, "这": 0, "本": 0}
"""How many weeks (months) back 上上周, 上周, 这周 (上上个月, 上个月, 这个月) are."""
_YEAR_PARTS = {"年初": (1, 2), "年底": (11, 2), "年末": (11, 2), "上半年": (1, 6), "下半年": (7, 6)}
"""The months 去年年初, 年底, 上半年 ... cover: (first month, how many)."""

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [(name, re.compile(p)) for name, p in [
    ("full_date_anchor", rf"(?:{_YEAR}|{_REL_YEAR})的?{_MONTH}{_DAY}{_BEFORE}"),
    ("full_date", rf"(?:{_YEAR}|{_REL_YEAR})的?{_MONTH}{_DAY}"),
    ("festival_year", rf"(?:{_YEAR}|{_REL_YEAR})的?(?P<fest>春节|过年|国庆节?|五一|元旦)(?P<dir>前|后|之前|之后|以前|以后)?"),
    ("month_day_anchor", rf"{_MONTH}{_DAY}{_BEFORE}"),
    ("month_day", rf"{_MONTH}{_DAY}"),
    ("year_month", rf"(?:{_YEAR}|{_REL_YEAR})的?{_MONTH}(?!{_N}*[日号號])"),
    ("season_year", rf"(?:{_YEAR}|{_REL_YEAR})的?{_SEASON}"),
    ("year_part_short", rf"(?:{_YEAR}|{_REL_YEAR})(?P<part>初|底|末)"),  # 去年初, 2023年底
    ("year_part", rf"(?:{_YEAR}|{_REL_YEAR})?的?(?P<part>年初|年底|年末|上半年|下半年)"),
    ("ago", rf"(?P<count>{_N}{{1,3}}|几|好几)个?(?P<unit>天|星期|礼拜|周|月|年)(?:以?前|之前)"),
    ("half_year_ago", r"半年(?:以?前|之前)"),
    ("span_back", rf"(?:过去|最近|近)的?(?P<count>{_N}{{1,3}}|几)个?(?P<unit>天|星期|礼拜|周|月|年)"),
    ("few_days", r"(?P<few>前|这|最近)几天"),
    ("day_last_year", r"(?P<rel>去年|大前年|前年)的?今天"),
    ("weekday", r"(?P<which>上上|上|这|本)(?:个)?(?:周|星期|礼拜)(?P<wd>[一二三四五六日天])"),
    ("weekend", r"(?<![下每个])(?P<which>上上|上|这|本)?(?:个)?(?:周末|礼拜六日)"),  # not 下周末, 每周末
    ("relative", r"(?P<which>上上|上|这|本)(?:个)?(?P<unit>周|星期|礼拜|月)(?!末)"),
    ("rel_year", r"(?P<rel>今年|去年|大前年|前年)(?!\d|[〇零一二两三四五六七八九十春夏秋冬])"),
    ("named_day", r"(?P<day>大前天|前天|昨天|昨晚|昨日|今天|今晚|今日)"),
    ("festival", r"(?P<fest>春节|过年|国庆节?|五一|元旦)(?P<dir>前|后|之前|之后|以前|以后)?"),
    ("bare_weekday", r"(?<![上这本下每个第几0-9〇零一二两三四五六七八九十])(?:周|星期|礼拜)(?P<wd>[一二三四五六日天])(?![0-9〇零一二两三四五六七八九十])"),
    ("month", rf"(?<![0-9〇零一二两三四五六七八九十年个几])({_MONTH})(?![0-9〇零一二两三四五六七八九十]*[日号號])"),
    ("year", rf"{_YEAR}"),
]]


_TRADITIONAL = str.maketrans("週個兩號禮過後國慶節幾這點鐘閏",
                             "周个两号礼过后国庆节几这点钟闰")
"""The traditional characters of the words these patterns read, as the simplified ones."""


def one_spelling(text: str) -> str:
    """`text` as the patterns read it: full-width digits and letters as ASCII (NFKC: ２０２３年,
    ３天前) and the traditional characters of time words as simplified (上週三, 兩個月前)."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text).translate(_TRADITIONAL)


def zh_sources() -> list[str]:
    """The sources of the patterns `parse_zh` reads (`memos.retrieval.temporal.mentions_time` joins them)."""
    return [pattern.pattern for _, pattern in _PATTERNS]


def parse_zh(query: str, now: datetime) -> tuple[datetime, datetime, str] | None:
    """(since, until, phrase) of the most specific Chinese time expression in `query`, or None."""
    for name, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            try:
                window = _window(name, match.groupdict(), now)
            except (ValueError, KeyError):  # 2月30日, 十三月: not a date
                window = None
            if window is not None:
                return window[0], window[1], match.group(0)
    return None


def _number(text: str) -> int:
    """12, 十二, 二十八, 两, 二〇二三 -> int."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_DIGITS[tens] if tens else 1) * 10 + (_DIGITS[ones] if ones else 0)
    value = 0
    for char in text:
        value = value * 10 + _DIGITS[char]
    return value


def _group(g: dict[str, str | None], name: str) -> str:
    """A group the matched pattern requires (a KeyError, read as "not a date", if it is absent)."""
    value = g.get(name)
    if value is None:
        raise KeyError(name)
    return value


def _year(g: dict[str, str | None], now: datetime) -> int | None:
    """The year written (2023年, 二〇二三年) or named (去年), or None when the phrase gives none."""
    if year := g.get("year"):
        return _number(year[:-1] if year.endswith("年") else year)
    rel = g.get("rel")
    return None if rel is None else now.year + {"今年": 0, "去年": -1, "前年": -2, "大前年": -3, "明年": 1}[rel]


def _given_year(g: dict[str, str | None], now: datetime) -> int:
    """`_year` of a pattern that requires one."""
    year = _year(g, now)
    if year is None:
        raise KeyError("year")
    return year


def _anchored(anchor: datetime, direction: str) -> tuple[datetime, datetime]:
    """Before / after the day starting at `anchor`, as `memos.retrieval.temporal` reads "before X"."""
    if direction.endswith("前"):
        return shift(anchor, -ANCHOR_REACH, -DAY_SLACK), shift(anchor, DAY_SLACK)
    return anchor, shift(anchor, timedelta(days=1), ANCHOR_REACH, DAY_SLACK)


def _festival(fest: str, year: int | None, direction: str | None, now: datetime) -> tuple[datetime, datetime] | None:
    """春节 (除夕 to 初七), 国庆 (1-7 October), 五一 (1-5 May), 元旦 (1 January); before / after reach ANCHOR_REACH."""
    def start_end(y: int) -> tuple[datetime, datetime]:
        if fest in ("春节", "过年"):
            month, day = LUNAR_NEW_YEAR[y]
            first = datetime(y, month, day, tzinfo=UTC)
            return first - timedelta(days=1), first + timedelta(days=7)
        if fest.startswith("国庆"):
            return datetime(y, 10, 1, tzinfo=UTC), datetime(y, 10, 8, tzinfo=UTC)
        if fest == "元旦":
            return datetime(y, 1, 1, tzinfo=UTC), datetime(y, 1, 2, tzinfo=UTC)
        return datetime(y, 5, 1, tzinfo=UTC), datetime(y, 5, 6, tzinfo=UTC)

    if year is None:  # the most recent one that has begun
        year = now.year if start_end(now.year)[0] <= now else now.year - 1
    if year not in LUNAR_NEW_YEAR and fest in ("春节", "过年"):
        return None
    start, end = start_end(year)
    if not direction:
        return start, end
    if direction.endswith("前"):  # before its first day (初一, 1 October, 1 May)
        first = start + timedelta(days=1) if fest in ("春节", "过年") else start
        return shift(first, -ANCHOR_REACH, -DAY_SLACK), shift(first, DAY_SLACK)
    return start, shift(end, ANCHOR_REACH)  # after: from the holiday on, to two weeks past it


def _window(name: str, g: dict[str, str | None], now: datetime) -> tuple[datetime, datetime] | None:
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if name in ("full_date", "full_date_anchor", "month_day", "month_day_anchor"):
        month, day = _number(_group(g, "month")), _number(_group(g, "day"))
        year = _given_year(g, now) if name.startswith("full_date") else latest_year(month, day, now)
        window = day_window(year, month, day)  # ValueError when it is no date
        return _anchored(datetime(year, month, day, tzinfo=UTC), _group(g, "dir")) if name.endswith("_anchor") else window
    if name in ("festival_year", "festival"):
        return _festival(_group(g, "fest"), _year(g, now), g.get("dir"), now)
    if name == "year_month":
        return month_window(_given_year(g, now), _number(_group(g, "month")), 1)
    if name == "season_year":
        first, months = _SEASONS[_group(g, "season")]
        year = _given_year(g, now)
        if g.get("rel") == "今年" and first == 12 and now.month < 3:  # 今年冬天 in February: the winter under way
            year -= 1
        return month_window(year, first, months)
    if name == "ago":
        count = 3 if g["count"] in ("几", "好几") else _number(_group(g, "count"))
        return ago_window(count, _UNITS[_group(g, "unit")], now)
    if name == "weekday":
        return named_day(week_day(_WEEKDAYS[_group(g, "wd")], now, _BACK[_group(g, "which")]))
    if name == "bare_weekday":  # 周三, 星期天: the most recent one before today
        return named_day(last_weekday(_WEEKDAYS[_group(g, "wd")], now))
    if name == "weekend":
        if g["which"] is None:  # 周末: the most recent weekend (this one, if it has begun)
            return relative_window("this" if today.weekday() >= 5 else "last", "weekend", now)
        return relative_window("this", "weekend", shift(today, -timedelta(weeks=_BACK[g["which"]])))
    if name == "relative":
        unit = _UNITS[_group(g, "unit")]
        back = _BACK[_group(g, "which")]
        earlier = shift_months(today, back) if unit == "month" else shift(today, -timedelta(weeks=back))
        return relative_window("this", unit, earlier)
    if name == "span_back":
        count = 3 if g["count"] == "几" else _number(_group(g, "count"))
        return span_back(count, _UNITS[_group(g, "unit")], now)
    if name == "few_days":  # 前几天: within the last week; 这几天, 最近几天: the last three days
        return span_back(7 if g["few"] == "前" else 3, "day", now)
    if name in ("year_part", "year_part_short"):
        part = _group(g, "part")
        given, (first, months) = _year(g, now), _YEAR_PARTS[part if name == "year_part" else "年" + part]
        given = latest_year(first, 1, now) if given is None else given  # 年底 alone: the most recent one that has begun
        return month_window(given, first, months)
    if name == "half_year_ago":
        return ago_window(6, "month", now)
    if name == "day_last_year":
        year = _given_year(g, now)
        return day_window(year, now.month, min(now.day, calendar.monthrange(year, now.month)[1]))
    if name == "rel_year":
        return year_window(_given_year(g, now))
    if name == "named_day":
        back = {"大前天": 3, "前天": 2, "昨天": 1, "昨晚": 1, "昨日": 1}.get(_group(g, "day"), 0)
        start = shift(today, -timedelta(days=back))
        return start, shift(start, timedelta(days=1))
    if name == "month":
        month = _number(_group(g, "month"))
        if not 1 <= month <= 12:
            return None
        return month_window(latest_year(month, 1, now), month, 1)
    if name == "year":
        return year_window(_given_year(g, now))
    return None
