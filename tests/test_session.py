"""The working context: a long conversation under a hard budget, paging, resuming."""

from __future__ import annotations

import json
import random

import pytest
from memos.memtypes import Fact

from memos import MemoryOS, Scope, StoreUnavailableError
from memos.context.session import MemorySession
from memos.context.window import BudgetPolicy
from memos.tokens import tokenizer_for

TOPICS = ["the garden", "my sister's wedding", "a job interview", "the marathon", "learning Rust", "our trip to Lisbon",
          "the new puppy", "a leaking roof", "a book club", "grandma's recipes"]


def turn_text(i: int, rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    filler = " ".join(rng.choice(["really", "honestly", "also", "then", "maybe", "later", "again"]) for _ in range(rng.randint(5, 60)))
    return f"Turn {i} about {topic}: code word zq{i:04d}x. {filler}."


async def test_200_turns_never_exceed_4000_tokens_and_evicted_turns_stay_findable(db_path, clock):
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock, model="openai:gpt-4o")
    session = await MemorySession.open(mem, Scope("alice", "bot", "s1"), budget=BudgetPolicy(total=4000))
    count = tokenizer_for("openai:gpt-4o").count
    rng = random.Random(7)
    evicted, pressure_seen = [], 0
    for i in range(200):
        clock.advance(minutes=3)
        role = "user" if i % 2 == 0 else "assistant"
        await session.record_turn(role, turn_text(i, rng))
        ctx = await session.compile()
        recount = count(ctx.system_prompt) + sum(count(t.summary) + 4 for t in ctx.recent_turns)
        assert recount == ctx.total_tokens <= 4000, f"step {i}: {recount} tokens"
        assert ctx.recent_turns[-1].summary.startswith(f"Turn {i} ")
        evicted.extend(ctx.evicted)
        pressure_seen += ctx.pressure_notice is not None
    assert len(evicted) > 100 and pressure_seen > 0
    assert session.summary  # the summary absorbed them
    ids = {t.id for t in evicted}
    listed = await session.conversation_search(limit=50 * 200, since=None)
    assert ids <= {t.id for t in listed}
    for turn in rng.sample(evicted, 25):  # and by text: each one's unique code word finds it
        word = turn.summary.split("code word ")[1].split(".")[0]
        found = await session.conversation_search(word, limit=3)
        assert turn.id in [t.id for t in found], word


async def test_the_conversation_resumes_after_a_reopen(db_path, clock):
    scope = Scope("alice", "bot", "s1")
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    session = await MemorySession.open(mem, scope, budget=600)
    for i in range(30):
        await session.record_turn("user" if i % 2 == 0 else "assistant", f"message {i} about the harbour and the boats we saw")
        await session.compile()
    summary, context = session.summary, [t.id for t in session.context]
    assert summary and 0 < len(context) < 30
    again = await MemorySession.open(await MemoryOS.open(db_path, embedder=None, clock=clock), scope, budget=600)
    assert again.summary == summary and [t.id for t in again.context] == context
    other = await MemorySession.open(await MemoryOS.open(db_path, embedder=None, clock=clock), Scope("alice", "bot", "s2"))
    assert other.context == [] and other.summary == ""


async def test_active_retrieval_pages_in_related_memories_not_turns_already_in_context(mem, clock):
    scope = Scope("alice", "bot", "s1")
    await mem.add(Scope("alice", "bot", "s0"), [
        Fact(subject="Alice", summary="Alice is allergic to peanuts"),
        Fact(subject="Alice", summary="Alice's daughter is called Maya"),
    ])
    session = await MemorySession.open(mem, scope, budget=2000)
    await session.record_turn("user", "Can you suggest a snack with peanuts for my afternoon?")
    ctx = await session.compile()
    assert "allergic to peanuts" in ctx.system_prompt
    assert all(h.id not in {t.id for t in ctx.recent_turns} for h in ctx.paged_in)
    assert ctx.sections["memories"] > 0 and ctx.total_tokens <= 2000
    bob = await MemorySession.open(mem, Scope("bob", "bot", "s1"), budget=2000)
    await bob.record_turn("user", "Can you suggest a snack with peanuts?")
    assert "allergic" not in (await bob.compile()).system_prompt  # another user's memories never page in


