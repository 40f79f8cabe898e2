"""When a table is optimized automatically (`Storage._committed`): an optimize costs in
proportion to the table (it rewrites the fragments that carry the same indexes, on a table
with only its full-text index all of them, and merges indexes whole), so a bulk load spaces
them by the table's size and a burst of writes by the previous optimize's duration, while a
chat's one-row commits are still folded in every `COMPACT_EVERY` commits."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from memos.memtypes import Episode

from memos import MemoryOS, Scope
from memos.bench.scale import HashedTokens
from memos.store.lancedb import compaction
from memos.store.lancedb.compaction import (
    COMPACT_EVERY,
    COMPACT_GAP,
    DELTA_ROWS,
    INDEX_DELTAS,
    KEEP_VERSIONS,
    MIN_KEEP,
    SEARCHED_COMPACT_EVERY,
    SEARCHED_COMPACT_GAP,
    keep_versions,
)
from memos.store.lancedb.scalar_indexes import SCALAR_MIN_ROWS, SHARED_INDEXES, STORE_INDEXES

SCOPE = Scope("ann", "agent")


class Timer:
    """The storage's monotonic clock, moved by the test only."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def open_store(tmp_path: Path) -> tuple[MemoryOS, Timer]:
    memory = await MemoryOS.open(tmp_path / "db", embedder=HashedTokens(), vault_key_file=tmp_path / "vault.key")
    timer = Timer()
    memory.storage.compaction.timer = timer
    memory.storage.compaction.quiet_after = 3600  # no fold-in when writes pause unless a test asks for it
    return memory, timer


def episodes(n: int, tag: str) -> list[Episode]:
    return [Episode(actor="ann", summary=f"{tag} {i}: ann walked to the harbour") for i in range(n)]


async def fragments(memory: MemoryOS, store: str = "episodic") -> int:
    return int((await memory.storage.type_table(store).table.stats())["fragment_stats"]["num_fragments"])


async def add_then_rest(memory: MemoryOS, timer: Timer, records: list[Any]) -> None:
    """One add, its background optimizes finished, then an hour: no spacing by time applies."""
    await memory.add(SCOPE, records, actor="test")
    await memory.storage.settle()
    timer.now += 3600


async def test_a_bulk_load_does_not_rewrite_the_table_every_thousand_rows(tmp_path):
    """The table's rows arrive 1,000 at a time after 12,000: each commit used to trigger an
    optimize, and each optimize rewrote every fragment already indexed (LanceDB merges the fragments
    that carry the same indexes: here all the table's rows but the newest). Now the new rows wait
    until they are a quarter of the table, then one optimize folds them in, and nothing is lost."""
    memory, timer = await open_store(tmp_path)
    await add_then_rest(memory, timer, episodes(12_000, "base"))
    assert await fragments(memory) == 1  # the first 12,000 rows were optimized (>= 1,000 rows)
    await add_then_rest(memory, timer, episodes(1_000, "more"))
    await add_then_rest(memory, timer, episodes(1_000, "again"))
    await add_then_rest(memory, timer, episodes(999, "later"))
    assert await fragments(memory) == 4  # 12,000 + 1,000 + 1,000 + 999 left alone (the old policy: 3, after rewriting 13,000)
    await add_then_rest(memory, timer, episodes(100, "last"))  # 3,099 new rows >= 12,000 / 4
    assert await fragments(memory) == 2  # the new rows in one fragment (not yet indexed: merged apart from the rest)
    assert await memory.storage.count("episodic") == 15_099
    hits = await memory.search("later 7: ann walked to the harbour", SCOPE, k=3)
    assert hits and hits[0].record.summary == "later 7: ann walked to the harbour"


