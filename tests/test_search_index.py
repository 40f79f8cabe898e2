"""The shared search table (`memos.store.lancedb.search_index`): mirrored on every write (each record whole,
so a search needs no second read), repaired after a crash, rebuilt when missing, never holding
a secret, and never a way across scopes."""

from __future__ import annotations

import json
from pathlib import Path

from memos.memtypes import Episode, Fact, Procedure, VaultItem

from memos import MemoryOS, Scope
from memos.bench.scale import HashedTokens
from memos.portability import export_scope, forget_user, import_lines
from memos.store.lancedb.search_index import RECORD, SEARCH_META, ranked_row, ranked_rows


async def shared_rows(mem: MemoryOS) -> dict[tuple[str, str], dict]:
    rows = await mem.storage.search.table.query().select(["memory_type", "id", "user_id", "status", "updated_at", "text",
                                                           RECORD]).to_list()
    return {(r["memory_type"], r["id"]): r for r in rows}


async def typed_rows(mem: MemoryOS) -> dict[tuple[str, str], dict]:
    out = {}
    for name in mem.storage.search.types:
        for r in await mem.storage.rows(name, None, columns=mem.storage.type_table(name).result_columns):
            out[(name, r["id"])] = r
    return out


async def assert_mirrored(mem: MemoryOS) -> None:
    """Every record of the mirrored stores is in the shared table as it is in its own: its
    filter columns, its text and the whole record a search returns (secret fields blank)."""
    shared, typed = await shared_rows(mem), await typed_rows(mem)
    assert set(shared) == set(typed)
    texts = [row[RECORD] for row in shared.values()]
    assert ranked_rows(texts) == [ranked_row(text) for text in texts]  # a query's rows parsed at once, the same
    for key, row in typed.items():
        assert {k: shared[key][k] for k in ("user_id", "status", "updated_at", "text")} == \
            {k: row[k] for k in ("user_id", "status", "updated_at", "text")}, key
        secret = mem.storage.type_table(key[0]).record_type.secret_fields
        ranked = ranked_row(shared[key][RECORD])
        assert (ranked["memory_type"], ranked["id"], ranked["importance"]) == (*key, row["importance"])
        assert mem.storage.search.typed_row(key[0], ranked[RECORD]) == {k: "" if k in secret else v for k, v in row.items()}, key


def counting(mem: MemoryOS) -> list[str]:
    """Count the shared table's queries (the search went through it)."""
    calls: list[str] = []
    index = mem.storage.search
    vector_search, text_search = index.vector_search, index.text_search

    async def vec(*args, **kwargs):
        calls.append("vector")
        return await vector_search(*args, **kwargs)

    async def txt(*args, **kwargs):
        calls.append("text")
        return await text_search(*args, **kwargs)

    index.vector_search, index.text_search = vec, txt
    return calls


async def test_every_write_path_is_mirrored_and_no_secret_enters(mem, alice, bob):
    assert set(mem.storage.search.types) == {"episodic", "semantic", "procedural", "resource", "relation", "vault"}  # not core, entity
    one = await mem.add(alice, Fact(subject="alice", summary="alice keeps bees on the roof"))
    batch = await mem.add(alice, [Episode(summary=f"turn {i} about the orchard") for i in range(5)]
                          + [Procedure(summary="repot a fern", steps=["water", "lift", "replant"])])
    await mem.add(bob, Fact(subject="bob", summary="bob keeps bees too"))
    door, = await mem.add(alice, VaultItem(caption="alice's door code", secret="9137-vault-secret"))
    await assert_mirrored(mem)
    await mem.update(alice, "semantic", one[0].id, {"summary": "alice keeps three hives on the roof"})
    await mem.update(alice, "vault", door.id, {"secret": "2468-vault-secret", "sensitivity": "medium"}, approved_by="alice")
    await mem.archive(alice, "episodic", batch[0].id)
    await mem.delete(alice, "episodic", batch[1].id)
    await assert_mirrored(mem)
    shared = await shared_rows(mem)
    assert shared[("semantic", one[0].id)]["text"].count("three hives") == 1
    assert shared[("episodic", batch[0].id)]["status"] == "archived"
    assert ("episodic", batch[1].id) not in shared
    assert "door code" in shared[("vault", door.id)]["text"] and "secret" not in shared[("vault", door.id)][RECORD]
    ciphertext = (await mem.stored(alice, "vault", door.id)).secret
    files = [p for p in Path(mem.storage.uri).glob("_search*/**/*") if p.is_file()]
    assert not any(b"vault-secret" in p.read_bytes() or ciphertext.encode() in p.read_bytes() for p in files)
    calls = counting(mem)
    hits = await mem.search("door code", alice, k=3)
    assert sorted(calls) == ["text", "vector"] and hits[0].id == door.id and hits[0].record.secret == ""
    assert hits[0].record.sensitivity == "medium"

    await forget_user(mem, "alice")
    await assert_mirrored(mem)
    assert {r["user_id"] for r in (await shared_rows(mem)).values()} == {"bob"}
    files = [p for p in Path(mem.storage.uri).glob("_search*/**/*") if p.is_file()]
    assert files and not any(b"bees on the roof" in p.read_bytes() or b"three hives" in p.read_bytes()
                             or b"door code" in p.read_bytes() for p in files)


