"""Chinese time expressions (pure): the same rules as the English ones, across year ends."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from memos.retrieval.temporal import parse_time_window
from memos.retrieval.temporal_zh import LUNAR_NEW_YEAR

NOW = datetime(2026, 1, 5, 15, 30, tzinfo=UTC)  # a Monday, five days into a new year
NEW_YEAR_DAY = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)  # a Monday, the first day of a year


def span(query: str, now: datetime = NOW) -> tuple[date, date] | None:
    window = parse_time_window(query, now)
    return (window.since.date(), window.until.date()) if window else None


@pytest.mark.parametrize(("query", "expected"), [
    ("2023年5月8日我们去了哪里？", (date(2023, 5, 7), date(2023, 5, 10))),  # a day, one day of slack
    ("二〇二三年五月八号发生了什么", (date(2023, 5, 7), date(2023, 5, 10))),  # numbers in Chinese
    ("2025年12月31日的聚会", (date(2025, 12, 30), date(2026, 1, 2))),  # the slack crosses the year
    ("2023年12月买了什么？", (date(2023, 12, 1), date(2024, 1, 1))),  # a month ends a year
    ("2021年夏天的旅行", (date(2021, 6, 1), date(2021, 9, 1))),
    ("2025年冬天我们计划了什么", (date(2025, 12, 1), date(2026, 3, 1))),  # a season across a year end
    ("2022年有什么大事？", (date(2022, 1, 1), date(2023, 1, 1))),
    ("2023年5月8日之前一直在忙什么", (date(2023, 4, 23), date(2023, 5, 9))),  # before: ANCHOR_REACH
    ("2023年5月8日以后", (date(2023, 5, 8), date(2023, 5, 24))),
])
def test_absolute_dates(query, expected):
    assert span(query) == expected


@pytest.mark.parametrize(("query", "expected"), [
    ("十二月买了什么？", (date(2025, 12, 1), date(2026, 1, 1))),  # asked in January: last December
    ("一月呢？", (date(2026, 1, 1), date(2026, 2, 1))),  # the current month is this year's
    ("五月八号那天", (date(2025, 5, 7), date(2025, 5, 10))),  # a day without a year: the last one
    ("12月24日的礼物", (date(2025, 12, 23), date(2025, 12, 26))),  # not yet reached this year
    ("1月2号发生了什么", (date(2026, 1, 1), date(2026, 1, 4))),
    ("去年", (date(2025, 1, 1), date(2026, 1, 1))),
    ("今年有什么计划", (date(2026, 1, 1), date(2027, 1, 1))),
    ("前年", (date(2024, 1, 1), date(2025, 1, 1))),
    ("去年五月我们在哪？", (date(2025, 5, 1), date(2025, 6, 1))),
    ("去年十二月", (date(2025, 12, 1), date(2026, 1, 1))),
    ("今年夏天", (date(2026, 6, 1), date(2026, 9, 1))),
    ("去年冬天", (date(2025, 12, 1), date(2026, 3, 1))),  # winter reaches into this year
    ("上个月", (date(2025, 12, 1), date(2026, 1, 1))),  # December of the year before
    ("这个月", (date(2026, 1, 1), date(2026, 2, 1))),
    ("上周", (date(2025, 12, 29), date(2026, 1, 5))),  # last week straddles the year end
    ("这周", (date(2026, 1, 5), date(2026, 1, 12))),
    ("上个星期", (date(2025, 12, 29), date(2026, 1, 5))),
    ("上周末去哪了", (date(2026, 1, 3), date(2026, 1, 5))),
    ("周末做了什么", (date(2026, 1, 3), date(2026, 1, 5))),  # asked on a Monday: the one just past
    ("上周六", (date(2026, 1, 2), date(2026, 1, 5))),  # a named day, one day of slack
    ("昨天", (date(2026, 1, 4), date(2026, 1, 5))),
    ("前天晚上", (date(2026, 1, 3), date(2026, 1, 4))),
    ("今天", (date(2026, 1, 5), date(2026, 1, 6))),
    ("三天前", (date(2026, 1, 2), date(2026, 1, 3))),
    ("6天前", (date(2025, 12, 30), date(2025, 12, 31))),  # across the year end
    ("两周前", (date(2025, 12, 19), date(2025, 12, 26))),
    ("三个月前", (date(2025, 10, 1), date(2025, 11, 1))),
    ("两年前", (date(2024, 1, 1), date(2025, 1, 1))),
])
def test_relative_dates(query, expected):
    assert span(query) == expected


@pytest.mark.parametrize(("query", "now", "expected"), [
    ("昨天", NEW_YEAR_DAY, (date(2023, 12, 31), date(2024, 1, 1))),  # yesterday was last year
    ("上个月", NEW_YEAR_DAY, (date(2023, 12, 1), date(2024, 1, 1))),
    ("去年", NEW_YEAR_DAY, (date(2023, 1, 1), date(2024, 1, 1))),
    ("上周末", NEW_YEAR_DAY, (date(2023, 12, 30), date(2024, 1, 1))),
    ("三天前", datetime(2024, 1, 2, tzinfo=UTC), (date(2023, 12, 30), date(2023, 12, 31))),
])
def test_year_ends(query, now, expected):
    assert span(query, now) == expected


SUNDAY = datetime(2026, 3, 1, 15, 0, tzinfo=UTC)  # a Sunday, the day after a 28 February


@pytest.mark.parametrize(("query", "now", "expected"), [
    ("上上周做了什么", SUNDAY, (date(2026, 2, 9), date(2026, 2, 16))),  # the week before last, not last week
    ("上上个月", SUNDAY, (date(2026, 1, 1), date(2026, 2, 1))),
    ("上上个月", NOW, (date(2025, 11, 1), date(2025, 12, 1))),  # across the year end
    ("上上周末", SUNDAY, (date(2026, 2, 14), date(2026, 2, 16))),
    ("上上周三", SUNDAY, (date(2026, 2, 10), date(2026, 2, 13))),
    ("周日去了哪里", SUNDAY, (date(2026, 2, 21), date(2026, 2, 24))),  # a bare weekday: the most recent before today
    ("星期五", SUNDAY, (date(2026, 2, 26), date(2026, 3, 1))),
    ("礼拜一", NOW, (date(2025, 12, 28), date(2025, 12, 31))),  # asked on a Monday: a week ago
    ("半年前", SUNDAY, (date(2025, 9, 1), date(2025, 10, 1))),
    ("去年的今天", SUNDAY, (date(2025, 2, 28), date(2025, 3, 3))),
    ("元旦", SUNDAY, (date(2026, 1, 1), date(2026, 1, 2))),
    ("去年元旦", SUNDAY, (date(2025, 1, 1), date(2025, 1, 2))),
    ("2月29日", SUNDAY, (date(2024, 2, 28), date(2024, 3, 2))),  # the last leap day, not "no date"
    ("过去一周", SUNDAY, (date(2026, 2, 22), date(2026, 3, 2))),  # a span up to today
    ("最近三天", SUNDAY, (date(2026, 2, 26), date(2026, 3, 2))),
    ("近两个月", SUNDAY, (date(2026, 1, 1), date(2026, 3, 2))),
    ("前几天", SUNDAY, (date(2026, 2, 22), date(2026, 3, 2))),
    ("去年年底", SUNDAY, (date(2025, 11, 1), date(2026, 1, 1))),  # not the whole of last year
    ("今年年初", SUNDAY, (date(2026, 1, 1), date(2026, 3, 1))),
    ("年底", SUNDAY, (date(2025, 11, 1), date(2026, 1, 1))),  # this year's has not begun: the last one
    ("2025年下半年", SUNDAY, (date(2025, 7, 1), date(2026, 1, 1))),
])
def test_week_before_last_bare_weekdays_and_more(query, now, expected):
    assert span(query, now) == expected


@pytest.mark.parametrize(("query", "now", "expected"), [
    ("春节前买了什么？", datetime(2024, 2, 18, tzinfo=UTC), (date(2024, 1, 26), date(2024, 2, 11))),
    ("春节后", datetime(2024, 3, 1, tzinfo=UTC), (date(2024, 2, 9), date(2024, 3, 2))),
    ("春节", datetime(2024, 1, 5, tzinfo=UTC), (date(2023, 1, 21), date(2023, 1, 29))),  # not yet this year: the last one
    ("2025年春节前", NOW, (date(2025, 1, 14), date(2025, 1, 30))),
    ("去年春节", NOW, (date(2025, 1, 28), date(2025, 2, 5))),
    ("2023年国庆节", NOW, (date(2023, 10, 1), date(2023, 10, 8))),
    ("国庆前", NOW, (date(2025, 9, 16), date(2025, 10, 2))),
])
def test_festivals(query, now, expected):
    assert span(query, now) == expected


def test_spring_festival_table_is_plausible():
    """Every lunar new year falls between 21 January and 20 February."""
    assert all(date(y, 1, 21) <= date(y, m, d) <= date(y, 2, 20) for y, (m, d) in LUNAR_NEW_YEAR.items())
    assert LUNAR_NEW_YEAR[2024] == (2, 10) and LUNAR_NEW_YEAR[2023] == (1, 22)


@pytest.mark.parametrize("query", [
    "李明买了什么牌子的吉他？",  # no time at all
    "五个人一起吃饭",  # a count, not a month
    "十三月",  # no such month
    "2月30日",  # no such day
    "每周日下午打球",  # a habit, not a date
    "我一周一次去健身房",  # once a week: no Monday in it
    "下周一开会",  # the future
])
def test_no_window(query):
    assert span(query) is None


def test_days_are_the_days_of_the_asking_time_zone():
    """07:00 in Beijing is 23:00 UTC the day before: 昨天 is the Beijing day before, in UTC."""
    beijing = datetime(2026, 3, 4, 7, 0, tzinfo=timezone(timedelta(hours=8)))
    for query in ("昨天", "yesterday"):
        window = parse_time_window(query, beijing)
        assert (window.since, window.until) == (datetime(2026, 3, 2, 16, tzinfo=UTC), datetime(2026, 3, 3, 16, tzinfo=UTC))
    new_york = datetime(2026, 3, 3, 22, 0, tzinfo=timezone(timedelta(hours=-5)))  # already 4 March in UTC
    window = parse_time_window("today", new_york)
    assert (window.since, window.until) == (datetime(2026, 3, 3, 5, tzinfo=UTC), datetime(2026, 3, 4, 5, tzinfo=UTC))
    assert parse_time_window("上周三", beijing).since == datetime(2026, 2, 23, 16, tzinfo=UTC)  # 24 Feb, a day of slack, Beijing


def test_mixed_query_reads_the_chinese_date():
    assert span("what did Li Ming do 2023年5月?") == (date(2023, 5, 1), date(2023, 6, 1))
    assert span("我们 last month 聊了什么") == (date(2025, 12, 1), date(2026, 1, 1))  # English still read


JUNE = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
FEBRUARY = datetime(2026, 2, 10, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("query", "now", "expected"), [
    ("去年3月8日", JUNE, (date(2025, 3, 7), date(2025, 3, 10))),  # was this year's 8 March
    ("前年5月8日", JUNE, (date(2024, 5, 7), date(2024, 5, 10))),
    ("去年的3月8日", JUNE, (date(2025, 3, 7), date(2025, 3, 10))),
    ("去年的三月", JUNE, (date(2025, 3, 1), date(2025, 4, 1))),
    ("2023年的夏天", JUNE, (date(2023, 6, 1), date(2023, 9, 1))),
    ("去年初", JUNE, (date(2025, 1, 1), date(2025, 3, 1))),  # was this year's start
    ("2023年底", JUNE, (date(2023, 11, 1), date(2024, 1, 1))),
    ("去年底", JUNE, (date(2025, 11, 1), date(2026, 1, 1))),
    ("大前年", JUNE, (date(2023, 1, 1), date(2024, 1, 1))),  # was read as 前年
    ("大前年的今天", JUNE, (date(2023, 5, 31), date(2023, 6, 3))),
    ("今年冬天", FEBRUARY, (date(2025, 12, 1), date(2026, 3, 1))),  # the winter under way, as "this winter" is
    ("２０２３年５月８日", JUNE, (date(2023, 5, 7), date(2023, 5, 10))),  # full-width digits
    ("３天前", JUNE, (date(2026, 5, 29), date(2026, 5, 30))),
    ("上週三", JUNE, (date(2026, 5, 26), date(2026, 5, 29))),  # traditional characters
    ("兩個月前", JUNE, (date(2026, 4, 1), date(2026, 5, 1))),
    ("上個月", JUNE, (date(2026, 5, 1), date(2026, 6, 1))),
])
def test_years_named_before_a_date_and_other_spellings(query, now, expected):
    assert span(query, now) == expected


@pytest.mark.parametrize("query", ["下周末去爬山", "每周末打球", "下个周末"])  # the future, a habit: not the last weekend
def test_a_weekend_that_is_not_the_last_one_names_no_window(query):
    assert span(query, JUNE) is None


@pytest.mark.parametrize(("query", "english"), [
    ("我2023-05-08去了北京", "2023-05-08"), ("我last week去了北京", "last week"), ("在May 3rd那天", "May 3rd"),
    ("Ann说three days ago她病了", "three days ago"),
])
def test_english_next_to_chinese_is_read(query, english):
    """Python's \\w counts a Chinese character as a word character, so the English patterns'
    boundaries read "我last week" as one word and found no date in it."""
    from memos.retrieval.temporal import mentions_time

    assert span(query, JUNE) == span(english, JUNE) is not None and mentions_time(query)
    assert span("abc2023-05-08", JUNE) is None and not mentions_time("lastweek")  # glued to Latin letters: still none


@pytest.mark.parametrize("text", ["國慶節去了杭州", "慶祝國慶", "２０２５－０５－０８", "ｌａｓｔ ｗｅｅｋ", "Ｍａｙ ３ｒｄ", "ｙｅｓｔｅｒｄａｙ"])
def test_mentions_time_reads_the_spellings_the_parser_reads(text):
    """`mentions_time` (does a candidate answer "when"?) first looks for a word every time expression
    holds, and looked in the text as typed: traditional 國慶 and full-width letters and digits, which
    the parser reads, held none of them."""
    from memos.retrieval.temporal import mentions_time

    assert span(text, JUNE) is not None and mentions_time(text)
