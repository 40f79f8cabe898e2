"""A hit over its share of a budget must score more than the smaller hits it would displace
(`memos.retrieval.budget_share`); a large budget ranks as before."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from memos.memtypes import Episode

from memos import MemoryOS, Scope
from memos.retrieval.budget_share import affordable, line_limit, line_tokens, priced
from memos.retrieval.ranking import Hit
from memos.tokens import tokenizer_for

count = tokenizer_for("gpt-4o").count
LONG = "The train from Lyon was late, so we walked along the river instead and talked for hours. " * 8


def turn(text: str, score: float, actor: str = "user") -> Hit:
    return Hit("episodic", Episode(summary=text, actor=actor, occurred_at=datetime(2023, 5, 8, 12, tzinfo=UTC)), score)


def test_a_long_hit_over_its_share_ranks_below_the_short_ones_it_would_displace():
    long, short1, short2 = turn(LONG, 1.0, "assistant"), turn("I moved to Lyon in May.", 0.8), turn("My sister visited.", 0.5)
    cost = line_tokens(long, count)
    assert 100 < cost < 200
    out = priced([long, short1, short2], line_limit(500, 0.15), count)  # 75 tokens: the long one is over its share
    assert out == [short1, short2, long]
    assert long.score == 1.0 * 75 / cost and long.parts["over_share"] == 75 / cost
    assert short1.score == 0.8 and "over_share" not in short1.parts


def test_a_long_hit_that_still_scores_more_keeps_its_place_before_weaker_ones():
    long, short1, short2 = turn(LONG, 10.0, "assistant"), turn("I moved to Lyon in May.", 0.8), turn("My sister visited.", 0.5)
    assert priced([long, short1, short2], line_limit(500, 0.15), count) == [long, short1, short2]  # 10 × 75/cost > 0.8


def test_a_budget_that_affords_every_line_and_a_share_of_one_change_nothing():
    hits = [turn(LONG, 1.0, "assistant"), turn("I moved to Lyon in May.", 0.8)]
    assert priced(list(hits), line_limit(4000, 0.15), count) == hits and hits[0].score == 1.0  # 600 tokens each
    assert priced(list(hits), line_limit(500, 1.0), count) == hits and hits[0].score == 1.0


def test_the_limit_is_a_share_of_the_budget_at_most_the_cap():
    assert line_limit(500, 0.15, 150) == 75 and line_limit(4000, 0.15, 150) == 150 and line_limit(4000, 0.15) == 600
    assert line_limit(500, 1.0, 150) is None and line_limit(500, 0, 150) is None
    assert line_limit(200, 0.15, 150, 75) == 75 and line_limit(1000, 0.15, 150, 75) == 150  # never below an ordinary turn


def test_the_order_of_lines_within_their_share_is_kept_as_given():
    a, b, c = turn("b first", 0.2), turn("a second", 0.9), turn("c third", 0.5)  # not by score: an interleaved list
    assert priced([a, b, c], line_limit(500, 0.15), count) == [a, b, c]


def test_affordable_prices_a_chinese_line_by_its_tokens():
    chinese = turn("我上个月搬到了里昂，因为新工作在那里，每天骑车去上班。" * 3, 1.0)
    cost = line_tokens(chinese, count)
    assert 45 < cost < 60 < len(chinese.record.render_line())  # fewer tokens than characters
    assert affordable(chinese, line_limit(400, 0.15), count)  # 60 tokens
    assert not affordable(chinese, line_limit(300, 0.15), count)  # 45 tokens
    assert affordable(turn("I moved to Lyon in May.", 1.0), line_limit(300, 0.15), count)


WHEN = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
REPLY = ("Lyon is a wonderful city for a weekend: walk the old town, take the funicular up to Fourviere, "
         "eat at a bouchon and cross the Saone at sunset. ") * 4


async def test_a_small_budget_packs_the_short_facts_before_a_long_reply(mem: MemoryOS, alice: Scope):
    await mem.ingest(alice, [
        {"speaker": "user", "text": "What should I see in Lyon this weekend?", "id": "D1:1", "timestamp": WHEN},
        {"speaker": "assistant", "text": REPLY, "id": "D1:2", "timestamp": WHEN + timedelta(minutes=1)},
        {"speaker": "user", "text": "I booked a hotel in Lyon near the old town.", "id": "D2:1", "timestamp": WHEN + timedelta(days=3)},
        {"speaker": "user", "text": "My train to Lyon leaves at nine on Friday.", "id": "D3:1", "timestamp": WHEN + timedelta(days=9)},
    ])
    query = "what to see in Lyon, the old town and Fourviere at the weekend"
    after = await mem.search(query, alice, budget_tokens=170)  # the default policy prices lines
    default = mem.ranking
    mem.ranking = replace(default, budget_share=1.0)
    before = await mem.search(query, alice, budget_tokens=170)
    assert [h.source_ids[0] for h in before] == ["D1:2", "D1:1"]  # the long reply ranks first and takes the budget
    mem.ranking = default
    ids = [h.source_ids[0] for h in after]
    assert "D1:2" not in ids and {"D1:1", "D2:1", "D3:1"} <= set(ids)  # the short turns, no room left for the reply
    mem.ranking = replace(default, budget_line_cap=None)
    big = await mem.search(query, alice, budget_tokens=4000)
    assert big[0].source_ids == ["D1:2"]  # a budget whose share affords it ranks as before


async def test_a_turn_around_a_hit_comes_along_only_within_its_share(mem: MemoryOS, alice: Scope):
    await mem.ingest(alice, [
        {"speaker": "user", "text": "I finally booked my hotel near the old town of Lyon.", "id": "D1:1", "timestamp": WHEN},
        {"speaker": "assistant", "text": REPLY, "id": "D1:2", "timestamp": WHEN + timedelta(minutes=1)},
    ])
    query = "where did I book my hotel"
    mem.ranking = replace(mem.ranking, budget_share=1.0)
    hits = await mem.search(query, alice, budget_tokens=500)
    assert [h.source_ids[0] for h in hits] == ["D1:1", "D1:2"] and "neighbour_of" in hits[1].parts  # brought by the hit
    mem.ranking = replace(mem.ranking, budget_share=0.15)  # 75 tokens: the reply is over its share
    hits = await mem.search(query, alice, budget_tokens=500)
    assert all("neighbour_of" not in h.parts for h in hits)  # ranked on its own, if at all
    mem.ranking = replace(mem.ranking, budget_share=0.5, budget_line_cap=100)  # 100 tokens, the smaller
    hits = await mem.search(query, alice, budget_tokens=500)
    assert all("neighbour_of" not in h.parts for h in hits)  # ranked on its own, if at all
