"""Dates at the ends of the calendar: records dated 0001-01-01 or 9999-12-31 are accepted (README:
dates from year 1 to 9999, naive means UTC), and every computation on them is total.

A scope holding such a turn or fact keeps working: searches (top-k and budgeted, with bounds and
with time words in English and Chinese), a session's context, decay, consolidation, maintenance,
rendering and export. A date whose offset takes it outside those years once in UTC names no
storable instant: it is refused with a memos error and nothing is written.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memos.memtypes import Episode, Fact

from memos import MemoryOS, Scope
from memos.exceptions import InvalidRecordError
from memos.jobs.runs import run_job
from memos.portability import export_scope, import_lines
from memos.retrieval.packing import render_hits
from memos.retrieval.temporal import parse_time_window
from memos.time_bounds import EARLIEST, LATEST, shift

PLUS_14, MINUS_12 = timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))
LAST = datetime(9999, 12, 31, 23, 59, 59, 999999)
EXTREMES = {
    "first naive": datetime(1, 1, 1),
    "last naive": LAST,
    "first utc": datetime(1, 1, 1, tzinfo=UTC),
    "last utc": LAST.replace(tzinfo=UTC),
    "first +14:00": datetime(1, 1, 1, 14, tzinfo=PLUS_14),  # 0001-01-01 00:00 UTC
    "last -12:00": datetime(9999, 12, 31, 11, 59, 59, 999999, tzinfo=MINUS_12),  # the last UTC instant
}
OUTSIDE = {  # in range as written, outside once taken to UTC
    "before year 1 in UTC": datetime(1, 1, 1, 13, tzinfo=PLUS_14),
    "after 9999 in UTC": datetime(9999, 12, 31, 12, tzinfo=MINUS_12),
}
QUERIES = ["tea", "what tea did I drink last week", "tea yesterday", "上周 喝茶", "昨天的茶", "tea 3 days ago",
           "tea on 31 December 9999", "tea on 1 January 0001", "0001年1月1日之前的茶", "9999年12月31日之后", "tea in 9999"]
BOUNDS = [(None, None), (datetime(1, 1, 1), LAST), (datetime(1, 1, 1, tzinfo=UTC), None)]


async def _store(mem: MemoryOS, scope: Scope, when: datetime) -> None:
    """A turn, an episode and a fact (valid from / to) dated `when`, and a fact imported with
    every timestamp at `when` (created, updated, last accessed): what decay and `stamp` read."""
    await mem.ingest(scope, [{"speaker": "alice", "text": "I drank green tea with Bob in Paris", "timestamp": when},
                             {"speaker": "bot", "text": "Was the tea good?", "timestamp": when}])
    await mem.add(scope, [Episode(summary="a tea party", occurred_at=when),
                          Fact(subject="Alice", summary="Alice likes tea", valid_from=when, valid_to=when)])
    imported = Fact(subject="Alice", summary="Alice likes green tea", user_id=scope.user_id, agent_id=scope.agent_id,
                    session_id=scope.session_id, created_at=when, updated_at=when, last_accessed=when, importance=0.0)
    header = {"kind": "header", "format": "memos-export/1", "scope": scope.stamp(), "types": mem.type_names}
    await import_lines(mem, [json.dumps(header), json.dumps({"kind": "record", "memory_type": "semantic",
                                                             "record": imported.model_dump(mode="json")})])


@pytest.mark.parametrize("when", list(EXTREMES.values()), ids=list(EXTREMES))
async def test_a_scope_with_a_record_at_the_end_of_the_calendar_keeps_working(mem, alice, when):
    mem.entity_links = True  # turns link the entities they name, first and last seen at `when`
    await _store(mem, alice, when)
    await mem.graph.add_relation(alice, "Alice", "lives in", "Paris", valid_from=when, exclusive=True)
    await mem.graph.add_relation(alice, "Alice", "lives in", "London", valid_from=datetime(2020, 1, 1), exclusive=True)
    assert (await mem.graph.neighbourhood(alice, "Alice", at=when)).entity.name.lower() == "alice"
    for query in QUERIES:
        for since, until in BOUNDS:
            top = await mem.search(query, alice, since=since, until=until)
            budgeted = await mem.search(query, alice, budget_tokens=400, since=since, until=until)
            render_hits(budgeted)
            if since is None and until is None and query == "tea":
                assert {getattr(h.record, "summary", "") for h in top} >= {"Alice likes tea", "Alice likes green tea"}
    assert await mem.list(alice, "episodic", since=datetime(1, 1, 1)) and await mem.list(alice, "semantic", until=LAST)

    session = await mem.session(alice)
    await session.record_turn("user", "we had tea", occurred_at=when)
    compiled = await session.compile("what tea did I drink last week?")
    assert "tea" in compiled.system_prompt + "".join(t.summary for t in compiled.recent_turns)

    [fact] = [f for f in await mem.list(alice, "semantic") if f.summary == "Alice likes green tea"]
    changed = await mem.update(alice, "semantic", fact.id, {"importance": 0.1})  # its next version's stamp
    assert changed.updated_at >= fact.updated_at
    for kind in ("consolidate", "decay", "maintain"):
        outcome = await run_job(mem, kind, alice)
        assert outcome["errors"] == [], (kind, outcome["errors"])
    assert len(list(await export_scope(mem, alice))) > 5
    assert await mem.search("green tea", alice, budget_tokens=400)  # still usable after the jobs


@pytest.mark.parametrize("when", list(OUTSIDE.values()), ids=list(OUTSIDE))
async def test_a_date_outside_the_calendar_once_in_utc_is_refused_and_nothing_is_written(mem, alice, snapshot, when):
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea"))
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match="outside the years 1 to 9999 once taken to UTC"):
        await mem.ingest(alice, [{"speaker": "alice", "text": "hello", "timestamp": when}])
    with pytest.raises(InvalidRecordError, match="outside the years 1 to 9999 once taken to UTC"):
        await mem.add(alice, Episode.model_construct(summary="a party", occurred_at=when))
    with pytest.raises(InvalidRecordError, match="outside the years 1 to 9999 once taken to UTC"):
        await mem.update(alice, "semantic", fact.id, {"valid_from": when})
    with pytest.raises(InvalidRecordError, match="outside the years 1 to 9999 once taken to UTC"):
        await mem.update(alice, "semantic", fact.id, {"valid_from": when.isoformat()})
    assert await snapshot(mem) == before
    assert [h.record.summary for h in await mem.search("tea", alice, budget_tokens=200)] == ["Alice likes tea"]


WINDOW_QUERIES = [*QUERIES, "the week before 1 January 0001", "two weeks after 31 December 9999", "last month", "last year",
                  "this weekend", "past year", "5 years ago", "2 weeks ago", "上个月", "去年", "明年", "上周三", "周末", "前天",
                  "三天前", "9999年冬天", "December 9999", "9999年12月31日", "0001年1月1日"]
EDGE_CLOCKS = [EARLIEST, datetime(1, 1, 3, tzinfo=UTC), datetime(9999, 12, 30, tzinfo=UTC), LATEST]


def _check_windows(now: datetime) -> None:
    for query in WINDOW_QUERIES:
        window = parse_time_window(query, now)  # never OverflowError, whatever the clock says
        if window is not None:
            assert EARLIEST <= window.since <= window.until <= LATEST, (query, now, window)


@pytest.mark.parametrize("now", EDGE_CLOCKS, ids=[c.isoformat() for c in EDGE_CLOCKS])
def test_time_windows_saturate_at_the_ends_of_the_calendar(now):
    _check_windows(now)


@given(now=st.datetimes(min_value=datetime(1, 1, 1), max_value=LAST, timezones=st.just(UTC)))
def test_time_windows_are_total_for_any_clock(now):
    _check_windows(now)


def test_shift_holds_at_the_first_and_last_instant():
    assert shift(LAST.replace(tzinfo=UTC), timedelta(days=1)) == LATEST
    assert shift(datetime(1, 1, 1, tzinfo=UTC), -timedelta(days=1), timedelta(hours=1)) == EARLIEST
    assert shift(datetime(1, 1, 1), -timedelta(days=1)) == datetime.min  # a naive date stays naive
    assert shift(datetime(2024, 1, 1, tzinfo=UTC), timedelta(days=1), -timedelta(hours=1)) == datetime(2024, 1, 1, 23, tzinfo=UTC)


def test_a_tool_date_outside_the_calendar_in_utc_is_a_model_retry():
    from memos.agents.arguments import parse_when
    from pydantic_ai import ModelRetry

    with pytest.raises(ModelRetry, match="outside the years 1 to 9999 once taken to UTC"):
        parse_when("0001-01-01T00:00+14:00", "since")
    assert parse_when("9999-12-31T23:59:59.999999", "since") == LATEST
    assert parse_when("0001-01-01T14:00+14:00", "since") == EARLIEST
