"""A question asked "as of" a day: `search(..., now=...)` reckons "last week", "three days ago"
(上周, 三天前) and recency from that day, not from the memory's clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memos import MemoryOS, Scope
from memos.bench.locomo import parse_question_date
from memos.exceptions import ConfigError, InvalidFilterError

MAY = datetime(2023, 5, 2, 19, 0, tzinfo=UTC)  # a Tuesday
JUNE = datetime(2023, 6, 20, 19, 0, tzinfo=UTC)


async def _two_evenings(mem: MemoryOS, scope: Scope, texts: tuple[str, str]) -> None:
    for n, (text, when) in enumerate(zip(texts, (MAY, JUNE), strict=True), 1):  # two sessions
        await mem.ingest(scope, [{"speaker": "user", "text": text, "id": f"D{n}:1", "timestamp": when}])


@pytest.mark.parametrize(("texts", "query"), [
    (("I baked sourdough bread at home this evening.", "I baked a lemon cake at home this evening."),
     ("What did I bake last week?", "What did I bake 3 days ago?")),
    (("今天晚上我在家烤了酸面包。", "今天晚上我在家烤了苹果派。"), ("我上周烤了什么？", "我三天前烤了什么？")),
])
async def test_relative_dates_count_from_the_day_the_question_is_asked(mem: MemoryOS, alice: Scope, texts, query):
    await _two_evenings(mem, alice, texts)
    last_week, days_ago = query
    for now, expected in ((datetime(2023, 5, 10, tzinfo=UTC), "D1:1"), (datetime(2023, 6, 28, tzinfo=UTC), "D2:1")):
        top = await mem.search(last_week, alice, k=1, replies=False, now=now)
        assert top[0].source_ids == [expected] and top[0].parts.get("in_time_window") == 1.0
        packed = await mem.search(last_week, alice, budget_tokens=60, now=now)
        assert packed[0].source_ids == [expected]
    for now, expected in ((datetime(2023, 5, 5, 9, tzinfo=UTC), "D1:1"), (datetime(2023, 6, 23, 9, tzinfo=UTC), "D2:1")):
        top = await mem.search(days_ago, alice, k=1, replies=False, now=now)
        assert top[0].source_ids == [expected]


async def test_a_hit_shows_the_date_of_its_session(mem: MemoryOS, alice: Scope):
    await _two_evenings(mem, alice, ("I baked sourdough bread at home this evening.", "I baked a lemon cake at home this evening."))
    hits = await mem.search("What did I bake last week?", alice, budget_tokens=60, now=datetime(2023, 6, 28, tzinfo=UTC))
    assert hits[0].text and hits[0].record.render().startswith("[20 Jun 2023]")


async def test_a_bad_now_is_refused(mem: MemoryOS, alice: Scope):
    with pytest.raises(InvalidFilterError, match="now must be a datetime"):
        await mem.search("bread", alice, now="last tuesday")  # type: ignore[arg-type]


def test_the_bench_reads_a_question_date():
    assert parse_question_date("2023/05/27 (Sat) 03:27") == datetime(2023, 5, 27, 3, 27, tzinfo=UTC)
    assert parse_question_date(None) is None
    with pytest.raises(ConfigError, match="is not a date"):
        parse_question_date("someday")
