"""One active core block per label and scope, whatever adds it.

`CoreMemory` reads a scope's blocks by label: a second active block of a label, added through
`MemoryOS.add` (or the server's and MCP's adds, which call it) or an import, took the first one's
place in the prompt, and edits went to either. Such an add is refused with a memos error naming
the label and the edit to make instead, and stores nothing. A shared block and an agent's own
block of one label are two scopes (the own one wins in the agent's prompt, by design), and a
block's next version (supersede, every core-memory edit) keeps its label.
"""

from __future__ import annotations

import asyncio

import pytest
from memos.memtypes import CoreBlock

from memos import MemoryOS, Scope
from memos.context.core_memory import SHARED_TAG, CoreMemory
from memos.exceptions import InvalidRecordError
from memos.portability import export_scope, import_lines

AGENT = Scope("alice", "assistant")


async def test_a_second_block_of_a_label_is_refused_and_nothing_is_stored(mem, snapshot):
    core = CoreMemory(mem, AGENT)
    await core.append("human", "Name: Alice", actor="agent")
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match=r"'human'.*core_memory_append") as info:
        await mem.add(AGENT, CoreBlock(label="human", value="Name: Bob"))
    assert "alice/assistant" in str(info.value)
    assert await snapshot(mem) == before
    assert (await core.get("human")).value == "Name: Alice"
    await core.append("human", "Likes tea", actor="agent")  # edits still reach the one block
    assert (await CoreMemory(mem, AGENT).get("human")).value == "Name: Alice\nLikes tea"


async def test_two_blocks_of_one_label_in_one_add_are_refused(mem, snapshot):
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match=r"'notes'.*twice"):
        await mem.add(AGENT, [CoreBlock(label="notes", value="one"), CoreBlock(label="todo"), CoreBlock(label="notes", value="two")])
    assert await snapshot(mem) == before


async def test_a_shared_block_and_an_agents_own_block_of_one_label_live_side_by_side(mem):
    shared = Scope("alice", "")
    await mem.add(shared, CoreBlock(label="team", value="shared notes", tags=[SHARED_TAG]))
    await mem.add(Scope("alice", "planner"), CoreBlock(label="team", value="planner's own"))
    assert (await CoreMemory(mem, Scope("alice", "planner")).get("team")).value == "planner's own"
    assert (await CoreMemory(mem, Scope("alice", "writer")).get("team")).value == "shared notes"
    with pytest.raises(InvalidRecordError, match="'team'"):
        await mem.add(shared, CoreBlock(label="team", value="another", tags=[SHARED_TAG]))
    archived = CoreBlock(label="team", value="old notes", status="archived")  # not in any prompt: no clash
    await mem.add(Scope("alice", "planner"), archived)


async def test_a_block_superseded_keeps_its_label_and_a_new_label_is_added_instead(mem):
    core = CoreMemory(mem, AGENT)
    human = await core.get("human")
    successor = await mem.supersede(AGENT, CoreBlock, human.id, CoreBlock(label="human", value="Alice, from Lisbon"))
    assert (await core.get("human")).id == successor.id
    with pytest.raises(InvalidRecordError, match=r"'human'.*'persona'"):
        await mem.supersede(AGENT, CoreBlock, successor.id, CoreBlock(label="persona", value="I am a pirate"))
    active = await mem.list(AGENT, CoreBlock, limit=None)
    assert sorted(b.label for b in active) == ["human", "persona"]


async def test_adds_of_one_label_at_once_through_two_opens_store_one_block(mem, db_path, embedder, clock, vault_key):
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    adds = [m.add(AGENT, CoreBlock(label="notes", value=f"v{i}")) for i in range(3) for m in (mem, other)]
    outcomes = await asyncio.gather(*adds, return_exceptions=True)
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, InvalidRecordError) for o in outcomes if isinstance(o, BaseException))
    assert [b.label for b in await mem.list(AGENT, CoreBlock, limit=None)] == ["notes"]


async def test_an_import_beside_blocks_of_the_same_labels_is_refused(mem, snapshot):
    await CoreMemory(mem, AGENT).append("human", "Name: Alice", actor="agent")
    await CoreMemory(mem, Scope("bob", "assistant")).blocks()
    exported = list(await export_scope(mem, Scope("alice")))
    await import_lines(mem, exported)  # the same blocks again (their ids): replaced, not doubled
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match=r"'persona'|'human'"):
        await import_lines(mem, exported, user_id="bob")
    assert await snapshot(mem) == before
    assert sorted(b.label for b in await mem.list(Scope("alice"), CoreBlock, limit=None)) == ["human", "persona"]


async def test_the_servers_add_of_a_taken_label_is_a_422_naming_it(mem, snapshot):
    import httpx2 as httpx

    from memos.serve import ServeConfig, create_app

    admin = "admin-key-for-tests-0123456789"
    app = create_app(ServeConfig(memory=mem, admin_key=admin))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://memos") as http:
        made = await http.post("/admin/keys", json={"user_id": "alice"}, headers={"Authorization": f"Bearer {admin}"})
        alice = {"Authorization": f"Bearer {made.json()['token']}"}
        assert [b["label"] for b in (await http.get("/v1/core", headers=alice)).json()["blocks"]] == ["persona", "human"]
        before = await snapshot(mem)
        for path, body in (("/v1/stores/core", {"label": "human", "value": "x"}),
                           ("/v1/records", {"records": [{"store": "core", "fields": {"label": "persona"}}]})):
            r = await http.post(path, json=body, headers=alice)
            assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_record", r.text
            assert "core_memory_append" in r.json()["error"]["message"]
        assert await snapshot(mem) == before


async def test_an_update_cannot_relabel_a_block_onto_another(mem, snapshot):
    """`update` could set a block's label to another block's: two active blocks of one label, one hidden."""
    core = CoreMemory(mem, AGENT)
    await core.append("human", "Name: Alice", actor="agent")
    [notes] = await mem.add(AGENT, CoreBlock(label="notes", value="todo: tea"))
    before = await snapshot(mem)
    for label in ("human", "plans"):
        with pytest.raises(InvalidRecordError, match=r"cannot be relabelled"):
            await mem.update(AGENT, "core", notes.id, {"label": label})
    assert await snapshot(mem) == before
    assert (await mem.update(AGENT, "core", notes.id, {"label": "notes", "value": "todo: cake"})).value == "todo: cake"
