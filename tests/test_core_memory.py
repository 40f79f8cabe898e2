"""Core memory blocks: defaults, versioned edits, limits, read-only, sharing, reopening."""

from __future__ import annotations

import pytest

from memos import MemoryOS, Scope
from memos.context.core_memory import BlockSpec, CoreMemory
from memos.exceptions import BlockLimitError, ReadOnlyBlockError, TextNotFoundError, UnknownBlockError


async def test_default_blocks_are_created_once(mem, alice):
    core = CoreMemory(mem, alice)
    labels = [b.label for b in await core.blocks()]
    assert labels == ["persona", "human"]
    assert [b.label for b in await CoreMemory(mem, alice).blocks()] == labels
    assert (await mem.counts(Scope("alice")))["core"] == 2


async def test_edits_are_versioned_in_the_store_and_history(mem, alice):
    core = CoreMemory(mem, alice)
    await core.append("human", "Name: Alice", actor="agent")
    await core.append("human", "Likes: green tea", actor="agent")
    await core.replace("human", "green tea", "oolong", actor="agent")
    block = await core.rethink("human", "Alice; drinks oolong.", actor="agent")
    assert block.value == "Alice; drinks oolong."
    versions = await mem.list(Scope("alice"), "core", status=None, limit=None)
    humans = [b for b in versions if b.label == "human"]
    assert len(humans) == 5 and sum(b.status == "active" for b in humans) == 1
    assert {b.value for b in humans} >= {"Name: Alice", "Name: Alice\nLikes: green tea", "Name: Alice\nLikes: oolong"}
    ops = [e.op for e in await mem.history(Scope("alice")) if e.memory_type == "core"]
    assert ops.count("supersede") == 4
    assert all(e.actor == "agent" for e in await mem.history(Scope("alice")) if e.op == "supersede")


async def test_edits_survive_a_reopen(db_path, embedder, clock, vault_key, alice):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    await CoreMemory(mem, alice).append("human", "Allergic to peanuts", actor="agent")
    again = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    assert (await CoreMemory(again, alice).get("human")).value == "Allergic to peanuts"


@pytest.mark.parametrize("edit, error", [
    (lambda c: c.append("nope", "x", actor="agent"), UnknownBlockError),
    (lambda c: c.append("human", "x" * 2001, actor="agent"), BlockLimitError),
    (lambda c: c.rethink("rules", "new rules", actor="agent"), ReadOnlyBlockError),
    (lambda c: c.replace("human", "not there", "y", actor="agent"), TextNotFoundError),
    (lambda c: c.replace("human", "", "y", actor="agent"), TextNotFoundError),
])
async def test_misuse_is_a_clear_error_and_changes_nothing(mem, alice, snapshot, edit, error):
    core = CoreMemory(mem, alice, defaults=[*CoreMemory(mem, alice).defaults, BlockSpec("rules", value="Be kind.", read_only=True)])
    await core.append("human", "Name: Alice", actor="agent")
    before = await snapshot(mem)
    with pytest.raises(error) as info:
        await edit(core)
    assert await snapshot(mem) == before
    message = str(info.value)
    assert "human" in message or "rules" in message or "nope" in message


async def test_limit_error_says_how_full_the_block_is(mem, alice):
    core = CoreMemory(mem, alice, defaults=[BlockSpec("human", limit=50)])
    await core.append("human", "a" * 45, actor="agent")
    with pytest.raises(BlockLimitError, match=r"limit is 50 and it holds 45"):
        await core.append("human", "more text", actor="agent")


async def test_a_shared_block_edit_is_seen_by_every_agent_of_the_user(mem):
    spec = [BlockSpec("team", "What the whole team knows.", shared=True)]
    planner = CoreMemory(mem, Scope("alice", "planner", "s1"), defaults=spec)
    writer = CoreMemory(mem, Scope("alice", "writer", "s9"), defaults=spec)
    await planner.append("team", "Deadline moved to Friday", actor="planner")
    assert (await writer.get("team")).value == "Deadline moved to Friday"
    await writer.append("team", "Draft is in review", actor="writer")
    assert (await planner.get("team")).value == "Deadline moved to Friday\nDraft is in review"
    other_user = CoreMemory(mem, Scope("bob", "planner", "s1"), defaults=spec)
    assert (await other_user.get("team")).value == ""


async def test_concurrent_edits_of_a_block_through_two_opens_of_the_store_lose_none(mem, db_path, embedder, clock, vault_key, alice):
    """Each edit reads the block and supersedes it: run at once (requests of one server, or two
    server workers: here two opens of one store), each superseded the version they all read, and 12
    appends left 3. Edits of one label now take turns (`MemoryOS.exclusive`); so do the first
    requests that create the default blocks."""
    import asyncio

    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    cores = [CoreMemory(m, alice) for m in (mem, other) for _ in range(2)]  # fresh objects: none has seeded yet
    await asyncio.gather(*(cores[i % 4].append("human", f"fact{i}q", actor="agent") for i in range(12)))
    await asyncio.gather(cores[0].replace("human", "fact0q", "first", actor="agent"),
                         cores[3].replace("human", "fact1q", "second", actor="agent"),
                         cores[1].create("notes", value="one"), cores[2].create("notes", value="two"))
    value = (await CoreMemory(mem, alice).get("human")).value
    assert sorted(value.split("\n")) == sorted(["first", "second", *(f"fact{i}q" for i in range(2, 12))])
    active = await mem.list(Scope("alice"), "core", limit=None)
    assert sorted(b.label for b in active) == ["human", "notes", "persona"]  # one active block a label