async def test_a_burst_of_commits_waits_for_the_last_optimize_to_rest_then_is_folded_in(tmp_path):
    """One-row commits are optimized every 25 commits, but not sooner than `COMPACT_GAP` (and
    `COMPACT_DUTY` times the last optimize's duration) after the previous one: a loop of single
    adds no longer keeps a core busy rewriting the table. Once the table has rested, the next
    commit folds every waiting fragment in."""
    memory, timer = await open_store(tmp_path)
    memory.storage.behind.journal = None  # each add commits its own rows (no journal to batch them: object storage)
    for n in range(25):
        await memory.add(SCOPE, Episode(actor="ann", summary=f"turn {n} about tea"), actor="test")
    await memory.storage.settle()
    assert await fragments(memory) == 1  # the 25th commit was optimized at once
    for n in range(25, 60):
        await memory.add(SCOPE, Episode(actor="ann", summary=f"turn {n} about tea"), actor="test")
    await memory.storage.settle()
    assert await fragments(memory) == 36  # the clock has not moved: the table is resting
    timer.now += 5
    await memory.add(SCOPE, Episode(actor="ann", summary="turn 60 about tea"), actor="test")
    await memory.storage.settle()
    assert await fragments(memory) == 2  # the first 25 (indexed) and the 36 since, merged apart
    assert await memory.storage.count("episodic") == 61
    hits = await memory.search("turn 44 about tea", SCOPE, k=3)
    assert hits and hits[0].record.summary == "turn 44 about tea"


async def test_the_commits_of_concurrent_callers_are_folded_in_where_searches_scan_them(tmp_path):
    """A server's concurrent adds are one commit of the shared search table a batch, a few
    records a commit: its searches scan each such commit outside the indexes, several searches a
    commit, so a table this process searches is optimized every `SEARCHED_COMPACT_EVERY` commits,
    `SEARCHED_COMPACT_GAP` apart at least (a tenth of the one-second `COMPACT_GAP`), instead of
    piling them up; a table no search reads (here the episodic one, which the shared table
    answers for) is left to the size rules, as before."""
    memory, timer = await open_store(tmp_path)
    await memory.add(SCOPE, Episode(actor="ann", summary="the first turn about tea"), actor="test")
    assert await memory.search("tea", SCOPE, k=3)  # this process searches the shared table
    shared = memory.storage.search.table

    async def rounds(first: int, count: int) -> None:
        for n in range(first, first + count):
            await asyncio.gather(*(memory.add(SCOPE, Episode(actor="ann", summary=f"turn {n}.{i} about tea"), actor="test")
                                   for i in range(8)))
        await memory.storage.settle()

    await rounds(0, SEARCHED_COMPACT_EVERY - 1)
    assert memory.group.queue.batches == SEARCHED_COMPACT_EVERY  # each round of 8 adds was one batch
    assert int((await shared.stats())["fragment_stats"]["num_fragments"]) == 1  # its 10th commit was optimized at once
    assert SEARCHED_COMPACT_GAP < COMPACT_GAP
    timer.now += SEARCHED_COMPACT_GAP  # the optimize took no time on this clock: the gap is what it rests
    await rounds(SEARCHED_COMPACT_EVERY, SEARCHED_COMPACT_EVERY)
    text_index = next(i.name for i in await shared.list_indices() if i.columns == ["text"])
    assert (await shared.index_stats(text_index)).num_unindexed_rows == 0  # folded in again (a second's gap: 80 rows outside)
    assert int((await shared.stats())["fragment_stats"]["num_fragments"]) == 2  # the indexed rows, and the new ones merged apart
    assert await fragments(memory) > 1  # the episodic table: not optimized
    assert await memory.storage.count("episodic") == 1 + 8 * (2 * SEARCHED_COMPACT_EVERY - 1)
    hits = await memory.search("turn 7.3 about tea", SCOPE, k=3)
    assert hits and hits[0].record.summary == "turn 7.3 about tea"


async def unindexed(memory: MemoryOS, store: str = "episodic") -> int:
    table = memory.storage.type_table(store).table
    name = next(i.name for i in await table.list_indices() if i.columns == ["text"])
    return int((await table.index_stats(name)).num_unindexed_rows)