async def test_a_turn_whose_commit_failed_is_in_no_context_though_the_state_beside_it_named_it(db_path, clock):
    scope = Scope("alice", "bot", "s1")
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    session = await MemorySession.open(mem, scope, budget=2000)
    kept = await session.record_turn("user", "the ferry leaves at nine")
    journal = mem.storage.behind.journal  # where a chat turn is made durable (`memos.store.lancedb.journal`)
    append = journal.append

    def failing(*args, **kwargs):
        raise OSError("simulated: the disk went away")

    journal.append = failing
    with pytest.raises(StoreUnavailableError, match="the disk went away"):
        await session.record_turn("assistant", "and the last one at midnight")
    journal.append = append
    assert [t.id for t in session.context] == [kept.id]
    state = json.loads((await mem.state())[session._state_key])
    named = state["context"] + state["next"]  # saved before the turn's commit, naming the turn that never landed
    assert named[0] == kept.id and len(named) > 1
    again = await MemorySession.open(await MemoryOS.open(db_path, embedder=None, clock=clock), scope, budget=2000)
    assert [t.id for t in again.context] == [kept.id]
    await session.record_turn("assistant", "and the last one at midnight")
    assert [t.summary for t in session.context] == ["the ferry leaves at nine", "and the last one at midnight"]


async def test_turns_recorded_under_the_ids_the_state_names_write_no_state_and_resume_after_a_crash(db_path, clock):
    """A session names its next turns' ids in its saved state (`PLANNED_TURNS`): recording them
    writes no state, yet a process that stops right after any of them resumes with every turn,
    in order, and with none that was never stored."""
    from memos.context.session import PLANNED_TURNS

    scope = Scope("alice", "bot", "s1")
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    session = await MemorySession.open(mem, scope, budget=4000)
    writes = []
    set_state = mem.set_state

    async def counted(key, value, **options):
        writes.append(key)
        await set_state(key, value, **options)

    mem.set_state = counted
    said = []
    for i in range(PLANNED_TURNS + 2):
        clock.advance(minutes=1)
        said.append(f"turn {i}: the ferry leaves at {i} o'clock")
        turn, context = await session.step(said[-1])
        assert context.recent_turns[-1].id == turn.id
        # a new process (the one before stopped here) resumes every stored turn, and only those
        again = await MemorySession.open(await MemoryOS.open(db_path, embedder=None, clock=clock), scope, budget=4000)
        assert [t.summary for t in again.context] == said
    assert len(writes) == 2  # the first turn's (it names the next PLANNED_TURNS), then when those ran out
    # a reopened session draws ids of its own (another process may be resuming the same state)
    await again.record_turn("assistant", "noted")
    assert [t.summary for t in again.context] == [*said, "noted"]
    third = await MemorySession.open(await MemoryOS.open(db_path, embedder=None, clock=clock), scope, budget=4000)
    assert [t.summary for t in third.context] == [*said, "noted"]


async def test_a_message_that_cannot_fit_the_budget_is_refused_and_stores_nothing(db_path, clock):
    """step() used to store the turn beside the compile that then raised BudgetError: the
    refused message stayed in the recall log and in the working context."""
    from conftest import store_hashes

    from memos import BudgetError, InvalidRecordError

    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    session = await MemorySession.open(mem, Scope("alice", "bot", "s1"), budget=1000)
    await session.step("hello there")
    before, context = await store_hashes(mem), list(session.context)
    with pytest.raises(BudgetError, match="the budget is 1000"):
        await session.step("word " * 2000)
    with pytest.raises(BudgetError, match="the budget is 1000"):
        await session.record_turn("user", "word " * 2000, fit=True)
    with pytest.raises(InvalidRecordError, match="the limit is 100,000"):  # was pydantic's own ValidationError
        await session.step("y" * 100_001)
    assert await store_hashes(mem) == before and session.context == context
    reopened = await MemorySession.open(mem, Scope("alice", "bot", "s1"), budget=1000)
    assert [t.summary for t in reopened.context] == [t.summary for t in context]
    _, compiled = await session.step("a short one fits")
    assert compiled.total_tokens <= 1000 and len(session.context) == len(context) + 1


async def test_a_secret_vaulted_after_its_turn_left_the_context_leaves_the_running_summary(db_path, clock):
    """A turn evicted from the working context lives on in the running summary (session state);
    the vault took the secret out of the turn but not out of the summary, which every later
    prompt shows."""
    from memos.memtypes import VaultItem

    secret = "Qz-7781-locker"
    scope = Scope("alice", "bot", "s1")
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    session = await MemorySession.open(mem, scope, budget=700)
    said, _ = await session.step(f"my locker code is {secret}.")
    rng = random.Random(3)
    for i in range(12):
        await session.step(turn_text(i, rng))
        if said.id not in {t.id for t in session.context}:
            break
    assert said.id not in {t.id for t in session.context} and secret in session.summary  # evicted into the summary
    await mem.add(scope, VaultItem(caption="Alice's locker code", secret=secret, source_ids=[said.id]))
    _, compiled = await session.step("what else?")
    assert secret not in compiled.system_prompt and secret not in session.summary
    await mem.storage.flush_queued()
    assert not [k for k, v in (await mem.state()).items() if secret in v]
    reopened = await MemorySession.open(mem, scope, budget=700)
    assert secret not in reopened.summary and "[vault item" in reopened.summary
    files = [p for p in db_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret.encode() in p.read_bytes()]