async def test_a_search_makes_one_vector_and_one_text_query_and_never_crosses_scopes(mem, alice, bob):
    await mem.add(alice, [Fact(subject="alice", summary="the blue kettle is in the attic"),
                          Episode(summary="we talked about the blue kettle")])
    await mem.add(bob, [Fact(subject="bob", summary="the blue kettle is in bob's garage"),
                        Episode(summary="bob said the blue kettle whistles"),
                        Procedure(summary="descale the blue kettle", steps=["vinegar", "boil"])])
    calls = counting(mem)
    reads: list[str] = []
    take, rows = mem.storage.take, mem.storage.rows

    async def counted_take(*args, **kwargs):
        reads.append("take")
        return await take(*args, **kwargs)

    async def counted_rows(*args, **kwargs):
        reads.append("rows")
        return await rows(*args, **kwargs)

    mem.storage.take, mem.storage.rows = counted_take, counted_rows
    for scope, other in ((alice, "bob"), (bob, "alice")):
        hits = await mem.search("blue kettle", scope, k=10)
        assert hits and all(h.record.user_id == scope.user_id for h in hits)
        assert not any(other in h.record.user_id for h in hits)
        assert reads == []  # the winners come whole from the shared table's rows: no read by id
        for hit in hits:  # ... and are the records their own stores hold
            assert [hit.record] == await mem.get_many(scope, hit.memory_type, [hit.id])
        reads.clear()
    assert sorted(calls) == ["text", "text", "vector", "vector"]
    narrow = await mem.search("blue kettle", Scope("alice", "nobody"), k=10)  # agent and session are filters too
    assert narrow == []


async def test_the_store_filter_is_left_out_only_when_it_would_keep_every_row(mem, alice):
    await mem.add(alice, [Fact(subject="alice", summary="the red canoe is in the boathouse"),
                          Episode(summary="we paddled the red canoe"), Procedure(summary="patch the red canoe", steps=["sand", "glue"])])
    wheres: list[str] = []
    index = mem.storage.search
    vector_search = index.vector_search

    async def captured(vector, where, limit, **kwargs):
        wheres.append(where)
        return await vector_search(vector, where, limit, **kwargs)

    index.vector_search = captured
    everything = await mem.search("red canoe", alice, k=10)  # every mirrored store searched, or empty
    assert {h.memory_type for h in everything} == {"semantic", "episodic", "procedural"} and "memory_type" not in wheres[-1]
    facts = await mem.search("red canoe", alice, types=["semantic", "procedural"], k=10)
    assert {h.memory_type for h in facts} == {"semantic", "procedural"} and "memory_type" in wheres[-1]