async def test_rows_held_back_are_folded_in_once_the_writes_pause(tmp_path):
    """The spacing holds a bulk load's last rows back (here 1,000 after 12,000: under a quarter);
    once no commit has come for `quiet_after` seconds they are optimized anyway, so searches do
    not scan them outside the indexes until the next write."""
    memory, timer = await open_store(tmp_path)
    await add_then_rest(memory, timer, episodes(12_000, "base"))
    assert await unindexed(memory) == 0
    memory.storage.compaction.quiet_after = 0.05
    await memory.add(SCOPE, episodes(1_000, "more"), actor="test")  # not due: 1,000 < 12,000 / 4
    for _ in range(600):  # the pause is measured on the event loop's clock: wait for it, 30 s at most
        await memory.storage.settle()
        if await unindexed(memory) == 0:
            break
        await asyncio.sleep(0.05)
    assert await unindexed(memory) == 0
    assert await memory.storage.count("episodic") == 13_000


async def test_tables_are_rewritten_one_at_a_time(tmp_path):
    """An add that makes several tables due starts their optimizes in the background, and the
    maintenance job compacts and indexes every table: each of those holds hundreds of MB on a large
    store, so they run one after another (`Storage.rewriting`), never side by side, whoever
    started them; and every row is still there and found."""
    from memos.bench.scale import make_records
    from memos.store.lancedb.maintenance import maintain

    memory, timer = await open_store(tmp_path)
    memory.storage.compaction.quiet_after = 0.01
    running, most = 0, 0
    tables = [t.table for t in memory.storage.tables.values()] + [memory.storage.history, *memory.storage.search_tables()]
    for table in tables:
        for name in ("optimize", "create_index"):
            def counted(real=getattr(table, name)):
                async def call(*args: Any, **kwargs: Any) -> Any:
                    nonlocal running, most
                    running += 1
                    most = max(most, running)
                    try:
                        return await real(*args, **kwargs)
                    finally:
                        running -= 1
                return call
            setattr(table, name, counted())
    records = [record for _, record in make_records(3_000)]
    await memory.add(SCOPE, records, actor="test")  # episodic, semantic, history and the shared table are due at once
    await asyncio.gather(memory.storage.settle(), maintain(memory.storage, min_rows=1_000))
    await memory.storage.settle()
    assert most == 1
    assert sum([await memory.storage.count(name) for name in memory.type_names]) == 3_000
    hits = await memory.search(records[0].index_text(), SCOPE, k=3)
    assert any(hit.record.id == records[0].id for hit in hits)


async def test_processes_of_one_store_take_turns_to_optimize_a_table(tmp_path):
    """Another process optimizing the table (its turn held: the lock file beside the tables) makes
    an automatic optimize skip its turn instead of meeting it as a commit conflict and redoing the
    rewrite; the commits it left are folded in at the next commit after the gap. An explicit
    optimize waits for the turn instead."""
    import fcntl
    import os

    from memos.store.lancedb.compaction import TURN_FILE

    memory, timer = await open_store(tmp_path)
    memory.storage.behind.journal = None  # each add commits its own rows
    table = memory.storage.type_table("episodic").table
    other = os.open(tmp_path / "db" / TURN_FILE.format(table.name), os.O_RDWR | os.O_CREAT)  # another process's hold
    fcntl.flock(other, fcntl.LOCK_EX)
    for n in range(25):
        await memory.add(SCOPE, Episode(actor="ann", summary=f"turn {n} about tea"), actor="test")
    await memory.storage.settle()
    assert await fragments(memory) == 25 and memory.storage.compaction.skipped == 1  # its turn skipped, nothing rewritten
    explicit = asyncio.create_task(memory.storage.compaction.optimize(table))
    await asyncio.sleep(0.3)
    assert not explicit.done() and await fragments(memory) == 25  # waits for the turn
    os.close(other)  # the other process is done
    await explicit
    assert await fragments(memory) == 1
    timer.now += 5  # the explicit optimize rested
    fcntl.flock(other := os.open(tmp_path / "db" / TURN_FILE.format(table.name), os.O_RDWR), fcntl.LOCK_EX)
    for n in range(25, 50):
        await memory.add(SCOPE, Episode(actor="ann", summary=f"turn {n} about tea"), actor="test")
    await memory.storage.settle()
    assert await fragments(memory) == 26 and memory.storage.compaction.skipped == 2
    os.close(other)
    timer.now += 5  # past the gap: the next commit folds in what the skipped turn left
    await memory.add(SCOPE, Episode(actor="ann", summary="turn 50 about tea"), actor="test")
    await memory.storage.settle()
    assert await fragments(memory) <= 2 and memory.storage.retries.conflicts == 0
    assert await memory.storage.count("episodic") == 51
    hits = await memory.search("turn 44 about tea", SCOPE, k=3)
    assert hits and hits[0].record.summary == "turn 44 about tea"


