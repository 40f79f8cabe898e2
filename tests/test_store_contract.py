"""The store contract: what the kernel needs from a store (`memos.store.protocol.Store`), checked on
every implementation the same way: the LanceDB store on a local directory and on S3-compatible
object storage (moto's server on loopback). A second backend adds itself to `BACKENDS` and must
pass every test here. The tests use nothing but the protocol's members."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from memos.memtypes import BUILTIN_TYPES, Episode, Fact, MemoryRecord

from memos.bench.scale import HashedTokens
from memos.bench.serve import loopback_s3
from memos.exceptions import RecordChangedError
from memos.store.history import history_row
from memos.store.lancedb.opening import open_storage
from memos.store.protocol import Store
from memos.store.scope import Scope, Where

BACKENDS = ["directory", "s3"]
EMBEDDER = HashedTokens()
ALICE, BOB = Scope("alice", "helper"), Scope("bob", "helper")
NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def s3_options() -> typing.Iterator[dict[str, str]]:
    with loopback_s3("contract") as options:
        yield options


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "directory":
        opened: Store = await open_storage(str(tmp_path / "db"), list(BUILTIN_TYPES), EMBEDDER)
    else:
        options = request.getfixturevalue("s3_options")
        opened = await open_storage(f"s3://contract/{tmp_path.name}", list(BUILTIN_TYPES), EMBEDDER, options)
    yield opened
    await opened.settle()


async def rows_of(store: Store, scope: Scope, records: list[MemoryRecord]) -> list[dict[str, Any]]:
    """Records as the store's rows, stamped with `scope` and embedded."""
    out = []
    for record in records:
        record = record.model_copy(update={**scope.stamp(), "created_at": NOW, "updated_at": NOW})
        record.text = record.index_text()
        vector = (await EMBEDDER.embed_documents([record.text]))[0]
        out.append(store.type_table(record.memory_type).to_row(record, vector))
    return out


def test_the_lancedb_store_has_every_member_of_the_protocol():
    from memos.store.lancedb.storage import Storage

    members = {name for name in dir(Store) if not name.startswith("_")} | set(typing.get_type_hints(Store))
    missing = sorted(m for m in members if not hasattr(Storage, m) and m not in Storage.__init__.__code__.co_names)
    assert not missing, f"Storage lacks {missing}"


async def test_rows_are_added_read_counted_and_partitioned_by_scope(store: Store):
    assert "semantic" in store.memory_types() and store.dim == EMBEDDER.dim
    await store.add_rows("semantic", await rows_of(store, ALICE, [Fact(subject="Alice", summary="Alice likes tea")]))
    await store.add_rows("semantic", await rows_of(store, BOB, [Fact(subject="Bob", summary="Bob likes coffee"),
                                                               Fact(subject="Bob", summary="Bob rides a bike")]))
    assert await store.has_rows("semantic") and store.known_rows("semantic") is True
    assert await store.count("semantic") == 3
    assert await store.count("semantic", Where(BOB).build()) == 2
    mine = await store.rows("semantic", Where(ALICE).build())
    assert [r["summary"] for r in mine] == ["Alice likes tea"]
    record = store.type_table("semantic").to_record(mine[0])
    assert isinstance(record, Fact) and record.user_id == "alice" and record.text == "Alice: Alice likes tea"
    table = await store.columns("semantic", Where(BOB).build(), ["id", "summary"])
    assert sorted(table["summary"].to_pylist()) == ["Bob likes coffee", "Bob rides a bike"]


async def test_an_update_writes_only_the_version_it_read_and_never_inserts(store: Store):
    [row] = await rows_of(store, ALICE, [Fact(subject="Alice", summary="Alice lives in Porto")])
    await store.add_rows("semantic", [row])
    later = NOW + timedelta(seconds=1)
    await store.update_rows("semantic", [{**row, "summary": "Alice lives in Lisbon", "updated_at": later}], {row["id"]: NOW})
    [stored] = await store.rows("semantic", Where(ALICE).build())
    assert stored["summary"] == "Alice lives in Lisbon"
    with pytest.raises(RecordChangedError):  # read before the update above: lost the race
        await store.update_rows("semantic", [{**row, "summary": "Alice lives in Faro"}], {row["id"]: NOW})
    assert (await store.rows("semantic", Where(ALICE).build()))[0]["summary"] == "Alice lives in Lisbon"
    await store.delete_rows("semantic", Where(ALICE).id_in([row["id"]]).build())
    with pytest.raises(RecordChangedError):  # deleted meanwhile: stays deleted
        await store.update_rows("semantic", [{**row, "updated_at": later}], {row["id"]: later})
    assert await store.count("semantic") == 0


