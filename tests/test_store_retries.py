"""LanceDB calls a store tries again, counted: what several processes writing one store cost each
other (`Storage.retries`, reported by `GET /admin/stats` and `memos bench serve`)."""

from __future__ import annotations

from datetime import timedelta

import lancedb
import pyarrow as pa
import pytest

from memos.memtypes import Fact


@pytest.mark.filterwarnings("ignore:optimize.cleanup_older_than=0.")
async def test_a_read_of_a_purged_version_and_a_commit_conflict_are_tried_again_and_counted(mem, alice):
    """A handle pinned to a version another connection purged reads the latest instead (one
    purged read); a commit conflict LanceDB hands back is tried again (one conflict); both end
    with the store's rows whole."""
    storage = mem.storage
    table = storage.tables["semantic"].table
    for count, fact in enumerate(["Alice plays the cello", "Alice moved to Lyon"], 1):
        await mem.add(alice, Fact(subject="alice", summary=fact))
        assert await storage.read(table, table.count_rows) == count  # its queued rows written: one fragment each
    assert storage.retries.conflicts == storage.retries.purged == 0
    await table.checkout(await table.version())  # a handle that does not look for newer versions
    other = await (await lancedb.connect_async(str(mem.storage.uri))).open_table(table.name)
    await other.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)  # compacted: the pinned version's files go

    rows = await storage.read(table, lambda: table.query().select(["summary"]).to_arrow())
    assert sorted(rows["summary"].to_pylist()) == ["Alice moved to Lyon", "Alice plays the cello"]
    assert storage.retries.purged == 1 and storage.retries.conflicts == 0 and storage.retries.slept_s > 0

    tries = []

    async def add_once_after_a_conflict():
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("Retryable commit conflict for version 9: This Append transaction was preempted by concurrent transaction")
        return await other.add(pa.table({"marker": ["x"]}))  # a real commit, to a table of its own below

    other = await (await lancedb.connect_async(str(mem.storage.uri))).create_table("probe", pa.table({"marker": ["a"]}))
    await storage.write(other, add_once_after_a_conflict)
    assert len(tries) == 2 and await other.count_rows() == 2
    assert storage.retries.conflicts == 1 and storage.retries.purged == 1


async def test_a_store_whose_directory_was_removed_raises_store_unavailable_not_lances_own_error(db_path):
    """A read that found its version gone moved to the latest version, and when the table itself
    was gone that move raised LanceDB's own RuntimeError ('Not found: ..._versions') out of the
    chat step, past the memos error that names what happened."""
    import shutil

    from memos import MemoryOS, Scope, StoreUnavailableError

    mem = await MemoryOS.open(db_path, embedder=None)
    session = await mem.session(Scope("alice", "bot", "s1"))
    await session.step("first turn")
    shutil.rmtree(db_path)
    with pytest.raises(StoreUnavailableError, match="is missing"):
        await session.step("a turn after the store's directory was removed")
