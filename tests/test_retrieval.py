"""Retrieval on a small synthetic conversation: neighbours, empty stores, budgets."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from memos import Scope
from memos.retrieval.ranking import RankingPolicy

TURNS = ["Where did you go on holiday last summer?", "We rented a cabin near Lake Bled for a week.",
         "Did you take the dog?", "Yes, Pepper loved swimming in the lake.", "What are you reading now?",
         "A history of the Silk Road, very slow going.", "How is the new job?", "Busy, I lead the data team now."]


async def ingest(mem, scope):
    start = datetime(2024, 7, 3, 18, 0, tzinfo=UTC)
    await mem.ingest(scope, [{"speaker": "Ana" if i % 2 == 0 else "Ben", "text": t, "id": f"D1:{i + 1}",
                              "timestamp": start + timedelta(seconds=30 * i)} for i, t in enumerate(TURNS)])


async def test_a_best_turn_brings_its_neighbours_when_the_budget_allows(mem):
    scope = Scope("u")
    await ingest(mem, scope)
    hits = await mem.search("Which dog went swimming?", scope, budget_tokens=1000)
    ids = [s for h in hits for s in h.source_ids]
    best = ids.index("D1:4")
    assert {"D1:3", "D1:5"} <= set(ids[max(0, best - 1) : best + 3])  # right beside the best turn
    small = await mem.search("Which dog went swimming?", scope, budget_tokens=100)
    assert sum(h.tokens for h in small) <= 100 and not any(h.parts.get("neighbour_of") for h in small)


async def test_neighbours_can_be_turned_off_and_never_cross_scopes(mem, db_path, embedder, clock):
    await ingest(mem, Scope("u"))
    await ingest(mem, Scope("other"))
    mem.ranking = RankingPolicy(neighbours=0)
    hits = await mem.search("Which dog went swimming?", Scope("u"), budget_tokens=2000)
    assert not any(h.parts.get("neighbour_of") for h in hits)
    mem.ranking = RankingPolicy()
    hits = await mem.search("Which dog went swimming?", Scope("u"), budget_tokens=2000)
    assert {h.record.user_id for h in hits} == {"u"} and any(h.parts.get("neighbour_of") for h in hits)


async def test_empty_stores_are_skipped_until_they_get_rows(mem):
    scope = Scope("u")
    await ingest(mem, scope)
    assert not await mem.storage.has_rows("semantic")
    from memos.memtypes import Fact

    await mem.add(scope, Fact(subject="Ana", summary="Ana's dog is called Pepper"))
    assert await mem.storage.has_rows("semantic")
    hits = await mem.search("what is the dog called", scope, k=3)
    assert "semantic" in {h.memory_type for h in hits}


async def test_concurrent_searches_count_an_empty_store_once(mem):
    """A busy server's searches all ask about every store at once: those that find a store's
    emptiness unknown share one count of its table instead of each reading it."""
    scope = Scope("u")
    await ingest(mem, scope)
    table = mem.storage.type_table("semantic").table
    counts = []
    count_rows = table.count_rows

    async def counted(*args, **kwargs):
        counts.append(1)
        return await count_rows(*args, **kwargs)

    table.count_rows = counted  # LanceDB's own method, still called: only the reads are tallied
    answers = await asyncio.gather(*(mem.storage.has_rows("semantic") for _ in range(10)))
    assert answers == [False] * 10 and len(counts) == 1
    hits = await asyncio.gather(*(mem.search(f"dog {i}", scope, k=3) for i in range(5)))
    assert all(hits) and len(counts) == 1  # still known empty: no search read it again


async def test_overlapping_neighbour_windows_bring_each_turn_once(mem):
    scope = Scope("u")
    await ingest(mem, scope)
    # D1:3 and D1:4 both rank high; their windows (2-4 and 3-5) overlap on two turns
    hits = await mem.search("Did you take the dog? Pepper loved swimming in the lake", scope, budget_tokens=1600)
    ids = [s for h in hits for s in h.source_ids]
    assert len(ids) == len(set(ids)) and {"D1:2", "D1:3", "D1:4", "D1:5"} <= set(ids)
    from memos.retrieval.packing import render_hits

    assert mem.tokenizer.count(render_hits(hits)) <= 1600 and render_hits(hits).count("Pepper loved swimming") == 1


async def ingest_one_by_one(mem, scope, turns):
    """Each turn in its own call: a reply does not carry the words of its question as context."""
    start = datetime(2024, 7, 3, 18, 0, tzinfo=UTC)
    for i, (speaker, text) in enumerate(turns):
        await mem.ingest(scope, [{"speaker": speaker, "text": text, "id": f"D1:{i + 1}", "timestamp": start + timedelta(seconds=30 * i)}])


async def test_a_top_k_hit_that_asks_brings_the_reply_it_got(mem):
    scope = Scope("u")
    await ingest_one_by_one(mem, scope, [("Ana" if i % 2 == 0 else "Ben", text) for i, text in enumerate(TURNS)])
    [hit] = await mem.search("How is the new job?", scope, k=1)  # k hits: the reply is part of its question's hit
    assert [s for h in [hit, *hit.attached] for s in h.source_ids] == ["D1:7", "D1:8"]  # the question, then its answer
    assert hit.attached[0].parts == {"reply_to": 1.0} and hit.attached[0].record.summary == "Busy, I lead the data team now."
    assert [s for h in await mem.search("How is the new job?", scope, k=1, replies=False) for s in h.source_ids] == ["D1:7"]


async def test_a_statement_or_a_question_followed_by_its_own_speaker_brings_nothing(mem):
    scope = Scope("u")
    await ingest_one_by_one(mem, scope, [("Ana", "Is the ferry to Hvar running today?"), ("Ana", "Never mind, I found the timetable."),
                                         ("Ben", "The glacier hike was cancelled."), ("Ana", "Oh no, what a pity.")])
    assert [s for h in await mem.search("ferry to Hvar", scope, k=1) for s in h.source_ids] == ["D1:1"]
    assert [s for h in await mem.search("glacier hike cancelled", scope, k=1) for s in h.source_ids] == ["D1:3"]


async def test_a_top_k_statement_and_the_answer_to_the_question_it_drew_bring_each_other(mem):
    scope = Scope("u")
    await ingest_one_by_one(mem, scope, [("Ana", "I finally ran my first half marathon last Sunday!"),
                                         ("Ben", "Congratulations! What was your time?"),
                                         ("Ana", "Two hours and eight minutes, faster than I hoped."),
                                         ("Ben", "The glacier hike was cancelled.")])
    [hit] = await mem.search("half marathon", scope, k=1)
    assert [s for h in [hit, *hit.attached] for s in h.source_ids] == ["D1:1", "D1:3"] and hit.attached[0].parts == {"exchange": 1.0}
    [hit] = await mem.search("two hours and eight minutes", scope, k=1)
    assert [s for h in [hit, *hit.attached] for s in h.source_ids] == ["D1:3", "D1:1"]
    assert [s for h in await mem.search("half marathon", scope, k=1, replies=False) for s in h.source_ids] == ["D1:1"]


def test_an_exchange_is_a_statement_a_question_from_someone_else_and_the_same_speakers_answer():
    from types import SimpleNamespace as Turn

    from memos.retrieval.replies import exchange_partners

    def turns(*spoken):
        return [Turn(actor=actor, summary=text) for actor, text in spoken]

    said = turns(("Ana", "I ran a half marathon."), ("Ben", "What was your time?"), ("Ana", "Two hours."),
                 ("Ben", "Nice. And the weather?"), ("Ana", "Sunny."))
    assert exchange_partners(said, 0) == [said[2]] and exchange_partners(said, 4) == [said[2]]
    assert exchange_partners(said, 2) == [said[0], said[4]]  # the answer to one question, the statement for the next
    assert exchange_partners(said, 1) == [] and exchange_partners(said, 3) == []  # a question brings its reply instead
    assert exchange_partners(turns(("Ana", "I ran."), ("Ben", "Nice."), ("Ana", "Two hours.")), 0) == []  # nothing asked
    assert exchange_partners(turns(("Ana", "I ran."), ("Ben", "Your time?"), ("Cy", "Two hours.")), 0) == []  # someone else answered
    assert exchange_partners(turns(("Ana", "I ran."), ("Ana", "Your time?"), ("Ana", "Two hours.")), 0) == []  # asked herself


def test_a_turn_asks_when_it_ends_with_a_question_mark():
    from memos.retrieval.replies import asks

    assert asks("How is the new job?") and asks("房租贵吗？") and asks("真的吗？！") and asks('"Really?" ')
    assert not asks("Yes? I think so.") and not asks("每个月六千五。") and not asks("")
