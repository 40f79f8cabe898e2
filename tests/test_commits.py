"""The commit counters of a local store (`memos.store.lancedb.commits`): how one process learns,
with one small read, that another has committed to a table since it last looked."""

from __future__ import annotations

from datetime import timedelta

import lancedb
import pyarrow as pa

from memos.store.lancedb.commits import CommitCounter, rows_of


async def _open(path, name):
    """A table handle that looks for new versions only when told (within the test's minute)."""
    conn = await lancedb.connect_async(str(path), read_consistency_interval=timedelta(minutes=1))
    return await conn.open_table(name)


async def test_a_process_catches_a_table_up_only_after_another_committed_to_it(tmp_path):
    writer = await lancedb.connect_async(str(tmp_path))
    facts = await writer.create_table("semantic", pa.table({"id": ["a"]}))
    notes = await writer.create_table("notes", pa.table({"id": ["n"]}))
    here, there = CommitCounter(tmp_path), CommitCounter(tmp_path)  # two processes' views of one store
    mine, my_notes = await _open(tmp_path, "semantic"), await _open(tmp_path, "notes")
    await here.catch_up(mine)
    assert await mine.count_rows() == 1
    await facts.add(pa.table({"id": ["b"]}))  # another process commits, and counts it
    there.committed([facts.name, rows_of("semantic")])
    assert await mine.count_rows() == 1  # the handle alone does not look for a minute
    await here.catch_up(mine)
    assert await mine.count_rows() == 2  # caught up by the count
    await here.catch_up(my_notes)
    version = await my_notes.version()
    await notes.add(pa.table({"id": ["m"]}))  # written, not counted yet: not acknowledged either
    await here.catch_up(my_notes)
    assert await my_notes.version() == version  # nothing counted for this table: no look at its versions
    epoch = here.epoch(rows_of("semantic"))
    there.committed([notes.name])
    assert here.epoch(rows_of("semantic")) == epoch  # one table's commits leave the others' counters
    await here.catch_up(my_notes)
    assert await my_notes.count_rows() == 2
    there.committed([rows_of("semantic")])
    assert here.epoch(rows_of("semantic")) == epoch + 1


async def test_a_process_own_commits_do_not_make_its_tables_look_stale(tmp_path):
    conn = await lancedb.connect_async(str(tmp_path))
    table = await conn.create_table("semantic", pa.table({"id": ["a"]}))
    here, there = CommitCounter(tmp_path), CommitCounter(tmp_path)
    await here.catch_up(table)
    epoch = here.epoch(table.name)
    for n in range(3):
        await table.add(pa.table({"id": [f"own{n}"]}))
        here.committed([table.name])
    assert here.epoch(table.name) == epoch  # its own: the handle that wrote them has them
    there.committed([table.name])
    here.committed([table.name])  # its own after one it had not seen: that one still counts
    assert here.epoch(table.name) == epoch + 1


async def test_an_object_storage_store_has_no_counter(tmp_path):
    remote = CommitCounter(None)
    remote.committed(["semantic"])
    assert remote.epoch("semantic") == 0 and remote.path is None and not list(tmp_path.iterdir())


async def test_a_counter_that_cannot_be_written_or_read_fails_nothing(tmp_path, caplog):
    """A commit has landed when it is counted: a counter file that cannot be written (a full disk,
    a read-only copy) is logged and the write goes on; one that cannot be read leaves the epoch."""
    counter = CommitCounter(tmp_path)
    counter.committed(["semantic"])
    epoch = counter.epoch("semantic")
    counter.path.unlink()
    counter.path.mkdir()  # neither readable nor writable as a file
    counter.committed(["semantic"])
    assert "was not counted" in caplog.text
    assert counter.epoch("semantic") == epoch


async def test_another_open_of_the_store_reads_a_meta_entry_at_once(tmp_path):
    """Meta entries (API keys, state) are commits like any other: another process's read, here
    another open of the store, finds one as soon as its write returns."""
    from memos import MemoryOS

    first = await MemoryOS.open(tmp_path / "db", embedder=None)
    second = await MemoryOS.open(tmp_path / "db", embedder=None)
    assert "probe" not in await second.storage.get_meta()  # its handle up to date now
    await first.storage.set_meta("probe", "one")
    assert (await second.storage.get_meta())["probe"] == "one"
    await first.storage.write_state({"probe": "two"})
    assert (await second.storage.get_meta())["probe"] == "two"


async def test_a_write_by_key_finds_the_row_another_process_added(tmp_path):
    """A write by key (a merge, a delete) runs on the table's latest version when another process
    committed since: an archive of a record another open added a moment ago replaced its shared
    search row instead of adding a second one beside it (the search kept finding it as it was)."""
    from memos.memtypes import Fact

    from memos import MemoryOS, Scope

    alice = Scope("alice", "assistant", "s1")
    first = await MemoryOS.open(tmp_path / "db", embedder=None)
    second = await MemoryOS.open(tmp_path / "db", embedder=None)
    await first.add(alice, [Fact(subject="x", summary="first")])  # the first open's handles are at this version
    [fact] = await second.add(alice, [Fact(subject="x", summary="a cat named Tom")])
    await first.archive(alice, "semantic", fact.id)
    table = second.storage.search.table
    await table.checkout_latest()
    shared = await table.query().where(f"id = '{fact.id}'").select(["status"]).to_arrow()
    assert shared["status"].to_pylist() == ["archived"]
    hits = await second.search("cat named Tom", alice)
    assert fact.id not in [h.record.id for h in hits]


async def test_a_short_counter_file_of_an_older_store_is_read_and_grown_then_read_mapped(tmp_path):
    """Counters are read through a mapping of the whole file, which the first commit grows to its
    full size; a shorter file (one slot written, as before) is read the old way until then."""
    import os
    import struct

    from memos.store.lancedb.commits import FILE_SIZE, _slot

    path = tmp_path / ".memos-commits"
    path.write_bytes(b"\0" * (_slot("semantic") * 8) + struct.pack("<Q", 5))  # as an older memos left it
    here, there = CommitCounter(tmp_path), CommitCounter(tmp_path)
    epoch = here.epoch("semantic")
    assert here._map is None and os.path.getsize(path) < FILE_SIZE
    there.committed(["semantic"])
    assert os.path.getsize(path) == FILE_SIZE and here.epoch("semantic") == epoch + 1 and here._map is not None
    for n in range(3):  # read from the mapping: each commit of the other is seen at once
        there.committed(["semantic", "notes"])
        assert here.epoch("semantic") == epoch + 2 + n
    assert here.epoch("semantic") == epoch + 4  # and nothing moves by itself