async def test_a_write_the_shared_table_missed_is_still_found_and_caught_up_on_open(db_path, embedder, alice, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    kept = await mem.add(alice, Fact(subject="alice", summary="the spare key is under the green pot"))
    table = mem.storage.search.table

    async def crash(*args, **kwargs):  # the process dies between the store's commit and the mirror's
        raise OSError("simulated crash between the two commits")

    def crash_now(*args, **kwargs):
        raise OSError("simulated crash between the two commits")

    table.add, table.merge_insert = crash, crash_now
    lost = await mem.add(alice, Fact(subject="alice", summary="the spare key moved to the red pot"))
    edited = await mem.update(alice, "semantic", kept[0].id, {"summary": "the old key is under the green pot"})
    assert mem.storage.search.behind
    hits = await mem.search("spare key red pot", alice, k=5)  # per-store queries meanwhile: nothing acknowledged is lost
    assert lost[0].id in {h.id for h in hits}

    reopened = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    assert not reopened.storage.search.behind
    await assert_mirrored(reopened)
    calls = counting(reopened)
    hits = await reopened.search("spare key red pot", alice, k=5)
    assert calls and lost[0].id in {h.id for h in hits}
    assert (await shared_rows(reopened))[("semantic", edited.id)]["updated_at"] == edited.updated_at


async def test_rows_left_over_or_doubled_are_removed_on_open(db_path, embedder, alice, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    fact, gone = await mem.add(alice, [Fact(subject="a", summary="tea at five"), Fact(subject="b", summary="coffee at nine")])
    await mem.storage.flush_queued()  # the adds' journaled rows are in their tables before the table is edited
    index = mem.storage.search
    await mem.storage.tables["semantic"].table.delete(f"id = '{gone.id}'")  # deleted, then the crash
    row = (await mem.storage.rows("semantic", f"id = '{fact.id}'"))[0]
    await index.table.add(index.project("semantic", [row]))  # a repair that raced a writer
    reopened = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    await assert_mirrored(reopened)
    assert [h.id for h in await reopened.search("tea coffee", alice, k=5)] == [fact.id]


async def test_a_missing_shared_table_is_rebuilt_and_a_new_embedder_rebuilds_it(db_path, embedder, alice, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    fact, = await mem.add(alice, Fact(subject="alice", summary="the canoe is blue"))
    name = json.loads((await mem.storage.get_meta())[SEARCH_META])["table"]
    await mem.storage.conn.drop_table(name)
    reopened = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    assert reopened.storage.search.table.name != name
    await assert_mirrored(reopened)
    await reopened.reindex(HashedTokens())
    assert reopened.storage.search.table.name not in (name,)
    schema = await reopened.storage.search.table.schema()
    assert schema.field("vector").type.list_size == HashedTokens().dim
    await assert_mirrored(reopened)
    hits = await reopened.search("canoe", alice, k=3)
    assert [h.id for h in hits] == [fact.id]


async def test_an_import_is_mirrored(mem, db_path, embedder, alice, tmp_path):
    await mem.add(alice, [Fact(subject="alice", summary="the lighthouse is white"), Episode(summary="a walk to the lighthouse")])
    lines = list(await export_scope(mem, alice))
    other = await MemoryOS.open(tmp_path / "other", embedder=embedder, vault_key_file=tmp_path / "k" / "vault.key")
    await import_lines(other, lines)
    await assert_mirrored(other)
    assert len(await shared_rows(other)) == 2
    assert len(await other.search("lighthouse", alice, k=5)) == 2


async def test_a_status_change_is_mirrored_and_filters_the_shared_search(mem, alice):
    old, = await mem.add(alice, Fact(subject="alice", summary="alice lives in Lyon"))
    new, = await mem.add(alice, Fact(subject="alice", summary="alice lives in Porto now"))
    await mem.storage.update_rows("semantic", [{**(await mem.storage.rows("semantic", f"id = '{old.id}'"))[0], "status": "superseded",
                                                "updated_at": mem.clock()}], {old.id: old.updated_at})
    await assert_mirrored(mem)
    assert [h.id for h in await mem.search("alice lives", alice, k=5)] == [new.id]
    assert {h.id for h in await mem.search("alice lives", alice, k=5, include_inactive=True)} == {old.id, new.id}


async def test_a_doubled_row_with_one_stale_copy_is_repaired_not_lost(db_path, embedder, alice, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    fact, = await mem.add(alice, Fact(subject="a", summary="the boat is moored at pier four"))
    index = mem.storage.search
    row = (await mem.storage.rows("semantic", f"id = '{fact.id}'"))[0]
    await index.table.add(index.project("semantic", [{**row, "updated_at": fact.created_at.replace(year=2001)}]))
    reopened = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    await assert_mirrored(reopened)
    assert [h.id for h in await reopened.search("boat pier", alice, k=3)] == [fact.id]


async def test_a_record_another_process_adds_while_this_one_checks_stays_searchable(db_path, embedder, alice, vault_key):
    """An open compares the shared table with the stores (`check`): the stores first, then the
    shared table. A record another process adds between the two reads is in the shared table and
    not yet in what was read of its store: it is new, not left over, and stays."""
    other = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    await other.add(alice, Fact(subject="alice", summary="the bike is in the shed"))
    mem = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    index, added = mem.storage.search, []
    read_pairs = index._pairs

    async def another_process_adds_in_between(table, where):
        pairs = await read_pairs(table, where)
        if where is None and table is mem.storage.tables["semantic"].table and not added:
            added.extend(await other.add(alice, Fact(subject="alice", summary="the kayak is in the garage")))
            await other.storage.flush_queued()  # its store's row and its shared row are both written
        return pairs

    index._pairs = another_process_adds_in_between
    assert await index.check() == {"written": 0, "removed": 0}
    del index._pairs
    await assert_mirrored(mem)
    for memory in (mem, other):
        assert added[0].id in {h.id for h in await memory.search("kayak garage", alice, k=5)}