async def test_a_table_committed_to_many_times_a_second_keeps_fewer_old_versions(tmp_path, monkeypatch):
    """LanceDB's cleanup reads every version it keeps at each optimize (~0.1 ms a version): a
    server's shared search table, 20-60 commits a second, kept ten minutes' worth of versions, and
    under a sustained load its optimizes grew to seconds and its throughput fell by three quarters
    in five minutes. An automatic optimize now keeps about `KEPT_VERSIONS` commits' worth of time
    at the table's pace (`MIN_KEEP` at least); a table committed to now and then keeps
    `KEEP_VERSIONS`, as before. (Here 10 versions and no floor, so that seconds of a test show it.)"""
    assert keep_versions(25, 2_400.0) == KEEP_VERSIONS  # one commit every 96 s: ten minutes
    assert keep_versions(600, 10.0) == MIN_KEEP  # 60 a second: 8.3 s of them, 30 s at least
    assert keep_versions(0, 0.0) == KEEP_VERSIONS  # the pace is unknown
    monkeypatch.setattr(compaction, "KEPT_VERSIONS", 10)
    monkeypatch.setattr(compaction, "MIN_KEEP", timedelta(0))
    memory, timer = await open_store(tmp_path)
    memory.storage.behind.journal = None  # each add commits its own rows
    table = memory.storage.type_table("episodic").table

    for n in range(25):  # one commit every 100 s: the 25th is optimized, keeping 10 minutes
        timer.now += 100
        await memory.add(SCOPE, Episode(actor="ann", summary=f"slow turn {n}"), actor="test")
    await memory.storage.settle()
    slow = len(await table.list_versions())
    assert slow > 25  # every version of the slow commits is still there

    for n in range(25):  # 20 commits a second: keep what 10 of them take, 0.5 s
        timer.now += 0.05
        if n == 24:
            await asyncio.sleep(0.6)  # (the cleanup goes by the wall clock)
        await memory.add(SCOPE, Episode(actor="ann", summary=f"fast turn {n}"), actor="test")
    await memory.storage.settle()
    assert len(await table.list_versions()) <= 5  # the versions older than 0.5 s are gone
    assert await memory.storage.count("episodic") == 50
    hits = await memory.search("slow turn 7", SCOPE, k=3)
    assert hits and hits[0].record.summary == "slow turn 7"


async def layout(memory: MemoryOS, store: str = "episodic") -> tuple[list[int], int]:
    """The table's fragment ids and its full-text index's parts, read with pylance (the test extra has it)."""
    import lance

    dataset = lance.dataset(await memory.storage.type_table(store).table.uri())
    parts = next(len(index.segments) for index in dataset.describe_indices() if index.field_names == ["text"])
    return [fragment.fragment_id for fragment in dataset.get_fragments()], parts