async def test_upserts_replace_by_id(store: Store):
    [row] = await rows_of(store, ALICE, [Fact(subject="Alice", summary="Alice owns a cat")])
    await store.upsert_rows("semantic", [row])
    await store.upsert_rows("semantic", [{**row, "summary": "Alice owns two cats"}])
    assert [r["summary"] for r in await store.rows("semantic", None)] == ["Alice owns two cats"]


async def test_vector_and_text_queries_rank_within_the_filter(store: Store):
    facts = [Fact(subject="Alice", summary=s) for s in
             ("Alice is allergic to peanuts", "Alice runs every morning", "Alice works as a nurse")]
    await store.add_rows("semantic", await rows_of(store, ALICE, facts))
    await store.add_rows("semantic", await rows_of(store, BOB, [Fact(subject="Bob", summary="Bob is allergic to peanuts")]))
    where = Where(ALICE).build()
    vector = await EMBEDDER.embed_query("allergic to peanuts")
    near = await store.vector_search("semantic", vector, where, 2)
    assert near[0]["summary"] == "Alice is allergic to peanuts" and "_distance" in near[0]
    assert all(r["user_id"] == "alice" for r in near)
    found = await store.text_search("semantic", "nurse", where, 5)
    assert [r["summary"] for r in found] == ["Alice works as a nurse"] and "_score" in found[0]
    lean = await store.vector_search("semantic", vector, where, 3, columns=["id"])
    full = await store.take("semantic", lean, where)
    assert [r["id"] for r in full] == [r["id"] for r in lean] and all("summary" in r for r in full)


async def test_history_rows_are_appended_read_rewritten_and_deleted(store: Store):
    record = Fact(subject="Alice", summary="Alice plays chess", **ALICE.stamp())
    rows = [history_row("add", record, "test", None, {"summary": record.summary}, NOW),
            history_row("update", record, "test", None, {"summary": "Alice plays go"}, NOW + timedelta(seconds=1))]
    await store.append_history(rows)
    entries = await store.history_rows(f"record_id = '{record.id}'")
    assert [e.op for e in entries] == ["add", "update"] and entries[1].after == {"summary": "Alice plays go"}
    assert sorted(store_ids := (await store.history_columns(["record_id"]))["record_id"].to_pylist()) == [record.id] * 2, store_ids
    raw = await store.raw_history(f"record_id = '{record.id}'")
    await store.rewrite_history([{**r, "note": "scrubbed"} for r in raw])
    assert {e.note for e in await store.history_rows(f"record_id = '{record.id}'")} == {"scrubbed"}
    await store.delete_history(f"record_id = '{record.id}'")
    assert await store.history_rows(f"record_id = '{record.id}'") == []


async def test_meta_entries_are_set_read_and_deleted(store: Store):
    await store.set_meta("contract:a", "1")
    if not store.hold_state({"contract:b": "2"}):  # no journal (object storage): written at once instead
        await store.write_state({"contract:b": "2"})
    await store.settle()
    meta = await store.get_meta()
    assert meta["contract:a"] == "1" and meta["contract:b"] == "2"
    await store.delete_meta(["contract:a", "contract:b"])
    assert not {"contract:a", "contract:b"} & set(await store.get_meta())


async def test_versions_move_forward_with_each_write(store: Store):
    before = await store.versions()
    await store.add_rows("episodic", await rows_of(store, ALICE, [Episode(actor="alice", summary="hello", occurred_at=NOW)]))
    after = await store.versions()
    assert after["episodic"] > before["episodic"] and await store.version("episodic") == after["episodic"]
    await store.refresh()


async def test_a_purge_drops_old_versions_now_or_defers_to_maintenance(store: Store):
    [row] = await rows_of(store, ALICE, [Fact(subject="Alice", summary="Alice's door code is 4417")])
    await store.add_rows("semantic", [row])
    await store.delete_rows("semantic", Where(ALICE).build())
    done = await store.purge_old_versions("semantic", wait=1.0)
    if done:  # a local store: the lease was free
        assert await store.finish_deferred_purge() is None
    else:  # object storage: no lease, so deferred; maintenance finishes it once the margin has passed
        assert await store.finish_deferred_purge(wait=0.1) == "waiting"
        assert await store.finish_deferred_purge(datetime.now(UTC) + timedelta(hours=1), wait=0.1) == "purged past the margin"
    assert await store.count("semantic") == 0


async def test_concurrent_writers_lose_nothing(store: Store):
    batches = [await rows_of(store, ALICE, [Fact(subject="Alice", summary=f"note {i}-{j}") for j in range(3)]) for i in range(4)]
    await asyncio.gather(*(store.add_rows("semantic", batch) for batch in batches))
    assert await store.count("semantic", Where(ALICE).build()) == 12
