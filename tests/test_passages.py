"""Long turns are indexed as passages (`memos.passages`): each with its own vector and the turn's
provenance; a budgeted search packs the relevant passage where the whole turn would not fit;
nothing of a passage outlives its turn."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from memos.memtypes import Episode, Passage

from memos import MemoryOS, Scope
from memos.passages import LONG_TURN_TOKENS, split_passages
from memos.portability import export_scope
from memos.retrieval.packing import render_hits

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.fixture
async def mem(db_path, embedder, clock, vault_key) -> MemoryOS:
    """A memory with the passage store (opt-in)."""
    return await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key, types=[Passage])
FILLER = [f"Step {i}: whisk the eggs with sugar, fold in the flour gently and rest the batter for a while before baking it." for i in range(30)]
ESSAY = " ".join(FILLER[:15] + ["For a beginner's sourdough loaf, the best hydration is about 70 percent water by weight."] + FILLER[15:])


async def _long_turn(mem: MemoryOS, scope: Scope) -> tuple[Episode, Episode]:
    question, answer = await mem.ingest(scope, [
        {"speaker": "user", "text": "How do I bake things at home?", "id": "D1:1", "timestamp": WHEN},
        {"speaker": "assistant", "text": ESSAY, "id": "D1:2", "timestamp": WHEN.replace(minute=57)},
    ])
    return question, answer


def test_english_splits_at_sentence_ends_and_keeps_every_word(mem: MemoryOS):
    count = mem.tokenizer.count
    parts = split_passages(ESSAY, count, target=60)
    assert len(parts) > 5
    assert all(p.endswith(".") for p in parts)  # cut after a sentence, never inside one
    assert all(count(p) <= 60 for p in parts[:-1])
    assert " ".join(parts).split() == ESSAY.split()


def test_chinese_splits_at_chinese_sentence_punctuation_and_newlines(mem: MemoryOS):
    count = mem.tokenizer.count
    text = "".join(f"第{i}步：把鸡蛋和糖打匀，再轻轻拌入面粉，静置一会儿。" for i in range(20)) + "\n新手做酸面包，含水量大约百分之七十最合适！" + "".join(
        f"第{i}个问题：面团太黏怎么办？" for i in range(10))
    parts = split_passages(text, count, target=60)
    assert len(parts) > 3
    assert all(p[-1] in "。！？" for p in parts)
    assert all(count(p) <= 60 for p in parts[:-1])
    assert "".join(parts) == text.replace("\n", "")


async def test_a_long_turn_is_stored_with_passages_that_cite_it(mem: MemoryOS, alice: Scope):
    question, answer = await _long_turn(mem, alice)
    assert mem.tokenizer.count(ESSAY) > LONG_TURN_TOKENS
    passages = await mem.list(alice, Passage)
    assert len(passages) >= 3
    assert {p.turn_id for p in passages} == {answer.id}  # the short question has none
    assert sorted(p.position for p in passages) == list(range(len(passages)))
    assert all(p.source_ids == ["D1:2"] and p.actor == "assistant" and p.occurred_at == answer.occurred_at for p in passages)
    assert " ".join(p.summary for p in sorted(passages, key=lambda p: p.position)).split() == ESSAY.split()
    whole = await mem.get(alice, Episode, answer.id)
    assert whole.summary == ESSAY
    top = await mem.search("what hydration for a beginner sourdough loaf", alice, k=3)
    assert all(h.memory_type != "passage" for h in top)  # a top-k search returns whole turns


async def test_a_small_budget_buys_the_relevant_passage_of_a_long_turn(mem: MemoryOS, alice: Scope):
    _, answer = await _long_turn(mem, alice)
    budget = 120
    assert mem.tokenizer.count(f"assistant: {ESSAY}") > budget  # the whole turn cannot fit
    hits = await mem.search("what hydration for a beginner sourdough loaf", alice, budget_tokens=budget)
    found = [h for h in hits if "70 percent" in h.text]
    assert found and found[0].memory_type == "passage" and found[0].source_ids == ["D1:2"]
    rendered = render_hits(hits)
    assert mem.tokenizer.count(rendered) <= budget
    assert "[8 May 2023]" in rendered and "assistant: …" in rendered  # the turn's date and speaker
    large = int(mem.tokenizer.count(f"assistant: {ESSAY}") / mem.ranking.passage_whole_share) + 50  # the turn within its share
    big = await mem.search("what hydration for a beginner sourdough loaf", alice, budget_tokens=large)
    assert [h.id for h in big if h.memory_type == "episodic" and h.id == answer.id]  # a large budget packs it whole
    assert not [h for h in big if h.memory_type == "passage"]


async def _remnants(mem: MemoryOS, ids: list[str], turn_id: str) -> dict[str, int]:
    storage = mem.storage
    quoted = ", ".join(f"'{i}'" for i in ids)
    rows = 0
    for name in storage.tables:
        rows += len(await storage.rows(name, f"id IN ({quoted})"))
    return {
        "rows": rows,
        "shared": await storage.search.table.count_rows("key IN ({})".format(", ".join(f"'{n}:{i}'" for n in storage.tables for i in ids))),
        "passages": len(await storage.rows("passage", f"turn_id = '{turn_id}'")),
        "history": len(await storage.raw_history(f"record_id IN ({quoted})")),
        "meta": sum(any(i in k or i in v for i in ids) for k, v in (await storage.get_meta()).items()),
    }


async def test_deleting_a_turn_leaves_nothing_of_its_passages(mem: MemoryOS, alice: Scope):
    question, answer = await _long_turn(mem, alice)
    ids = [p.id for p in await mem.list(alice, Passage)]
    assert ids and (await _remnants(mem, ids, answer.id))["history"] == len(ids)
    await mem.delete(alice, "episodic", answer.id)
    assert await _remnants(mem, [*ids, answer.id], answer.id) == {"rows": 0, "shared": 0, "passages": 0, "history": 0, "meta": 0}
    exported = "\n".join(await export_scope(mem, alice))
    assert "70 percent" not in exported and answer.id not in exported
    assert [e.id for e in await mem.list(alice, Episode)] == [question.id]
    assert all("70 percent" not in h.text for h in await mem.search("beginner sourdough hydration", alice, budget_tokens=500))


async def test_erasing_a_scope_erases_its_passages(mem: MemoryOS, alice: Scope, bob: Scope):
    await _long_turn(mem, alice)
    await _long_turn(mem, bob)
    removed = await mem.erase(alice)
    assert removed["passage"] >= 3
    assert await mem.list(alice, Passage) == []
    assert len(await mem.list(bob, Passage)) == removed["passage"]


async def test_a_superseded_or_archived_turn_takes_its_passages_out_of_search(mem: MemoryOS, alice: Scope):
    question, answer = await _long_turn(mem, alice)
    query = "what hydration for a beginner sourdough loaf"
    assert any("70 percent" in h.text for h in await mem.search(query, alice, budget_tokens=120))
    await mem.supersede(alice, "episodic", answer.id, Episode(summary="Bake at 230 degrees.", actor="assistant", occurred_at=WHEN))
    assert await mem.list(alice, Passage) == []  # none active: they follow the turn's status
    assert {p.status for p in await mem.list(alice, Passage, status=None)} == {"superseded"}
    for budget in (120, 500, 4000):
        assert all("70 percent" not in h.text for h in await mem.search(query, alice, budget_tokens=budget))
    other = Scope("carol")
    _, kept = await _long_turn(mem, other)
    await mem.archive(other, "episodic", kept.id)
    assert all("70 percent" not in h.text for h in await mem.search(query, other, budget_tokens=120))


async def test_an_updated_turn_rebuilds_its_passages(mem: MemoryOS, alice: Scope):
    _, answer = await _long_turn(mem, alice)
    old = {p.id for p in await mem.list(alice, Passage)}
    revised = ESSAY.replace("about 70 percent water", "about 65 percent water")
    await mem.update(alice, "episodic", answer.id, {"summary": revised})
    passages = sorted(await mem.list(alice, Passage), key=lambda p: p.position)
    assert passages and not {p.id for p in passages} & old
    assert " ".join(p.summary for p in passages).split() == revised.split()
    hits = await mem.search("what hydration for a beginner sourdough loaf", alice, budget_tokens=120)
    assert any("65 percent" in h.text for h in hits) and all("70 percent" not in h.text for h in hits)
    await mem.update(alice, "episodic", answer.id, {"summary": "Seventy percent."})  # no longer long: no passages
    assert await mem.list(alice, Passage, status=None) == []


async def test_a_passage_and_its_turn_are_packed_once(mem: MemoryOS, alice: Scope):
    _, answer = await _long_turn(mem, alice)
    for budget in (120, 500, 1000, 4000):
        hits = await mem.search("what hydration for a beginner sourdough loaf", alice, budget_tokens=budget)
        forms = [h for h in hits if h.id == answer.id or getattr(h.record, "turn_id", "") == answer.id]
        assert len(forms) == 1, budget  # the whole turn or one passage of it, never both nor two passages
