"""Index builds keep search exact and scoped; stores from before a schema change still open;
a turn is found by the words of the turn it answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import lancedb
import pyarrow as pa
from memos.memtypes import Episode, Fact

from memos import MemoryOS, Scope
from memos.store.lancedb.maintenance import maintain
from memos.store.schema import arrow_schema


async def test_maintenance_indexes_scope_columns_and_vectors_without_changing_results(mem):
    for user in ("ann", "ben"):
        await mem.add(Scope(user), [Fact(subject=user, summary=f"{user} fact {i} about gardening tomatoes {i % 7}") for i in range(40)])
    await mem.add(Scope("ann"), Fact(subject="ann", summary="ann keeps bees on the roof"))
    [other_agent] = await mem.add(Scope("ann", "helper"), Fact(subject="ann", summary="ann keeps bees on the roof, says the helper"))
    [archived] = await mem.add(Scope("ann"), Fact(subject="ann", summary="ann kept bees on the roof once"))
    await mem.archive(Scope("ann"), "semantic", archived.id)
    before = [h.id for h in await mem.search("bees on the roof", Scope("ann", ""), k=5)]
    report = await maintain(mem.storage, min_rows=30)
    assert report["indexes"]["semantic"].startswith("btree(user_id), bitmap(agent_id), bitmap(status), btree(id), ivf_hnsw_sq")
    assert report["indexes"]["_search"].startswith("btree(user_id), bitmap(agent_id), bitmap(status), bitmap(memory_type), btree(key), ivf_hnsw_sq")
    indexes = {tuple(i.columns): i.index_type for i in await mem.storage.type_table("semantic").table.list_indices()}
    assert indexes[("user_id",)] == "BTree" and indexes[("agent_id",)] == indexes[("status",)] == "Bitmap" and ("vector",) in indexes
    after = await mem.search("bees on the roof", Scope("ann", ""), k=5)
    assert after[0].id == before[0] and {h.record.user_id for h in after} == {"ann"}
    assert {other_agent.id, archived.id}.isdisjoint(h.id for h in after)  # agent and status still filter
    assert other_agent.id in {h.id for h in await mem.search("bees on the roof", Scope("ann", "helper"), k=5)}
    assert {h.record.user_id for h in await mem.search("gardening tomatoes", Scope("ben"), k=50)} == {"ben"}
    again = await maintain(mem.storage, min_rows=30)  # idempotent: nothing rebuilt
    assert again["indexes"]["semantic"].endswith("indexes present")


async def test_a_store_written_before_a_field_was_added_opens_and_gains_the_column(db_path, embedder, clock, vault_key):
    old_schema = pa.schema([f for f in arrow_schema(Episode, embedder.dim) if f.name != "context"])
    conn = await lancedb.connect_async(str(db_path))
    when = datetime(2024, 3, 1, tzinfo=UTC)
    row = {f.name: None for f in old_schema} | {
        "id": "old1", "user_id": "u", "agent_id": "", "session_id": "", "text": "u: we adopted a cat named Miso",
        "summary": "we adopted a cat named Miso", "actor": "u", "event_type": "message", "details": "",
        "occurred_at": when, "created_at": when, "updated_at": when, "importance": 0.5, "access_count": 0,
        "status": "active", "source_ids": ["m1"], "tags": [], "vector": await embedder.embed_query("u: we adopted a cat named Miso"),
    }
    await conn.create_table("episodic", [row], schema=old_schema)
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    assert "context" in (await mem.storage.type_table("episodic").table.schema()).names
    [hit] = await mem.search("cat named Miso", Scope("u"), k=1)
    assert hit.id == "old1" and hit.record.context == ""
    await mem.ingest(Scope("u"), [{"text": "what is the cat's name?", "id": "m2"}, {"text": "Miso", "id": "m3"}])
    assert len(await mem.list(Scope("u"), "episodic")) == 3


async def test_a_reply_is_found_by_the_words_of_the_turn_it_answers(mem, embedder):
    start = datetime(2024, 5, 1, 18, 0, tzinfo=UTC)
    turns = [("Ana", "How do you unwind after a long week?"), ("Ben", "Running by the river, every Saturday."),
             ("Ana", "Did you see the match?"), ("Ben", "Only the second half, sadly.")]
    episodes = await mem.ingest(Scope("u"), [{"speaker": s, "text": t, "id": f"D1:{i}", "timestamp": start + timedelta(seconds=30 * i)}
                                             for i, (s, t) in enumerate(turns)])
    assert [e.context for e in episodes] == ["", "Ana: How do you unwind after a long week?", "Ben: Running by the river, every Saturday.",
                                             "Ana: Did you see the match?"]
    hits = await mem.search("unwind", Scope("u"), k=4, types=["episodic"])
    by_id = {h.source_ids[0]: h for h in hits}
    assert "text_rank" in by_id["D1:1"].parts  # the reply matches a word only its question has
    assert "unwind" not in by_id["D1:1"].record.render()  # context is for finding, not for the prompt
    [row] = await mem.storage.rows("episodic", f"id = '{episodes[1].id}'", columns=["vector"])
    expected = await embedder.embed_documents([episodes[1].index_text()])
    assert max(abs(a - b) for a, b in zip(row["vector"], expected[0], strict=True)) < 1e-5  # the vector is of the turn alone


async def test_maintenance_builds_a_vector_index_again_once_optimizes_split_it_into_many_parts(mem):
    """Each optimize adds a table's new rows to its vector index as one more part, and their rows
    stay in fragments of their own; every vector query then searches every part. Past
    `max_index_parts` the maintenance job builds the index again, whole."""
    ann = Scope("ann")
    await mem.add(ann, [Fact(subject="ann", summary=f"ann fact {i} about gardening tomatoes {i % 7}") for i in range(40)])
    await maintain(mem.storage, min_rows=30)
    table = mem.storage.type_table("semantic").table
    name = next(i.name for i in await table.list_indices() if i.columns == ["vector"])
    for n in range(3):
        await mem.add(ann, Fact(subject="ann", summary=f"ann keeps bees on roof number {n}"))
        await mem.storage.write(table, table.optimize)
    assert (await table.index_stats(name)).num_indices == 4
    report = await maintain(mem.storage, min_rows=30, max_index_parts=2)
    assert "rebuilt from 4 parts" in report["indexes"]["semantic"]
    assert (await table.index_stats(name)).num_indices == 1
    hits = await mem.search("bees on roof number 2", ann, k=3)
    assert hits[0].record.summary == "ann keeps bees on roof number 2"
    again = await maintain(mem.storage, min_rows=30, max_index_parts=2)
    assert again["indexes"]["semantic"].endswith("indexes present")
