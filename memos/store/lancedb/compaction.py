"""When a table is optimized: compaction of its fragments, new rows folded into its indexes.

Each commit adds a data fragment and a version whose manifest lists every fragment, so an
uncompacted table grows on disk and slows down (rows not yet in the full-text index are scanned
per query). An optimize costs in proportion to the table, though: it rewrites fragments and
merges indexes whole. `Compaction` decides when one is due and runs it in the background, off
the write path, one per table at a time and one rewrite per store at a time. Several processes
writing one local store (`memos serve --workers N`) take turns per table: an automatic optimize
that finds another process's optimize of the table running skips its turn, since that one folds
in every commit before it (`_OptimizeTurn`, a lock file beside the tables); before, the two rewrites met as commit conflicts and
one of them was redone.

Benchmark figures behind each constant are in docs/benchmarks.md (compaction policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from memos._sync import best_effort, exiting
from memos.store.schema import VECTOR_COLUMN

from ._malloc import release_free_memory
from .scalar_indexes import SCALAR_MIN_ROWS, SEARCHED_SCALAR_ROWS, scalar_indexes
from .write_behind import closing

__all__ = [
    "CLEANUP_GAP",
    "COMPACT_DUTY",
    "COMPACT_EVERY",
    "COMPACT_GAP",
    "COMPACT_GROWTH",
    "Compaction",
    "DELTA_ROWS",
    "FRAGMENTS",
    "FRAGMENT_ROWS",
    "HISTORY_COMPACT_EVERY",
    "INDEX_DELTAS",
    "INDEX_EVERY_ROWS",
    "KEEP_VERSIONS",
    "KEPT_VERSIONS",
    "MAX_COMMITS",
    "MIN_KEEP",
    "QUIET_AFTER",
    "SEARCHED_COMMIT_ROWS",
    "SEARCHED_COMPACT_DUTY",
    "SEARCHED_COMPACT_EVERY",
    "SEARCHED_COMPACT_GAP",
    "SMALL_COMMIT_ROWS",
    "ending",
    "index_parts_allowed",
    "keep_versions",
    "pylance",
]

log = logging.getLogger("memos.store.lancedb.compaction")
T = TypeVar("T")

COMPACT_EVERY = 25
"""Small commits to a table between automatic optimizes: trades a search's scan of one-row
fragments against the background CPU of folding them in."""
HISTORY_COMPACT_EVERY = 250
"""The same for the history table, which no search reads: compacting it rewrites it whole."""
INDEX_EVERY_ROWS = 1_000
"""Rows written to a table before its indexes are brought up to date, at least."""
COMPACT_GROWTH = 0.25
"""...and at most this fraction of the rows the table held at its last optimize: a bulk load of
n rows rewrites ~5n rows in all instead of ~n^2 / 2,000."""
SMALL_COMMIT_ROWS = 4
"""Commits of at most this many rows on average (a chat's turns) are optimized every
`COMPACT_EVERY` commits; larger ones wait for `COMPACT_GROWTH` or `MAX_COMMITS`."""
SEARCHED_COMMIT_ROWS = 32
"""The same for a table this process searches (the shared search table of a server): the adds
of a few dozen concurrent callers, committed together, are folded in every
`SEARCHED_COMPACT_EVERY` commits, since every search scans each commit left outside the
indexes; a bulk load's larger commits still wait."""
SEARCHED_COMPACT_EVERY = 10
"""`COMPACT_EVERY` for a table this process searches: each commit outside its full-text index
costs every search of it a scan, and such a table (the shared search table of a server) is
searched several times a commit."""
SEARCHED_COMPACT_DUTY = 1.5
"""`COMPACT_DUTY` for a table this process searches."""
SEARCHED_COMPACT_GAP = 0.1
"""`COMPACT_GAP` for a table this process searches: a server commits to its shared search table
30-60 times a second, so a second between optimizes left 11-14 commits on average (up to 35)
outside the full-text index for each search to scan, 7 with this gap; `SEARCHED_COMPACT_DUTY`
still spaces a large table's optimizes (docs/benchmarks.md, "optimized 0.1 s apart")."""
MAX_COMMITS = 200
"""Commits after which a table is optimized whatever their size (fragments stay bounded)."""
COMPACT_DUTY = 4.0
"""An optimize starts no sooner than this many times the previous one's duration after it ended:
a burst of writes spends at most a fifth of a core on a table's optimizes."""
COMPACT_GAP = 1.0
"""Seconds between two automatic optimizes of one table, at least."""
QUIET_AFTER = 2.0
"""Seconds without a commit after which what the spacing holds back is folded in anyway."""
KEEP_VERSIONS = timedelta(minutes=10)
"""How long automatic compaction keeps old table versions at most (readers still on one can finish)."""
KEPT_VERSIONS = 500
"""Old versions an automatic optimize keeps, about, of a table committed to many times a second
(`keep_versions`): LanceDB's cleanup reads every version it keeps at each optimize, ~0.1 ms a
version (in process 78 -> 417 ms an optimize over 3,900 versions), and 10 minutes of a server's
shared search table, 20-60 commits a second, are tens of thousands of versions."""
MIN_KEEP = timedelta(seconds=30)
"""...but never for less than this: a read or a write of another process still on an old version
is tried again on the latest if its files went (`errors.retrying`); 30 s is 30 times the staleness
a read allows (`storage.READ_CONSISTENCY`)."""


FRAGMENT_ROWS = 2_048
"""An automatic optimize merges only fragments under this many rows (or a 64th of the table, if
more), so it rewrites the new commits and the last partial fragment, not the table. LanceDB's own
`optimize` merges every fragment under 1M rows: the whole table, at every optimize, a cost that
grew with the table until a server under a sustained load spent most of its CPU on it
(docs/benchmarks.md, "Optimizes that do not grow with the table")."""
FRAGMENTS = 64
"""...a 64th of the table: a table of millions of rows keeps its fragments (and a scan's count
of them) in the tens of thousands of rows, while each optimize rewrites at most that much."""
INDEX_DELTAS = 8
"""Parts an index (other than a vector index) may have before an automatic optimize merges them into
one: the others add the new rows to an index as a part of its own (a delta) instead of merging
the whole index again, which for the full-text index cost in proportion to the table. A search
reads every part. The maintenance job's optimize is LanceDB's own, which compacts whole."""
DELTA_ROWS = 2_048
"""...fewer parts for a smaller table (`index_parts_allowed`): one per this many rows. A merge costs
in proportion to the table, so merging every `rows / DELTA_ROWS` optimizes costs about what
indexing this many rows does, each optimize; a table under it is merged at every optimize. Each
part costs a search ~0.3-0.4 ms of CPU and keeps the fragments under it from merging with others
(docs/benchmarks.md, "A small table's index in one part")."""
CLEANUP_GAP = 10.0
"""Seconds between two removals of a table's old versions by automatic optimizes, unless
`KEPT_VERSIONS` commits came since the last: LanceDB's cleanup reads every version it keeps
(~0.1-0.2 ms a version), so at every optimize of a table committed to many times a second it
cost more than the optimize itself."""


def pylance() -> Any:
    """The `lance` package (pylance, the `serve` extra: `memos.store.lancedb.compaction`'s bounded
    optimizes need its compaction target and delta indexes), or None: LanceDB's own `optimize`."""
    try:
        import lance
    except ImportError:
        return None
    return lance


def keep_versions(commits: int, seconds: float) -> timedelta:
    """How long an automatic optimize keeps a table's old versions, the table having had `commits`
    commits in this process in the last `seconds`: `KEEP_VERSIONS`, or as long as `KEPT_VERSIONS`
    of its commits take at that pace if that is shorter, `MIN_KEEP` at least. (Other processes'
    commits to the table are not counted: with several writing it, more versions stay.)"""
    if commits <= 0 or seconds <= 0:
        return KEEP_VERSIONS
    return max(MIN_KEEP, min(KEEP_VERSIONS, timedelta(seconds=KEPT_VERSIONS * seconds / commits)))


def index_parts_allowed(rows: int) -> int:
    """How many parts an index of a table of `rows` rows may have before an automatic optimize merges
    them: one per `DELTA_ROWS` rows, 1 to `INDEX_DELTAS` (1: merged at every optimize)."""
    return max(1, min(INDEX_DELTAS, rows // DELTA_ROWS))


def ending() -> bool:
    """Whether the process or this event loop is ending (`memos._sync.exiting`, `write_behind.closing`):
    no automatic compaction starts then; one would outlive the loop and abort the interpreter."""
    return exiting() or closing()


@dataclass
class _Schedule:
    """One table's compaction bookkeeping."""

    commits: int = 0
    rows: int = 0  # rows written since the last optimize
    sized: int = 0  # rows at the last automatic optimize
    resting_until: float = float("-inf")
    running: asyncio.Task[None] | None = None
    quiet: asyncio.TimerHandle | None = None
    searched: bool = False
    scalars: bool = False  # its scalar indexes are there (`_scalar_indexes`)
    hooks: list[weakref.WeakMethod[Callable[[], Awaitable[None]]]] = field(default_factory=list)
    paced: int = 0  # commits since `paced_since` (the start of the last optimize, or the first commit)
    paced_since: float | None = None
    cleaned_at: float = float("-inf")  # when an automatic optimize last removed the table's old versions
    uncleaned: int = 0  # commits since then

    def spacing(self) -> tuple[float, float]:
        """(duty, gap): how long an optimize of this table rests after the last, as a multiple of that
        one's duration and in seconds at least (`COMPACT_DUTY`, `COMPACT_GAP`; their SEARCHED_ twins)."""
        return (SEARCHED_COMPACT_DUTY, SEARCHED_COMPACT_GAP) if self.searched else (COMPACT_DUTY, COMPACT_GAP)


TURN_FILE = ".memos-optimize-{}"
"""The lock file, beside the tables, that the processes of one local store take turns on to
optimize a table (an empty file; `flock`)."""
TURN_POLL = 0.05
"""Seconds between two looks at a busy turn by an optimize that waits for it."""


class _OptimizeTurn:
    """One table's optimize turn among the processes of the local store at `root` (always this
    process's for an object-storage store, which has none). Held from `take` to `release`."""

    def __init__(self, root: Path | None, table: str) -> None:
        self.path = None if root is None else root / TURN_FILE.format(table)
        self._fd: int | None = None

    async def take(self, wait: bool) -> bool:
        """Whether the turn is now this process's: at once, or (`wait`) once the process holding it
        is done; polled, so a cancelled wait leaves nothing held."""
        if self.path is None:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:  # no turns to take (a read-only copy, say): optimize as before them
            log.debug("optimize turn file %s unusable (%s)", self.path, exc)
            return True
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if wait:
                    try:
                        await asyncio.sleep(TURN_POLL)
                    except BaseException:
                        os.close(fd)
                        raise
                    continue
                os.close(fd)
                return False
            self._fd = fd
            return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file releases its lock
            self._fd = None


class Compaction:
    """Counts each table's commits and optimizes it in the background when due.

    `write` runs one write the way the store does (lease, conflict retries); the optimize goes
    through it like any other write. `root` is a local store's directory, where its processes
    take turns to optimize a table (None: an object-storage store, no turns)."""

    def __init__(self, write: Callable[[Any, Callable[[], Awaitable[Any]]], Awaitable[Any]], root: Path | None = None) -> None:
        self._write = write
        self.root = root
        self.skipped = 0
        """Automatic optimizes skipped because another process was optimizing the table."""
        self._tables: dict[str, _Schedule] = {}
        self._rewrite_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.timer: Callable[[], float] = time.monotonic
        """The clock of the optimizes' spacing (`COMPACT_DUTY`); tests replace it."""
        self.quiet_after = QUIET_AFTER
        """Seconds (of the event loop's clock) a table's writes pause before held-back rows are folded in."""

    def _of(self, table: Any) -> _Schedule:
        return self._tables.setdefault(table.name, _Schedule())

    async def committed(self, table: Any, rows: int = 0, every: int = COMPACT_EVERY) -> None:
        """Count a commit of `rows` rows, and start the table's optimize when it is due: after `every`
        small commits, after new rows worth `COMPACT_GROWTH` of the table (at least
        `INDEX_EVERY_ROWS`), or after `MAX_COMMITS`; never sooner than `COMPACT_DUTY` times the
        previous one's duration after it. What that holds back is folded in once the table's
        writes pause for `quiet_after` seconds. The write it follows has committed: this returns at once."""
        state, loop = self._of(table), asyncio.get_running_loop()
        if state.searched:
            every = min(every, SEARCHED_COMPACT_EVERY)
        state.commits += 1
        state.rows += rows
        state.paced += 1
        state.uncleaned += 1
        if state.paced_since is None:
            state.paced_since = self.timer()
        if ending():  # the next writer or the maintenance job does it
            return
        if self._due(state, every) and self.timer() >= state.resting_until and self._start(table, state, loop):
            return
        if state.commits >= every or state.rows >= INDEX_EVERY_ROWS:  # held back: fold in once writes pause
            if state.quiet is not None:
                state.quiet.cancel()
            state.quiet = loop.call_later(self.quiet_after, self._quietly, table, state, loop)

    @staticmethod
    def _due(state: _Schedule, every: int) -> bool:
        commits, rows = state.commits, state.rows
        small = SEARCHED_COMMIT_ROWS if state.searched else SMALL_COMMIT_ROWS
        return ((commits >= every and rows <= small * commits) or commits >= max(every, MAX_COMMITS)
                or rows >= max(INDEX_EVERY_ROWS, COMPACT_GROWTH * state.sized))

    def _start(self, table: Any, state: _Schedule, loop: asyncio.AbstractEventLoop) -> bool:
        """Start a table's optimize in the background, unless one is in flight."""
        if state.running is not None and not state.running.done() and state.running.get_loop() is loop:
            return False
        if state.quiet is not None:
            state.quiet.cancel()
            state.quiet = None
        state.commits = state.rows = 0
        state.running = best_effort(loop.create_task(self._optimize(table, state)))
        return True

    def _quietly(self, table: Any, state: _Schedule, loop: asyncio.AbstractEventLoop) -> None:
        """A table's writes paused for `quiet_after` seconds: fold in what is still held back."""
        state.quiet = None
        if ending():
            return
        if (state.commits or state.rows) and not self._start(table, state, loop):
            state.quiet = loop.call_later(self.quiet_after, self._quietly, table, state, loop)  # one in flight: later

    async def rewrite(self, table: Any, op: Callable[[], Awaitable[T]]) -> T:
        """A write that rewrites or indexes a table (an optimize, an index build): one at a time in this store."""
        async with self.rewriting():
            return await self._write(table, op)

    @contextlib.asynccontextmanager
    async def rewriting(self) -> AsyncIterator[None]:
        """Hold this store's one slot for rewriting or indexing a table: each such write holds
        hundreds of MB while it runs, so they never stack. The heap it freed goes back to the
        operating system when it completes (`memos.store.lancedb._malloc`)."""
        loop = asyncio.get_running_loop()
        if self._rewrite_lock is None or self._rewrite_lock[0] is not loop:
            self._rewrite_lock = (loop, asyncio.Lock())
        async with self._rewrite_lock[1]:
            yield
            # not when it failed or was cancelled, nor once the loop's executor has shut down
            with contextlib.suppress(RuntimeError):
                await asyncio.to_thread(release_free_memory)

    async def _optimize(self, table: Any, state: _Schedule, wait: bool = False) -> None:
        async with self.rewriting():  # its duration below is its own, not the wait for the slot
            turn = _OptimizeTurn(self.root, table.name)
            if not await turn.take(wait):
                self.skipped += 1  # another process optimizes the table now, most of these commits included
                state.commits += MAX_COMMITS  # the rest: due again after the gap (or once writes pause)
                state.resting_until = self.timer() + state.spacing()[1]
                return
            try:
                started = self.timer()
                keep = keep_versions(state.paced, started - state.paced_since if state.paced_since is not None else 0.0)
                state.paced, state.paced_since = 0, started
                try:
                    await self._fold_in(table, state, keep)
                    state.sized = await table.count_rows()
                    await self._scalar_indexes(table, state)
                except (OSError, RuntimeError, ValueError) as exc:  # incl. memos' storage errors: the writes have committed
                    state.commits += MAX_COMMITS  # due again at the next commit
                    log.warning("automatic compaction of %s skipped (%s); the next one or the maintenance job does it",
                                table.name, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                ended = self.timer()
            finally:
                turn.release()
        duty, gap = state.spacing()
        state.resting_until = ended + max(gap, duty * (ended - started))
        if state.searched:
            await _prewarm(table)
        hooks, state.hooks = state.hooks, []
        for ref in hooks:
            if (hook := ref()) is not None and not ending():
                try:
                    await hook()
                except Exception as exc:  # a read ahead of need: the reader reads it when it needs it
                    log.debug("a read after optimizing %s skipped (%s)", table.name, exc)

    async def _scalar_indexes(self, table: Any, state: _Schedule) -> None:
        """Build the scalar indexes a table lacks once it has `SCALAR_MIN_ROWS` rows
        (`SEARCHED_SCALAR_ROWS` if this process searches it), as the maintenance job would: a server's
        shared search table would otherwise go without them until someone runs that job, and every
        search would read its scope and status columns fragment by fragment. Later optimizes keep
        them up to date with the other indexes."""
        if state.scalars or state.sized < (SEARCHED_SCALAR_ROWS if state.searched else SCALAR_MIN_ROWS):
            return
        wanted = scalar_indexes((await table.schema()).names)
        indexed = {tuple(index.columns) for index in await table.list_indices()}
        for column, (_, config) in wanted.items():
            if (column,) not in indexed:
                await self._write(table, functools.partial(table.create_index, column, config=config(), replace=True))
        state.scalars = True

    async def _fold_in(self, table: Any, state: _Schedule, keep: timedelta) -> None:
        """One automatic optimize of a local table: its small fragments merged (`FRAGMENT_ROWS`), the
        new rows added to each index as a part of its own or all its parts merged (`index_parts_allowed`),
        its versions older than `keep` removed (every `CLEANUP_GAP`). Without pylance, or on object
        storage, LanceDB's own `optimize`, which rewrites the table and merges its indexes whole."""
        lance = pylance() if self.root is not None else None
        if lance is None:
            await self._write(table, lambda: table.optimize(cleanup_older_than=keep))
            return
        cleanup = self.timer() >= state.cleaned_at + CLEANUP_GAP or state.uncleaned >= KEPT_VERSIONS
        target = max(FRAGMENT_ROWS, state.sized // FRAGMENTS)

        uri = await table.uri()

        def run() -> range:
            dataset = lance.dataset(uri)
            start = dataset.version
            dataset.optimize.compact_files(target_rows_per_fragment=target)
            indexes = dataset.describe_indices()
            vectors = [index.name for index in indexes if index.field_names == [VECTOR_COLUMN]]
            parts = {index.name: len(index.segments) for index in indexes if index.field_names != [VECTOR_COLUMN]}
            allowed = index_parts_allowed(state.sized)
            deltas = [name for name, n in parts.items() if n < allowed]
            merged = [name for name, n in parts.items() if n >= allowed]
            if deltas:
                dataset.optimize.optimize_indices(index_names=deltas, num_indices_to_merge=0)
            if merged:
                dataset.optimize.optimize_indices(index_names=merged, num_indices_to_merge=max(parts[n] for n in merged))
            if vectors:  # as LanceDB's optimize does it (`indexing.MAX_INDEX_PARTS` bounds the parts)
                dataset.optimize.optimize_indices(index_names=vectors)
            if cleanup:
                dataset.cleanup_old_versions(older_than=keep)
            return range(start + 1, dataset.version + 1)  # the versions it committed (and any another process did meanwhile)

        await self._write(table, lambda: asyncio.to_thread(run))
        if cleanup:
            state.cleaned_at, state.uncleaned = self.timer(), 0
        await table.checkout_latest()  # the commits were pylance's: this handle has not seen them

    async def optimize(self, table: Any) -> None:
        """Optimize `table` now, as an automatic optimize does (its prewarm and hooks included),
        after another process's optimize of it if one is running."""
        await self._optimize(table, self._of(table), wait=True)

    def after_optimize(self, table: Any, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook`, a bound method held weakly, once the table's next automatic optimize in this
        process has ended (an optimize makes every remembered read of the table look stale)."""
        self._of(table).hooks.append(weakref.WeakMethod(hook))

    def searching(self, table: Any) -> None:
        """`table` is searched in this process: its indexes are loaded again after each automatic optimize."""
        self._of(table).searched = True

    async def settle(self) -> None:
        """Wait for the background optimizes this loop started."""
        loop = asyncio.get_running_loop()
        while running := [s.running for s in self._tables.values()
                          if s.running is not None and not s.running.done() and s.running.get_loop() is loop]:
            await asyncio.wait(running)


async def _prewarm(table: Any) -> None:
    """Load a searched table's indexes, which an optimize has just rebuilt, before a search needs them."""
    try:
        for index in await table.list_indices():
            await table.prewarm_index(index.name)
    except (OSError, RuntimeError, ValueError) as exc:  # a search loads them anyway
        log.debug("prewarming the indexes of %s skipped (%s)", table.name, exc)
