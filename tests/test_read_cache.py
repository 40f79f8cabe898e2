"""Reads remembered at table versions (`memos.store.read_cache`) and the one-plan compile: a step
never shows what another writer changed, and the plan never exceeds the budget."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memos.memtypes import Fact, VaultItem

from memos import MemoryOS, Scope
from memos.context.session import MemorySession
from memos.context.window import BudgetPolicy, SectionSizes, StepInputs, plan_context, plan_step
from memos.exceptions import BudgetError
from memos.retrieval.packing import MemorySize
from memos.store.lancedb.storage import READ_CONSISTENCY
from memos.store.read_cache import FORGET, KEEP, ReadCache


def test_a_read_is_carried_past_this_process_own_add_and_forgotten_otherwise():
    cache = ReadCache()
    cache.check({"t": 5})
    cache.put("n", "t", 3, lambda n, rows: n + len(rows), at=cache.at("t"))
    cache.put("ids", "t", "x", KEEP, at=cache.at("t"))
    cache.wrote("t", 6, [{"a": 1}, {"a": 2}])  # our add took the table from 5 to 6
    assert cache.get("n") == 5 and cache.get("ids") == "x"
    cache.wrote("t", 8, [{"a": 3}])  # version 7 was someone else's
    assert cache.get("n") is FORGET and cache.get("ids") is FORGET
    cache.put("ids", "t", "y", KEEP, at=cache.at("t"))
    cache.wrote("t", 9)  # not an add
    assert cache.get("ids") is FORGET
    cache.put("ids", "t", "z", KEEP, at=cache.at("t"))
    cache.check({"t": 10})  # another process committed
    assert cache.get("ids") is FORGET
    before = cache.at("t")  # a read starts; this process writes while it is in flight
    cache.wrote("t", 11)
    cache.put("ids", "t", "read before the write", KEEP, at=before)
    assert cache.get("ids") is FORGET


async def test_counts_and_turns_follow_other_writers(db_path, clock):
    scope = Scope("alice", "bot", "s1")
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    other = await MemoryOS.open(db_path, embedder=None, clock=clock)  # another process
    session = await MemorySession.open(mem, scope, budget=2000)
    turn = await session.record_turn("user", "my locker code is 4711, remember the blue door")
    first = await session.compile()
    assert "locker" in first.recent_turns[-1].summary
    await mem.check_versions()
    before = await mem.counts(Scope("alice", "bot"), cached=True)
    await mem.add(scope, Fact(subject="Alice", summary="Alice likes blue doors"))  # our own add: carried forward
    assert (await mem.counts(Scope("alice", "bot"), cached=True))["semantic"] == before["semantic"] + 1
    await asyncio.sleep(READ_CONSISTENCY.total_seconds() + 0.2)  # the other process sees our turn
    await other.add(scope, Fact(subject="Alice", summary="Alice owns a bike"))
    await other.update(scope, "episodic", turn.id, {"summary": "my locker code is [redacted], remember the blue door"})
    await asyncio.sleep(READ_CONSISTENCY.total_seconds() + 0.2)  # what LanceDB promises for another process's commits
    await session.record_turn("assistant", "Noted.")
    again = await session.compile()
    assert "4711" not in again.recent_turns[0].summary and "[redacted]" in again.recent_turns[0].summary
    assert (await mem.counts(Scope("alice", "bot"), cached=True))["semantic"] == before["semantic"] + 2


@pytest.mark.parametrize("shared", [True, False], ids=["shared-table", "per-store"])
async def test_a_store_empty_in_the_scope_is_searched_again_once_a_record_lands_in_it(db_path, clock, vault_key, shared):
    """Per store (the shared search table behind): a store the step's counts find empty is not
    queried, and is again once a record lands in it. Through the shared table (the vault's
    captions are mirrored), the same records are found with no query of the vault's own."""
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock, vault_key_file=vault_key)
    other = await MemoryOS.open(db_path, embedder=None, clock=clock, vault_key_file=vault_key)  # another process
    await other.add(Scope("bob", "bot"), VaultItem(caption="Bob's gym locker code", secret="1234"))  # the table is not empty
    mem.storage.search.behind = not shared
    searched: list[str] = []
    text_search = mem.storage.text_search

    async def counted(name, *args, **kwargs):
        searched.append(name)
        return await text_search(name, *args, **kwargs)

    mem.storage.text_search = counted

    async def step(session: MemorySession) -> list[str]:
        searched.clear()
        await session.record_turn("user", "What is my gym locker code?")
        context = await session.compile()
        return [h.record.caption for h in context.paged_in if h.memory_type == "vault"]

    alice = await MemorySession.open(mem, Scope("alice", "bot", "s1"), budget=2000)
    assert await step(alice) == [] and "vault" not in searched  # alice has nothing there: not searched
    await mem.add(Scope("alice", "bot"), VaultItem(caption="Alice's gym locker code", secret="9876"))  # this process's write
    assert await step(alice) == ["Alice's gym locker code"] and ("vault" in searched) is not shared
    carol = await MemorySession.open(mem, Scope("carol", "bot", "s1"), budget=2000)
    assert await step(carol) == [] and "vault" not in searched
    await other.add(Scope("carol", "bot"), VaultItem(caption="Carol's gym locker code", secret="5555"))  # another's write
    await asyncio.sleep(READ_CONSISTENCY.total_seconds() + 0.2)  # what LanceDB promises for another process's commits
    assert await step(carol) == ["Carol's gym locker code"] and ("vault" in searched) is not shared


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(256, 9000),
    instructions=st.integers(0, 3000),
    core=st.integers(0, 3000),
    metadata=st.integers(0, 200),
    summary=st.integers(0, 3000),
    turns=st.lists(st.integers(1, 1500), min_size=1, max_size=60),
    memories=st.lists(st.tuples(st.integers(1, 800), st.sampled_from(["", "a", "b"]), st.integers(0, 9)), max_size=40),
    notice=st.integers(0, 80),
)
def test_the_step_plan_never_exceeds_the_budget(total, instructions, core, metadata, summary, turns, memories, notice):
    policy = BudgetPolicy(total=total)
    inputs = StepInputs(instructions=instructions, core=core, metadata=metadata, summary=summary, summary_frame=6,
                        turns=turns, memories=[MemorySize(t, g, h if g else 0) for t, g, h in memories], memory_frame=7,
                        notice=notice)
    try:
        plan = plan_step(inputs, policy)
    except BudgetError:
        assert instructions + core + turns[-1] > total
        return
    same = plan_context(SectionSizes(instructions, core, metadata, summary + 6 if summary else 0, turns, (), notice), policy)
    assert plan.evict == same.evict  # evictions depend on the turns alone
    assert sum(plan.sections.values()) <= total
    assert plan.summary_tokens <= max(summary, total) and plan.evict < len(turns)
    assert plan.memory_tokens == plan.sections["memories"]
    assert (plan.notice_percent is None) == (not same.pressure)
