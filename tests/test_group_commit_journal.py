"""A group commit on a local store journals its rows (`memos.group_commit.GroupCommit._hold`): one
commit per batch (the shared search table's), the stores' and history rows committed a moment
later for many batches at once; acknowledged only once journaled, found by a search at once, and
written by the next open when the process is killed first."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import lancedb
import pytest
from memos.memtypes import Fact

from memos import MemoryOS, RecordNotFoundError, Scope
from memos.batching import Coalescer
from memos.group_commit import linger
from memos.jobs.audit import history_gaps
from memos.store.lancedb.journal import JOURNAL_DIR
from memos.store.lancedb.replay import absent

ANN, BOB = Scope("ann", "helper"), Scope("bob", "helper")


async def versions(mem: MemoryOS) -> dict[str, int]:
    """The versions of the store's, history and shared tables on disk (past `Storage.read`: no barrier)."""
    tables = {"semantic": mem.storage.tables["semantic"].table, "history": mem.storage.history, "shared": mem.storage.search.table}
    return {name: await table.version() for name, table in tables.items()}


def segments(db: Path) -> list[Path]:
    return sorted((db / JOURNAL_DIR).glob("*.seg"))


async def test_batches_of_adds_make_one_commit_each_and_their_rows_and_history_commit_together_later(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    mem.storage.behind.delay = 60  # nothing is written by the delay within this test
    await mem.add(ANN, Fact(subject="ann", summary="ann warms the store up"))
    await mem.storage.settle()
    before = await versions(mem)
    added = []
    for round_ in range(3):  # three batches of six concurrent adds
        added += await asyncio.gather(*(mem.add(ANN if i % 2 else BOB, Fact(subject=f"plant {round_}.{i}", summary=f"fact {round_}.{i} about ferns"))
                                        for i in range(6)))
    now = await versions(mem)
    assert now["shared"] - before["shared"] == 3  # one commit a batch: what a search reads
    assert now["semantic"] == before["semantic"] and now["history"] == before["history"]  # journaled, not committed
    assert segments(db_path)
    hits = {h.id for scope in (ANN, BOB) for h in await mem.search("ferns", scope, k=20)}
    assert {r.id for [r] in added} <= hits  # a search finds them as soon as their callers are told
    listed = {r.id for scope in (ANN, BOB) for r in await mem.list(scope, "semantic", limit=None)}  # a read writes the queue first
    assert {r.id for [r] in added} <= listed
    after = await versions(mem)
    assert after["semantic"] - before["semantic"] == 1 and after["history"] - before["history"] == 1  # all 18 in one commit each
    assert not segments(db_path)
    assert await history_gaps(mem.storage) == {}
    for [record] in added:
        [entry] = await mem.history(ANN if record.user_id == "ann" else BOB, record.id)
        assert (entry.op, entry.actor, entry.note) == ("add", "user", None)


WRITER = textwrap.dedent('''
    import asyncio, os, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    from memos.memtypes import Fact

    async def main(db, go):
        mem = await MemoryOS.open(db, embedder=None)
        mode = sys.argv[4] if len(sys.argv) > 4 else ""
        if mode == "stuck":  # it commits its batches and never gets to delete their journal segment
            from memos.store.lancedb.journal import Journal
            Journal.retire = staticmethod(lambda segments: __import__("time").sleep(3600))
        if mode == "deaf":  # it never hears another process ask for its rows (memos.store.lancedb.others)
            mem.storage.behind.others.asked = lambda: 0
        mem.storage.behind.delay = float(sys.argv[3])  # 60: the rows wait in the journal until the process ends or is killed
        added = await asyncio.gather(*(mem.add(Scope("ann", "helper"), Fact(subject=f"boat {i}", summary=f"boat {i} at pier four"))
                                       for i in range(5)))
        print(" ".join(r.id for [r] in added), flush=True)  # acknowledged
        while not os.path.exists(go):
            await asyncio.sleep(0.02)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
''')


def _start_writer(tmp_path: Path, delay: float = 60, *, stuck: bool = False, deaf: bool = False) -> tuple[subprocess.Popen[str], Path, Path, list[str]]:
    script, db, go = tmp_path / "writer.py", tmp_path / "db", tmp_path / "go"
    script.write_text(WRITER)
    mode = ["stuck"] if stuck else ["deaf"] if deaf else []
    writer = subprocess.Popen([sys.executable, str(script), str(db), str(go), str(delay), *mode],
                              stdout=subprocess.PIPE, text=True)
    ids = writer.stdout.readline().split() if writer.stdout else []
    assert len(ids) == 5, "the writer did not acknowledge its adds"
    return writer, db, go, ids


def test_adds_acknowledged_from_the_journal_survive_a_kill_and_are_written_once_by_the_next_open(tmp_path: Path):
    writer, db, _, ids = _start_writer(tmp_path)
    try:
        async def on_disk() -> int:  # the tables as they are, no memos open (which would replay)
            conn = await lancedb.connect_async(str(db))
            return await (await conn.open_table("semantic")).count_rows()

        assert asyncio.run(on_disk()) == 0 and len(segments(db)) == 1  # acknowledged while only in the journal
    finally:
        writer.kill()
        writer.wait(timeout=60)

    async def reopened() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        assert not segments(db)
        stored = Counter(r.id for r in await mem.list(Scope("ann", "helper"), "semantic", limit=None))
        assert set(stored) == set(ids) and set(stored.values()) == {1}
        shared = (await mem.storage.search.table.query().select(["id"]).to_arrow())["id"].to_pylist()
        assert Counter(shared) == Counter(ids)
        assert {h.id for h in await mem.search("boat pier", Scope("ann", "helper"), k=10)} == set(ids)
        assert await history_gaps(mem.storage) == {}
        for record_id in ids:
            [entry] = await mem.history(Scope("ann", "helper"), record_id)
            assert (entry.op, entry.actor, entry.note) == ("add", "user", None)  # its own row, not a repair

    asyncio.run(reopened())


def test_another_process_opening_the_store_keeps_the_shared_rows_of_a_live_writers_journaled_adds(tmp_path: Path):
    """The open's catch-up of the shared table (`SearchIndex.check`) takes a shared row whose record
    waits in a live process's journal for one to keep, not for one left over."""
    writer, db, go, ids = _start_writer(tmp_path)
    try:
        async def meanwhile() -> None:
            other = await MemoryOS.open(db, embedder=None)
            shared = (await other.storage.search.table.query().select(["id"]).to_arrow())["id"].to_pylist()
            assert sorted(shared) == sorted(ids)

        asyncio.run(meanwhile())
    finally:
        go.touch()
        assert writer.wait(timeout=120) == 0  # returning writes the queue

    async def after() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        assert {h.id for h in await mem.search("boat pier", Scope("ann", "helper"), k=10)} == set(ids)
        assert not segments(db)

    asyncio.run(after())


async def test_after_a_batch_of_several_callers_the_next_one_waits_for_more_and_a_lone_caller_does_not():
    """A one-commit batch is short, so concurrent adds would come in smaller batches (more commits
    to the shared search table, each scanned by every search until an optimize): after a batch of
    several callers the next waits one batch duration for more (`linger`)."""
    batches: list[list[int]] = []

    async def run(items: list[int]) -> list[None]:
        batches.append(items)
        await asyncio.sleep(0.2)
        return [None] * len(items)

    queue: Coalescer[int, None] = Coalescer("add", run, linger=linger)
    first = [asyncio.ensure_future(queue.submit(i)) for i in range(3)]  # one batch of three, 0.2 s long
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(queue.submit(10))  # waits for the batch before it...
    await asyncio.sleep(0.2)
    third = asyncio.ensure_future(queue.submit(11))  # ...and, lingering, for this one too
    await asyncio.gather(*first, second, third)
    assert batches == [[0, 1, 2], [10, 11]]
    assert linger(1, 0.2) == 0 and linger(2, 0.05) == 0.05 and linger(50, 3.0) <= 0.15


async def test_a_batch_begun_on_a_loop_that_then_blocks_is_written_for_the_other_loops_reads(db_path: Path):
    from memos._sync import background_loop

    mem = await MemoryOS.open(db_path, embedder=None)
    added = await asyncio.gather(*(mem.add(ANN, Fact(subject=f"fern {i}", summary=f"fern fact {i}")) for i in range(40)))
    for _ in range(5):  # more than LIMIT rows wait: their batch starts being written now
        await asyncio.sleep(0)
    # this loop now blocks (a synchronous call inside an async app) while another loop reads the store
    loop = background_loop()
    assert loop is not None
    read = asyncio.run_coroutine_threadsafe(mem.list(ANN, "semantic", limit=None), loop)
    listed = read.result(timeout=60)  # waited forever when the batch could only finish on this loop
    assert {r.id for [r] in added} <= {r.id for r in listed}


async def test_a_replay_sees_rows_another_open_committed_a_moment_ago(db_path: Path):
    """A replay writes only the rows its tables lack, as of their newest version: rows committed
    by another open (another process) within its read-consistency second are not written twice."""
    mine, other = await MemoryOS.open(db_path, embedder=None), await MemoryOS.open(db_path, embedder=None)
    assert await absent(mine.storage, "semantic", [{"id": "nothing"}])  # this open has read the table just now
    [fact] = await other.add(ANN, Fact(subject="boat", summary="boat at pier four"))
    await other.storage.flush_queued()  # committed by the other open
    assert await absent(mine.storage, "semantic", [{"id": fact.id}]) == []


def test_a_segment_another_open_replayed_and_deleted_while_it_was_listed_is_not_replayed_again(tmp_path: Path, monkeypatch):
    import fcntl

    import pyarrow as pa

    from memos.store.lancedb import journal

    folder = tmp_path / JOURNAL_DIR
    folder.mkdir()
    segment = folder / "stopped.seg"  # a stopped writer's: no lock on it
    segment.write_bytes(journal.frame("semantic", pa.table({"id": ["r1"]})))
    with journal.orphans(tmp_path) as found:
        assert [o.path for o in found] == [segment]  # found while it is there
        for orphan in found:
            orphan.done = False  # kept, for the second look
    lock = fcntl.flock

    def replayed_meanwhile(fd: int, operation: int) -> None:  # the other open deletes it between listing and locking
        segment.unlink(missing_ok=True)
        lock(fd, operation)

    monkeypatch.setattr(journal.fcntl, "flock", replayed_meanwhile)
    with journal.orphans(tmp_path) as found:
        assert found == []


def test_another_process_asked_for_a_journaled_add_by_id_waits_for_it_instead_of_not_finding_it(tmp_path: Path):
    """A worker that did not make an add finds it by id, can update it, and can delete it for good,
    while its rows still wait in the journal of the worker that acknowledged it
    (`memos.store.lancedb.elsewhere`)."""
    scope = Scope("ann", "helper")

    async def elsewhere(db: Path, ids: list[str]) -> None:
        other = await MemoryOS.open(db, embedder=None)
        if len(ids) > 2:
            first = await other.get(scope, "semantic", ids[0])
            assert first.summary.endswith("at pier four")
            changed = await other.update(scope, "semantic", ids[1], {"summary": "moved to pier five"})
            assert changed.summary == "moved to pier five"
            with pytest.raises(RecordNotFoundError):  # a real miss is still one
                await other.get(scope, "semantic", "0" * 32)
        else:
            await other.delete(scope, "semantic", ids[0])  # not left for its writer to bring back

    kept: list[str] = []
    for step in ("get and update", "delete"):
        writer, db, go, ids = _start_writer(tmp_path, delay=1.0)  # written to the tables a second after they were acknowledged
        try:
            asyncio.run(elsewhere(db, ids if step == "get and update" else ids[:1]))
        finally:
            go.touch()
            assert writer.wait(timeout=120) == 0
            go.unlink()
        kept += ids if step == "get and update" else ids[1:]

    async def after() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        stored = Counter(r.id for r in await mem.list(scope, "semantic", limit=None))
        assert set(stored) == set(kept) and set(stored.values()) == {1}
        shared = Counter((await mem.storage.search.table.query().select(["id"]).to_arrow())["id"].to_pylist())
        assert set(shared) == set(kept) and set(shared.values()) == {1}
        assert (await mem.get(scope, "semantic", kept[1])).summary == "moved to pier five"

    asyncio.run(after())


def test_another_process_that_reads_a_journaled_add_gets_its_writer_to_write_it_now(tmp_path: Path):
    """The writer would keep its adds in the journal for a minute (its delay); another process's
    list, count and read by id ask it to write them now (`memos.store.lancedb.others`) and find them
    well within their few seconds of waiting, and a delete there is not undone by a replay."""
    writer, db, go, ids = _start_writer(tmp_path, delay=60)
    scope = Scope("ann", "helper")

    async def elsewhere() -> None:
        other = await MemoryOS.open(db, embedder=None)
        assert (await other.get(scope, "semantic", ids[2])).id == ids[2]  # by id first (its wait asks too)
        assert {r.id for r in await other.list(scope, "semantic", limit=None)} == set(ids)
        assert (await other.counts(scope))["semantic"] == len(ids)
        await other.delete(scope, "semantic", ids[0])
        assert [e.op for e in await other.history(scope, ids[1])] == ["add"]

    try:
        asyncio.run(elsewhere())
        assert not segments(db)  # written by the writer, long before its minute was up
    finally:
        go.touch()
        assert writer.wait(timeout=120) == 0

    async def reopened() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        stored = Counter(r.id for r in await mem.list(scope, "semantic", limit=None))
        assert set(stored) == set(ids[1:]) and set(stored.values()) == {1}

    asyncio.run(reopened())


def test_a_delete_of_an_add_whose_process_was_killed_before_writing_it_is_not_undone_by_the_replay(tmp_path: Path):
    """A killed writer's journaled adds are written by the process that misses one of them
    (`memos.store.lancedb.elsewhere`), not only by the next open: a delete there removes the
    record for good, and a get finds the others."""
    writer, db, _, ids = _start_writer(tmp_path, deaf=True)  # its rows wait in the journal (it is killed before it writes them)
    scope = Scope("ann", "helper")

    async def survivor() -> None:
        other = await MemoryOS.open(db, embedder=None)  # open while the writer lives: nothing to replay
        writer.kill()
        writer.wait(timeout=60)
        assert segments(db)  # the killed writer's, left for the next open
        await other.delete(scope, "semantic", ids[0])
        assert (await other.get(scope, "semantic", ids[1])).id == ids[1]

    async def reopened() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        stored = Counter(r.id for r in await mem.list(scope, "semantic", limit=None))
        assert set(stored) == set(ids[1:]) and set(stored.values()) == {1}
        shared = Counter((await mem.storage.search.table.query().select(["id"]).to_arrow())["id"].to_pylist())
        assert set(shared) == set(ids[1:]) and set(shared.values()) == {1}

    asyncio.run(survivor())
    asyncio.run(reopened())


def test_a_delete_of_an_add_committed_while_its_journal_segment_lived_on_is_not_undone_by_the_replay(tmp_path: Path):
    """The writer has committed its adds but is killed before deleting the journal segment that
    held them (it was writing their history): a delete elsewhere in that moment waits for the
    segment to go (`memos.store.lancedb.elsewhere.settle_journaled`), so the next open's replay
    does not write the deleted record back."""
    writer, db, _, ids = _start_writer(tmp_path, delay=0.1, stuck=True)
    scope = Scope("ann", "helper")

    async def committed() -> int:  # the tables as they are, no memos open
        conn = await lancedb.connect_async(str(db))
        return await (await conn.open_table("semantic")).count_rows()

    async def survivor() -> None:
        for _ in range(600):
            if await committed() == len(ids):
                break
            await asyncio.sleep(0.05)
        assert await committed() == len(ids) and segments(db)  # committed, and its segment still there
        other = await MemoryOS.open(db, embedder=None)  # sees them committed

        async def kill_soon() -> None:
            await asyncio.sleep(0.5)
            writer.kill()
            await asyncio.to_thread(writer.wait, 60)

        killing = asyncio.ensure_future(kill_soon())
        await other.delete(scope, "semantic", ids[0])  # found at once: its row is committed
        await killing

    try:
        asyncio.run(survivor())
    finally:
        writer.kill()
        writer.wait(timeout=60)

    async def reopened() -> None:
        mem = await MemoryOS.open(db, embedder=None)  # replays what the killed writer left
        stored = Counter(r.id for r in await mem.list(scope, "semantic", limit=None))
        assert set(stored) == set(ids[1:]) and set(stored.values()) == {1}
        assert await mem.history(scope, ids[1])
        with pytest.raises(RecordNotFoundError):
            await mem.get(scope, "semantic", ids[0])

    asyncio.run(reopened())


OLD_NAN_WRITER = textwrap.dedent('''
    import asyncio, math, os, sys
    os.environ["LANCE_LOG"] = "error"
    from dataclasses import replace
    from pydantic_ai.embeddings import Embedder, TestEmbeddingModel
    import memos.embeddings, memos.store.schema
    from memos import MemoryOS, Scope
    from memos.memtypes import Fact

    memos.embeddings.finite = memos.store.schema.finite = lambda vector: True  # as versions before the check

    class NaNForPoison(TestEmbeddingModel):
        async def embed(self, inputs, *, input_type, settings=None):
            result = await super().embed(inputs, input_type=input_type, settings=settings)
            texts = [inputs] if isinstance(inputs, str) else list(inputs)
            return replace(result, embeddings=[[math.nan if "poison" in t else 0.5] * len(v) for t, v in zip(texts, result.embeddings)])

    async def main(db):
        mem = await MemoryOS.open(db, embedder=Embedder(NaNForPoison(dimensions=8)))
        mem.storage.behind.delay = 60  # the rows wait in the journal until the process is killed
        added = [await mem.add(Scope("ann", "helper"), Fact(subject="Ann", summary=text))
                 for text in ("a poison fact about boats", "Ann keeps a boat at pier four")]
        print(" ".join(r.id for [r] in added), flush=True)  # acknowledged
        await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1]))
''')


def test_a_journaled_row_with_a_nan_vector_from_an_older_version_does_not_stop_the_store_opening(tmp_path: Path):
    """Versions before the embedder's vectors were checked acknowledged a NaN vector into the
    journal; LanceDB refuses to write it, and every later open failed replaying it. The row is
    now written without its vector, found by full text, and the rest of the segment as it was."""
    from pydantic_ai.embeddings import Embedder, TestEmbeddingModel

    script, db = tmp_path / "writer.py", tmp_path / "db"
    script.write_text(OLD_NAN_WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
    try:
        ids = writer.stdout.readline().split() if writer.stdout else []
        assert len(ids) == 2, "the writer did not acknowledge its adds"
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert segments(db)

    async def reopened() -> None:
        mem = await MemoryOS.open(db, embedder=Embedder(TestEmbeddingModel(dimensions=8)))
        assert not segments(db)
        poison, boat = ids
        assert {r.id for r in await mem.list(ANN, "semantic", limit=None)} == {poison, boat}
        vectors = await mem.stored_vectors(ANN, "semantic")
        assert set(vectors) == {boat}  # the NaN one is kept without a vector
        assert poison in {h.id for h in await mem.search("poison", ANN, k=5)}
        assert boat in {h.id for h in await mem.search("pier four", ANN, k=5)}
        await mem.ingest(ANN, [{"speaker": "ann", "text": "the boat needs paint"}])  # writes go on
        assert any("paint" in h.record.text for h in await mem.search("paint", ANN, k=5))

    asyncio.run(reopened())