async def chat(memory: MemoryOS, timer: Timer, first: int, turns: int = COMPACT_EVERY) -> None:
    """`turns` one-row commits a second apart: the last is an optimize's."""
    memory.storage.behind.journal = None  # each add commits its own row
    for n in range(first, first + turns):
        timer.now += 1.0
        await memory.add(SCOPE, Episode(actor="ann", summary=f"turn {n}: ann asked about the ferry"), actor="test")
    await memory.storage.settle()


async def test_an_automatic_optimize_rewrites_the_new_rows_not_the_table(tmp_path, monkeypatch):
    """LanceDB's `optimize` merged every fragment under 1M rows and merged each index whole: every
    optimize rewrote the table, and under a sustained load a server's optimizes grew with its store
    until they took most of its CPU. With pylance, an automatic optimize merges only fragments
    under `FRAGMENT_ROWS` and adds the new rows to each index as a part of its own, merging the
    parts only once there are `INDEX_DELTAS` (for a table of `INDEX_DELTAS * DELTA_ROWS` rows or
    more: `DELTA_ROWS` is scaled down here so that 3,000 rows are one); what a search finds is the same."""
    monkeypatch.setattr(compaction, "DELTA_ROWS", 3_000 // INDEX_DELTAS)
    assert compaction.index_parts_allowed(3_000) == INDEX_DELTAS
    memory, timer = await open_store(tmp_path)
    await add_then_rest(memory, timer, episodes(3_000, "base"))
    (base,), before = await layout(memory)
    assert before < INDEX_DELTAS - 1

    await chat(memory, timer, 0)
    fragments_now, parts = await layout(memory)
    assert fragments_now[0] == base and len(fragments_now) == 2  # the 3,000 rows left where they were; the 25 turns in one
    assert parts == before + 1 and await unindexed(memory) == 0  # the turns indexed as a part of their own

    rounds = INDEX_DELTAS - before
    for round_ in range(1, rounds):
        await chat(memory, timer, round_ * COMPACT_EVERY)
    fragments_now, parts = await layout(memory)
    assert parts == INDEX_DELTAS and fragments_now[0] == base
    await chat(memory, timer, rounds * COMPACT_EVERY)
    fragments_now, parts = await layout(memory)
    assert parts == 1 and await unindexed(memory) == 0  # the parts merged into one
    assert fragments_now[0] == base  # and still no rewrite of the large fragment

    assert await memory.storage.count("episodic") == 3_000 + (rounds + 1) * COMPACT_EVERY
    last = rounds * COMPACT_EVERY + 3  # a turn of the last round
    for summary in ("turn 3: ann asked about the ferry", f"turn {last}: ann asked about the ferry", "base 2718: ann walked to the harbour"):
        hits = await memory.search(summary, SCOPE, k=3)
        assert hits and hits[0].record.summary == summary


def test_a_smaller_table_keeps_fewer_index_parts():
    """An index is merged after one part per `DELTA_ROWS` rows of its table, from every optimize
    (under `DELTA_ROWS` rows) to `INDEX_DELTAS` parts: a merge costs in proportion to the table,
    each part costs every search."""
    allowed = compaction.index_parts_allowed
    assert [allowed(rows) for rows in (0, 800, DELTA_ROWS - 1, DELTA_ROWS, 3 * DELTA_ROWS + 5)] == [1, 1, 1, 1, 3]
    assert allowed(INDEX_DELTAS * DELTA_ROWS) == allowed(10**9) == INDEX_DELTAS


async def test_a_small_tables_index_stays_one_part_and_its_fragments_merge(tmp_path):
    """A table under `DELTA_ROWS` rows (a new server's shared search table) has its index merged at
    every automatic optimize: one part, so the fragments it covers merge at the next optimize, and
    a search reads one part and a few fragments instead of up to `INDEX_DELTAS` of each."""
    memory, timer = await open_store(tmp_path)
    await add_then_rest(memory, timer, episodes(1_200, "base"))  # over `INDEX_EVERY_ROWS`: indexed at once
    assert (await layout(memory))[1] == 1 and await unindexed(memory) == 0
    for round_ in range(4):
        await chat(memory, timer, round_ * COMPACT_EVERY)
        fragments_now, parts = await layout(memory)
        assert parts == 1 and await unindexed(memory) == 0
        assert len(fragments_now) <= 2  # the rows indexed before this optimize in one, its new rows in the other
    assert await memory.storage.count("episodic") == 1_200 + 4 * COMPACT_EVERY
    for summary in ("turn 3: ann asked about the ferry", f"turn {3 * COMPACT_EVERY + 7}: ann asked about the ferry",
                    "base 271: ann walked to the harbour"):
        hits = await memory.search(summary, SCOPE, k=3)
        assert hits and hits[0].record.summary == summary


async def indexed_columns(table: Any) -> set[str]:
    return {column for index in await table.list_indices() for column in index.columns}


async def test_automatic_optimizes_build_the_scalar_indexes_a_table_needs(tmp_path):
    """A server's shared search table got its scope and status indexes only from the maintenance
    job, so until someone scheduled it every search read those columns fragment by fragment. Now
    an automatic optimize builds them: for a table this process searches at `SEARCHED_SCALAR_ROWS`
    rows, for the others at `SCALAR_MIN_ROWS`, as the maintenance job does; searches find the same."""
    memory, timer = await open_store(tmp_path)
    await add_then_rest(memory, timer, episodes(300, "base"))  # one commit, under every threshold: no optimize yet
    assert (await memory.search("base 17: ann walked to the harbour", SCOPE, k=1))[0].record.summary == "base 17: ann walked to the harbour"
    shared = memory.storage.search.table
    episodic = memory.storage.type_table("episodic").table
    assert await indexed_columns(shared) == {"text"}

    await chat(memory, timer, 0)  # the shared table, searched, is optimized at 325 rows; the store is not searched
    assert await indexed_columns(shared) == {"text", *SHARED_INDEXES}
    assert await indexed_columns(episodic) == {"text"}  # under `SCALAR_MIN_ROWS`

    await add_then_rest(memory, timer, episodes(SCALAR_MIN_ROWS, "more"))
    assert await indexed_columns(episodic) == {"text", *STORE_INDEXES}
    assert await indexed_columns(memory.storage.history) == set()  # no scope search reads the history this way
    for summary in ("base 17: ann walked to the harbour", "turn 11: ann asked about the ferry", "more 999: ann walked to the harbour"):
        hits = await memory.search(summary, SCOPE, k=1)
        assert hits and hits[0].record.summary == summary
    assert not await memory.search("turn 11: ann asked about the ferry", Scope("someone-else"), k=3)


async def test_without_pylance_an_automatic_optimize_is_lancedbs_own(tmp_path, monkeypatch):
    """pylance comes with the `serve` extra; without it (or on object storage) an automatic
    optimize is LanceDB's `optimize`, as before: the index merged whole, and the table rewritten
    one step behind (the fragments the index covers are merged, all under its one part)."""
    monkeypatch.setattr(compaction, "pylance", lambda: None)
    memory, timer = await open_store(tmp_path)
    await add_then_rest(memory, timer, episodes(3_000, "base"))
    (base,), _ = await layout(memory)
    await chat(memory, timer, 0)
    fragments_now, parts = await layout(memory)
    assert fragments_now[0] == base and parts == 1  # the new rows apart: not indexed when merged
    await chat(memory, timer, COMPACT_EVERY)
    fragments_now, parts = await layout(memory)
    assert base not in fragments_now and parts == 1  # now the 3,000 rows were rewritten with the first round's
    assert await unindexed(memory) == 0
    hits = await memory.search("turn 3: ann asked about the ferry", SCOPE, k=3)
    assert hits and hits[0].record.summary == "turn 3: ann asked about the ferry"
