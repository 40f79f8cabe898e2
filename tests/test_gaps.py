"""A short turn said between two packed turns is packed too (memos.retrieval.gaps)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memos import Scope
from memos.memtypes import Episode
from memos.retrieval.gaps import with_gaps
from memos.retrieval.packing import pack
from memos.retrieval.ranking import Hit, RankingPolicy
from memos.tokens import tokenizer_for

START = datetime(2024, 7, 3, 18, 0, tzinfo=UTC)


def _turn(i: int, text: str) -> Episode:
    return Episode(id=f"t{i}", actor="Ana" if i % 2 else "Ben", summary=text, event_type="message",
                   occurred_at=START + timedelta(seconds=30 * i), user_id="u")


STRETCH = [_turn(i, text) for i, text in enumerate([
    "What should I read next?", "Try a fantasy series, they are great for relaxing.", "How about this one?",
    "That's a great one! Tell me what you think.", "Sure! Here is one for you too, full of battles and magic.", "Thanks, I'll look."])]


def _count(text: str) -> int:
    return len(text.split())


def test_a_turn_between_two_kept_turns_goes_right_behind_the_later_one():
    t = STRETCH
    hits = [Hit("episodic", t[1], 0.9, {}), Hit("episodic", t[4], 0.8, {}), Hit("episodic", t[2], 0.7, {}),
            Hit("episodic", t[0], 0.2, {})]
    out = with_gaps(hits, [0, 1, 2], [t], "episodic", lambda h: _count(h.record.summary), 25)
    assert out is not None
    assert [h.id for h in out] == ["t1", "t4", "t2", "t3", "t0"]  # t3 sits between t2 and t4, behind t2 (ranked later)
    assert out[3].parts == {"between": 1.0} and out[3].score == 0.7
    # ranked lower already: moved up, keeping its own score and parts
    lower = [*hits, Hit("episodic", t[3], 0.1, {"fused": 0.1})]
    moved = with_gaps(lower, [0, 1, 2], [t], "episodic", lambda h: _count(h.record.summary), 25)
    assert moved is not None and [h.id for h in moved] == ["t1", "t4", "t2", "t3", "t0"] and moved[3].parts == {"fused": 0.1}


def test_no_gap_is_filled_when_a_side_is_missing_the_turn_is_long_or_it_ranked_above():
    t = STRETCH
    cost = lambda h: _count(h.record.summary)  # noqa: E731
    hits = [Hit("episodic", t[1], 0.9, {}), Hit("episodic", t[4], 0.8, {}), Hit("episodic", t[2], 0.7, {})]
    assert with_gaps(hits, [0, 1], [t], "episodic", cost, 25) is None  # t2 not kept: t3 has one side only
    assert with_gaps(hits, [0, 1, 2], [t], "episodic", cost, 3) is None  # t3's 8 words cost over 3
    assert with_gaps(hits, [0, 1, 2], [], "episodic", cost, 25) is None  # no stretch read
    above = [Hit("episodic", t[3], 0.95, {}), *hits]  # ranked first and still not kept: it did not fit
    assert with_gaps(above, [1, 2, 3], [t], "episodic", cost, 25) is None


def test_pack_plans_again_with_the_gap_and_drops_what_ranked_below_it():
    t = STRETCH
    hits = [Hit("episodic", t[1], 0.9, {}), Hit("episodic", t[2], 0.8, {}), Hit("episodic", t[4], 0.7, {}),
            Hit("episodic", t[0], 0.2, {})]
    count = tokenizer_for("gpt-4o").count
    replan = lambda ranked, kept: with_gaps(ranked, kept, [t], "episodic", lambda h: count(h.record.summary), 25)  # noqa: E731
    whole = pack(list(hits), 10_000, count, replan=replan)
    assert [h.id for h in whole] == ["t1", "t2", "t4", "t3", "t0"]
    budget = sum(h.tokens for h in whole[:4])  # room for the three best lines and the one between two of them
    assert whole[4].tokens <= whole[3].tokens  # without the gap, t0 takes that room
    assert [h.id for h in pack(list(hits), budget, count)] == ["t1", "t2", "t4", "t0"]
    packed = pack(list(hits), budget, count, replan=replan)
    assert [h.id for h in packed] == ["t1", "t2", "t4", "t3"]  # t0 ranked last and pays for t3
    assert sum(h.tokens for h in packed) <= budget


TURNS = [
    ("Ana", "I recommend the Earthsea books, a fantasy series with wizards and dragons."),
    ("Ben", "Lovely, tell me when you finish it."),
    ("Ana", "Is it long?"),
    ("Ben", "Which fantasy book series were recommended to you? Fantasy book series are my favourite."),
    ("Ana", "I will check the library on Monday."),
]
LATER = [("Ben", "My sister reads fantasy novels every night."), ("Ana", "The bookstore has a big fantasy shelf."),
         ("Ben", "Fantasy films are better than fantasy books.")]


async def test_a_budgeted_search_packs_the_short_turn_between_two_packed_ones(mem):
    scope = Scope("u")
    for session, turns, at in (("D1", TURNS, START), ("D2", LATER, START + timedelta(hours=3))):
        await mem.ingest(scope, [{"speaker": who, "text": text, "id": f"{session}:{i + 1}", "timestamp": at + timedelta(seconds=30 * i)}
                                 for i, (who, text) in enumerate(turns)])
    query = "Which fantasy book series were recommended?"
    policy = {"neighbours": 1, "neighbour_budget_tokens": 10, "name_weight": 0.0}  # the best turn brings the turns around it
    mem.ranking = RankingPolicy(gap_tokens=0, **policy)
    whole = await mem.search(query, scope, budget_tokens=10_000)
    order = [h.source_ids[0] for h in whole]
    # D1:4 is the best turn and brings D1:3 and D1:5; D1:1 ranks on its own, D2:3 after it; the
    # turn between D1:1 and D1:3 matches little and ranks below them all
    assert order[:5] == ["D1:4", "D1:3", "D1:5", "D1:1", "D2:3"] and order.index("D1:2") > 4, order
    cost = {h.source_ids[0]: h.tokens for h in whole}
    budget = sum(cost[turn] for turn in order[:4]) + cost["D1:2"]
    assert cost["D2:3"] <= cost["D1:2"]
    without = [h.source_ids[0] for h in await mem.search(query, scope, budget_tokens=budget)]
    assert without[:5] == order[:5] and "D1:2" not in without
    mem.ranking = RankingPolicy(**policy)
    hits = await mem.search(query, scope, budget_tokens=budget)
    assert [h.source_ids[0] for h in hits] == [*order[:4], "D1:2"]  # right behind D1:1; D2:3 no longer fits
    assert hits[-1].parts.get("fused") is not None  # a hit of its own (ranked low), moved up
    assert sum(h.tokens for h in hits) <= budget
