"""The LanceDB layer: one table per memory type, a history (audit) table and a meta table.

`Storage` owns the connection and nothing else: it writes and reads rows, runs the two
kinds of search (vector, native full-text) and keeps the audit trail. It knows no scope
semantics beyond the `where` strings `memos.store.scope.Where` builds, and no ranking.

Meta holds the embedder's name and dimension (a mismatch on reopen is a clear error that
names `memos reindex`) and the physical table of each memory type, so a re-index can build
new tables and switch to them in one meta write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import re
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from . import _lance  # noqa: F401  (before LanceDB: defers its REST client)
import lancedb
import pyarrow as pa
from lancedb.index import Bitmap, BTree, IvfHnswSq

from memos.memtypes import MemoryRecord, new_id

from ._malloc import release_free_memory
from memos._sync import best_effort, exiting
from memos.embeddings import TextEmbedder
from memos.exceptions import EmbeddingDimensionError, RecordChangedError, StoreFullError, StoreUnavailableError
from memos.store.fulltext import FORM, MARK, has_cjk, index_form, plain_text, text_index, text_index_config
from .journal import Journal, orphans, read_frames
from .lease import StoreLease, local_path
from memos.store.read_cache import ReadCache
from memos.store.scope import sql_in, sql_string
from memos.store.schema import VECTOR_COLUMN, arrow_schema, arrow_table, json_columns, record_from_row, row_from_record
from .search_index import SearchIndex
from .write_behind import HISTORY, STATE, WriteBehind, closing

__all__ = ["DEFAULT_DIM", "HISTORY_SCHEMA", "HistoryEntry", "META", "Storage", "TypeTable", "arrow_rows", "history_row", "is_conflict", "retry_conflicts", "storage_error", "vector_index"]

log = logging.getLogger("memos.store.lancedb.storage")

COMPACT_EVERY = 25
"""Commits to a table between automatic compactions. Every commit of a chat turn is a one-row
fragment that each search of the table scans outside its indexes: on the 100k bench store a
top-30 search cost 72 ms of CPU compacted, 93 ms with 30 such fragments, 154 ms with 200 (the
old interval), while folding them in costs 0.1-0.5 s of CPU in the background (README, issue 18)."""
HISTORY_COMPACT_EVERY = 250
"""The same for the history table, which no search or chat step reads: compacting it rewrites
the whole table (a compaction merges every fragment below LanceDB's 1M-row target; on the 100k
bench store 0.5 s of CPU each time), so at `COMPACT_EVERY` a chat spent ~40 ms of background
CPU per turn on it, competing with the turns themselves (README, issue 18)."""
INDEX_EVERY_ROWS = 1_000
"""Rows written to a table before its indexes are brought up to date (with a compaction), at least."""
COMPACT_GROWTH = 0.25
"""...and at most this fraction of the rows the table held at its last automatic optimize. An
optimize rewrites the table's fragments that carry the same indexes (on a table with only its
full-text index, every fragment: the whole table) and merges its full-text and scalar indexes
whole, so its cost grows with the table. Spaced by a share of the table, the optimizes of a bulk
load of n rows rewrite ~n(1 + 1/0.25) rows in all instead of ~n^2 / (2 * 1,000); a `bench scale`
of 100k records left 2,307 versions and 7.1 GB of rewritten files in the shared table alone
(README, issue 18)."""
SMALL_COMMIT_ROWS = 4
"""Commits of at most this many rows on average (a chat's turns, one at a time) are compacted every
`COMPACT_EVERY` commits: it is their fragment count that slows searches, not their rows. Larger
commits (a bulk load) wait for `COMPACT_GROWTH` or `MAX_COMMITS`."""
MAX_COMMITS = 200
"""Commits to a table after which it is optimized whatever their size (fragments stay bounded)."""
COMPACT_DUTY = 4.0
"""An automatic optimize of a table starts no sooner than this many times the previous one's
duration after it ended (and `COMPACT_GAP` at least): during a burst of writes a table's background
optimizes use at most a fifth of a core; a chat, seconds between commits, never waits."""
COMPACT_GAP = 1.0
"""Seconds between two automatic optimizes of one table, at least."""
QUIET_AFTER = 2.0
"""Seconds without a commit to a table after which the rows and commits that the spacing above
still holds back are folded in anyway, once they are past `INDEX_EVERY_ROWS` or `COMPACT_EVERY`:
a bulk load's last rows (up to a quarter of the table) are indexed when it ends, not at the next
write. 20k records added to the 100k bench store left searches at p50 / p95 438 / 689 ms (164
fragments in the episodic table) until an optimize brought them back to 46 / 56 ms."""
KEEP_VERSIONS = timedelta(minutes=10)
"""How long automatic compaction keeps old table versions (readers still on one can finish)."""
CACHE_BYTES = {"index": 1024 * 2**20, "metadata": 64 * 2**20}
"""LanceDB's index and metadata caches, shared by every store a process opens (bounded memory).
A cache only holds what searches read, so the bound matters for large stores alone: at 100k
records search speed and peak memory were the same with 128 MB and 1 GB (~50 / 75-85 ms,
~320 MB), while at 1M records 128 MB evicted the full-text postings the next search needed
(search p50 / p95 175-234 / 282-292 ms, peak 706-713 MB; 512 MB: 103-113 / 151-204 ms;
1 GB: 67-73 / 80-101 ms, peak 975 MB). README, issue 18."""
PURGE_WAIT = 30.0
"""Seconds a purge waits for other processes' in-flight writes before it defers itself."""
PURGE_MARGIN = KEEP_VERSIONS
"""A deferred purge drops the versions older than this at the next maintenance run: no reader
or writer of any process still needs a version that old (see `memos.store.lancedb.lease`)."""
PENDING_PURGE = "purge:pending"
"""Meta key: when a purge that could not run at once was asked for (finished by maintenance)."""
READ_CONSISTENCY = timedelta(seconds=1)
"""How stale a read may be: other processes' commits (a worker's consolidation, another agent)
become visible within this interval without reopening the store."""
T = TypeVar("T")

DEFAULT_DIM = 384
_META = "_meta"
META = _META
"""The meta table's name in `Storage.versions()` and `Storage.reads`."""
_HISTORY = "_history"
_META_SCHEMA = pa.schema([pa.field("key", pa.string()), pa.field("value", pa.string())])
HISTORY_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("op", pa.string()),
        pa.field("memory_type", pa.string()),
        pa.field("record_id", pa.string()),
        pa.field("actor", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("agent_id", pa.string()),
        pa.field("session_id", pa.string()),
        pa.field("before", pa.string(), nullable=True),
        pa.field("after", pa.string(), nullable=True),
        pa.field("note", pa.string(), nullable=True),
    ]
)


@dataclass(frozen=True)
class HistoryEntry:
    """One audit row: what happened to a record, by whom and when (before/after as JSON)."""

    id: str
    at: datetime
    op: str
    memory_type: str
    record_id: str
    actor: str
    user_id: str
    agent_id: str
    session_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    note: str | None


@dataclass
class TypeTable:
    """A memory type bound to its open LanceDB table."""

    record_type: type[MemoryRecord]
    table: Any  # lancedb AsyncTable
    json_cols: frozenset[str]

    @property
    def name(self) -> str:
        return self.record_type.memory_type

    @functools.cached_property
    def result_columns(self) -> list[str]:
        """The columns a search returns: every field but the vector (rows come back without it)."""
        return [name for name in self.record_type.model_fields if name != VECTOR_COLUMN]

    def to_record(self, row: dict[str, Any]) -> MemoryRecord:
        record = record_from_row(self.record_type, row, self.json_cols)
        record.text = plain_text(record.text)
        return record

    def to_row(self, record: MemoryRecord, vector: list[float] | None) -> dict[str, Any]:
        row = row_from_record(record, vector, self.json_cols)
        row["text"] = index_form(row["text"] or "", record.index_text())  # Chinese words findable (memos.store.fulltext)
        return row


def is_conflict(exc: BaseException) -> bool:
    """Whether a LanceDB error is a commit conflict with another writer (retrying can succeed)."""
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text or "concurrent" in text


def _is_gone(exc: BaseException) -> bool:
    """A data, index or manifest file of the version a handle was on has been removed by a purge
    (or a compaction's cleanup): reading the latest version again succeeds."""
    text = str(exc).lower()
    return "not found" in text and (".lance" in text or ".idx" in text or "_versions" in text or "object at location" in text
                                    or "_indices" in text or ".manifest" in text)


_RUST_LOCATION = re.compile(r",?\s*/\S+\.rs:\d+(?::\d+)?")


def storage_error(exc: BaseException, uri: str) -> BaseException:
    """A LanceDB/OS failure as the memos error a user can act on (the original is its cause);
    anything else comes back unchanged."""
    text = _RUST_LOCATION.sub("", str(exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    low = text.lower()
    if "no space left" in low or "disk quota" in low:
        return StoreFullError(f"the disk holding the memos store {uri} is full; free some space and retry "
                              "(what was acknowledged before is kept)")
    if "permission denied" in low or "read-only file system" in low or isinstance(exc, PermissionError):
        return StoreUnavailableError(f"memos cannot write the store {uri}: permission denied or read-only; "
                                     "check the owner and mode of the directory")
    if _is_gone(exc) or isinstance(exc, FileNotFoundError):
        return StoreUnavailableError(f"a file of the memos store {uri} is missing ({text[:200]}); it was removed outside "
                                     "memos or by a cleanup that ignored other processes; restore the directory from a backup "
                                     "or export what still reads")
    return exc


async def retry_conflicts(op: Callable[[], Awaitable[T]], attempts: int = 12) -> T:
    """Run a LanceDB write, retrying commit conflicts with another writer (jittered backoff)."""
    for attempt in range(attempts):
        try:
            return await op()
        except Exception as exc:  # LanceDB raises plain RuntimeError/OSError for conflicts
            if not is_conflict(exc) or attempt == attempts - 1:
                raise
            await asyncio.sleep(min(1.0, 0.01 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


async def _holds_deleted(table: Any) -> bool:
    """Whether a table's latest version still keeps deleted rows inside its data files."""
    versions = await table.list_versions()
    latest = max(versions, key=lambda v: v["version"])
    return int((latest.get("metadata") or {}).get("total_deletion_file_rows") or 0) > 0


def vector_index(rows: int) -> IvfHnswSq:
    """The ANN index a table of `rows` rows gets (`memos.store.lancedb.indexing`): IVF-HNSW-SQ, cosine."""
    return IvfHnswSq(distance_type="cosine", num_partitions=max(1, min(256, rows // 4096)))


def _ending() -> bool:
    """Whether the process or this event loop is ending (`memos._sync.exiting`,
    `memos.store.lancedb.write_behind.closing`): no automatic compaction starts then, one would outlive the
    loop and abort the interpreter in its finalization."""
    return exiting() or closing()


_INDEX_CONFIGS: dict[str, Callable[[int], Any]] = {
    "BTree": lambda rows: BTree(), "Bitmap": lambda rows: Bitmap(),
    "FTS": lambda rows: text_index_config(), "IvfHnswSq": vector_index,
}
"""How to build each kind of index memos makes again, by LanceDB's index type name."""


class Storage:
    """An open memos database: typed tables, history and meta on one LanceDB connection."""

    history_schema = HISTORY_SCHEMA
    meta_schema = _META_SCHEMA

    def __init__(self, uri: str, conn: Any, meta: Any, history: Any, dim: int, embedder_name: str | None) -> None:
        self.uri = uri
        self.conn = conn
        self.meta = meta
        self.history = history
        self.dim = dim
        self.embedder_name = embedder_name
        self.tables: dict[str, TypeTable] = {}
        self._writes: dict[int, int] = {}
        self._pending: dict[int, int] = {}  # rows written since the table was last optimized
        self._optimizing: dict[int, asyncio.Task[None]] = {}  # a table's background optimize (`_committed`)
        self._sized: dict[int, int] = {}  # a table's rows at its last automatic optimize
        self._resting: dict[int, float] = {}  # when a table may be optimized again (`timer`)
        self._searched: set[int] = set()  # tables searched in this process (`searching`)
        self._after_optimize: dict[int, list[weakref.WeakMethod[Callable[[], Awaitable[None]]]]] = {}  # `after_optimize`
        self._quiet: dict[int, asyncio.TimerHandle] = {}  # a table's optimize once its writes pause (`QUIET_AFTER`)
        self._rewrite_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None  # `rewrite`: one at a time
        self.timer: Callable[[], float] = time.monotonic
        """The clock of the optimizes' spacing (`COMPACT_DUTY`); tests replace it."""
        self.quiet_after = QUIET_AFTER
        """Seconds (of the event loop's clock) a table's writes pause before held-back rows are folded in."""
        self._empty_checked: dict[str, float] = {}  # table -> when it was last seen empty (monotonic)
        self._nonempty: set[str] = set()
        self._names: set[str] | None = None  # tables present when the store was opened
        self.lease = StoreLease.for_uri(uri)
        self.reads = ReadCache()
        """Reads remembered at table versions; every write below reports its version to it."""
        self.search = SearchIndex(self, [])
        """The shared search table of the default stores, mirrored on every write (`memos.store.lancedb.search_index`)."""
        root = local_path(uri)
        self.behind = WriteBehind(self, Journal(root) if root is not None else None)
        """A chat turn's rows, journaled and written in batches (`memos.store.lancedb.write_behind`, `memos.store.lancedb.journal`)."""

    async def write(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 12) -> T:
        """Run one LanceDB write holding the purge lease shared (see `memos.store.lancedb.lease`): commit
        conflicts with other writers are retried with jittered backoff, a handle whose version a
        purge removed moves to the latest, and storage failures become memos errors."""
        await self.behind.barrier(table, read=False)
        async with self.lease.shared():
            return await self._retrying(table, op, attempts)

    async def read(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 4) -> T:
        """Run one LanceDB read; a version removed under it by a purge is re-read at the latest.
        Rows queued for the table (`behind`) are written first."""
        await self.behind.barrier(table, read=True)
        return await self._retrying(table, op, attempts)

    async def _retrying(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int) -> T:
        for attempt in range(attempts):
            try:
                return await op()
            except (OSError, RuntimeError, ValueError) as exc:  # LanceDB raises these for every storage failure
                gone, conflict = _is_gone(exc), is_conflict(exc)
                if not (gone or conflict) or attempt == attempts - 1:
                    error = storage_error(exc, self.uri)
                    if error is exc:
                        raise
                    raise error from exc
                if gone:
                    log.debug("a version under %s was purged; reading the latest (%s)", self.uri, exc)
                    await table.checkout_latest()
                await asyncio.sleep(min(1.0, 0.01 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    async def _committed(self, table: Any, rows: int = 0, every: int = COMPACT_EVERY) -> None:
        """Count a commit of `rows` rows, and optimize the table in the background when it is due:
        compact its fragments, fold the new rows into its indexes and drop old versions.

        Each commit adds a data fragment and a version whose manifest lists every fragment, so an
        uncompacted table grows quadratically on disk and slows down; rows not yet in the
        full-text index are searched by scanning and tokenizing each of them per query (a bulk
        ingest of 2,000 turns made every text query 2-3x slower). An optimize costs in proportion
        to the table, though (it rewrites fragments and merges indexes whole), so it is due
        (`_due`) after `every` small commits (a chat), after new rows worth `COMPACT_GROWTH` of the
        table (at least `INDEX_EVERY_ROWS`: a bulk load), or after `MAX_COMMITS` commits; and never
        sooner than `COMPACT_DUTY` times the previous one's duration after it. What that holds back
        is folded in once the table's writes pause for `QUIET_AFTER` seconds.

        The optimize runs in the background, off the write path: the write it follows has
        committed (durable) and returns at once. One optimize per table is in flight at a time;
        rows that arrive meanwhile go into the next, so a bulk load folds many commits into
        each (on a 100k store one optimize of the indexed episodic table took 70 s, which every
        write that crossed the threshold used to wait for). `settle()` waits for them.
        """
        key, loop = id(table), asyncio.get_running_loop()
        self._writes[key] = self._writes.get(key, 0) + 1
        self._pending[key] = self._pending.get(key, 0) + rows
        if _ending():  # the next writer or the maintenance job does it
            return
        if self._due(key, every) and self.timer() >= self._resting.get(key, float("-inf")) and self._start(table, key, loop):
            return
        if self._writes[key] >= every or self._pending[key] >= INDEX_EVERY_ROWS:  # held back: fold in once writes pause
            if (waiting := self._quiet.pop(key, None)) is not None:
                waiting.cancel()
            self._quiet[key] = loop.call_later(self.quiet_after, self._quietly, table, key, loop)

    def _start(self, table: Any, key: int, loop: asyncio.AbstractEventLoop) -> bool:
        """Start a table's optimize in the background, unless one is in flight."""
        running = self._optimizing.get(key)
        if running is not None and not running.done() and running.get_loop() is loop:
            return False
        if (waiting := self._quiet.pop(key, None)) is not None:
            waiting.cancel()
        self._writes[key] = self._pending[key] = 0
        self._optimizing[key] = best_effort(loop.create_task(self._optimize(table, key)))
        return True

    def _quietly(self, table: Any, key: int, loop: asyncio.AbstractEventLoop) -> None:
        """A table's writes paused for `quiet_after` seconds: fold in what is still held back."""
        self._quiet.pop(key, None)
        if _ending():
            return
        if (self._writes.get(key) or self._pending.get(key)) and not self._start(table, key, loop):
            self._quiet[key] = loop.call_later(self.quiet_after, self._quietly, table, key, loop)  # one in flight: later

    def _due(self, key: int, every: int) -> bool:
        commits, rows = self._writes[key], self._pending[key]
        return ((commits >= every and rows <= SMALL_COMMIT_ROWS * commits) or commits >= max(every, MAX_COMMITS)
                or rows >= max(INDEX_EVERY_ROWS, COMPACT_GROWTH * self._sized.get(key, 0)))

    async def rewrite(self, table: Any, op: Callable[[], Awaitable[T]]) -> T:
        """A write that rewrites or indexes a table (an optimize, an index build): one at a time
        in this store (`rewriting`)."""
        async with self.rewriting():
            return await self.write(table, op)

    @contextlib.asynccontextmanager
    async def rewriting(self) -> AsyncIterator[None]:
        """Hold this store's one slot for rewriting or indexing a table. Each such write holds
        hundreds of MB while it runs (on the 100k bench store an optimize of the shared table took
        ~270 MB above the process's resting size), and at the end of a bulk load the held-back
        optimizes of four tables ran beside the maintenance job's own: the process's peak (README,
        issue 18). The heap it freed goes back to the operating system when it completes
        (`memos.store.lancedb._malloc`), so the next one starts from what is in use."""
        loop = asyncio.get_running_loop()
        if self._rewrite_lock is None or self._rewrite_lock[0] is not loop:
            self._rewrite_lock = (loop, asyncio.Lock())
        async with self._rewrite_lock[1]:
            yield
            # not when it failed or was cancelled, nor once the loop's executor has shut down (an
            # optimize finishing while the process exits: "cannot schedule new futures")
            with contextlib.suppress(RuntimeError):
                await asyncio.to_thread(release_free_memory)

    async def _optimize(self, table: Any, key: int) -> None:
        async with self.rewriting():  # its duration below is its own, not the wait for the slot
            started = self.timer()
            try:
                await self.write(table, lambda: table.optimize(cleanup_older_than=KEEP_VERSIONS))
                self._sized[key] = await table.count_rows()
            except (OSError, RuntimeError, ValueError) as exc:  # incl. memos' storage errors: the writes have committed
                self._writes[key] = self._writes.get(key, 0) + MAX_COMMITS  # due again at the next commit
                log.warning("automatic compaction of %s skipped (%s); the next one or the maintenance job does it",
                            table.name, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            ended = self.timer()
        self._resting[key] = ended + max(COMPACT_GAP, COMPACT_DUTY * (ended - started))
        if key in self._searched:
            await self._prewarm(table)
        for ref in self._after_optimize.pop(key, []):
            if (hook := ref()) is not None and not _ending():
                try:
                    await hook()
                except Exception as exc:  # a read ahead of need: the reader reads it when it needs it
                    log.debug("a read after optimizing %s skipped (%s)", table.name, exc)

    def after_optimize(self, name: str, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook`, a bound method held weakly, once the next automatic optimize of memory type
        `name`'s table in this process has ended: to read again ahead of need what that optimize
        made every read of the table look stale (`MemorySession`'s turns in context). Once per
        call; an error it raises is logged at debug level and dropped."""
        self._after_optimize.setdefault(id(self.tables[name].table), []).append(weakref.WeakMethod(hook))

    def searching(self, table: Any) -> None:
        """`table` is searched in this process: its indexes are loaded again after each automatic optimize."""
        self._searched.add(id(table))

    async def _prewarm(self, table: Any) -> None:
        """Load a searched table's indexes, which an optimize has just rebuilt, before a search needs
        them: the first search of the 100k shared table after one took ~65 ms against ~10 (the chat
        step after an optimize was the slowest of a chat with pauses; README, issue 18)."""
        try:
            for index in await table.list_indices():
                await table.prewarm_index(index.name)
        except (OSError, RuntimeError, ValueError) as exc:  # a search loads them anyway
            log.debug("prewarming the indexes of %s skipped (%s)", table.name, exc)

    async def commit(self, table: Any, op: Callable[[], Awaitable[T]], rows: int = 0) -> T:
        """A write to a table that is no memory type's own (the shared search table), counted
        toward its automatic compaction like the stores' writes (`_committed`)."""
        result = await self.write(table, op)
        await self._committed(table, rows)
        return result

    async def settle(self) -> None:
        """Write the queued rows (`behind`) and wait for the background optimizes that writes
        started (see `_committed`)."""
        await self.behind.flush()
        loop = asyncio.get_running_loop()
        while running := [t for t in self._optimizing.values() if not t.done() and t.get_loop() is loop]:
            await asyncio.wait(running)

    @classmethod
    async def open(
        cls,
        uri: str,
        record_types: Sequence[type[MemoryRecord]],
        embedder: TextEmbedder | None,
        storage_options: dict[str, str] | None = None,
    ) -> Storage:
        """Open (or create) the database at `uri` with a table for each record type. A relative
        directory is taken from the working directory now: work that ends later (rows written
        behind a turn, a background optimize, the purge lease's files) stays in that directory
        after the process changes its own."""
        local = local_path(uri)
        if local is not None and not uri.startswith("file://") and not local.is_absolute():
            uri = str(local.absolute())
        if local is not None:  # another open of it in this process: its queued rows first (memos.store.lancedb.write_behind)
            await WriteBehind.flush_open(local_path(uri))
        try:
            conn = await lancedb.connect_async(uri, storage_options=storage_options, read_consistency_interval=READ_CONSISTENCY,
                                               session=_session())
            meta = await conn.create_table(_META, schema=_META_SCHEMA, exist_ok=True)
            history = await conn.create_table(_HISTORY, schema=HISTORY_SCHEMA, exist_ok=True)
        except (OSError, RuntimeError, ValueError) as exc:
            error = storage_error(exc, uri)
            if error is exc:
                detail = _RUST_LOCATION.sub("", str(exc)).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                error = StoreUnavailableError(f"cannot open the memos store at {uri}: {detail}")
            raise error from exc
        values = await _read_meta(meta)
        stored = json.loads(values["embedder"]) if "embedder" in values else None
        dim, name = cls._settle_embedder(uri, stored, embedder)
        if stored != {"name": name, "dim": dim}:
            async with StoreLease.for_uri(uri).shared():
                await _write_meta(meta, [{"key": "embedder", "value": json.dumps({"name": name, "dim": dim})}])
        storage = cls(uri, conn, meta, history, dim, name)
        physical = json.loads(values.get("tables", "{}"))
        for record_type in record_types:
            await storage._open_type(record_type, physical.get(record_type.memory_type, record_type.memory_type))
        if values.get("fulltext") != FORM:
            await storage._migrate_fulltext()
            await _write_meta(meta, [{"key": "fulltext", "value": FORM}])
        storage.search = SearchIndex(storage, record_types)
        await storage.search.open()  # rebuilt if missing, caught up if a crash left it behind
        if storage.behind.journal is not None:
            await storage._replay_journal(storage.behind.journal.root)
        return storage

    async def _replay_journal(self, root: Path) -> None:
        """Write what the journal segments of stopped processes hold and the tables lack
        (`memos.store.lancedb.journal`): their turns' rows (mirrored to the shared table as any add) and the
        history rows of those turns. Rows already written are skipped, so a segment its writer
        did not get to delete after writing it changes nothing."""
        with orphans(root) as found:
            for orphan in found:
                typed: dict[str, list[dict[str, Any]]] = {}
                history: list[dict[str, Any]] = []
                state: dict[str, str] = {}
                for name, rows in read_frames(orphan.data):
                    if name == HISTORY:
                        history += rows.to_pylist()
                    elif name == STATE:
                        state.update((r["key"], r["value"]) for r in rows.to_pylist())
                    elif name in self.tables:
                        typed.setdefault(name, []).extend(rows.to_pylist())
                    else:
                        orphan.done = False
                if not orphan.done:  # kept whole for an open that registers that type
                    log.warning("journal segment %s holds rows of a memory type this store was not opened with; "
                                "kept for an open that registers it", orphan.path.name)
                    continue
                written = 0
                for name, rows in typed.items():
                    missing = await self._absent(self.tables[name].table, rows)
                    await self.add_rows(name, missing)
                    written += len(missing)
                await self.append_history(await self._absent(self.history, history))
                if state:  # the newest value it journaled of each key (a session's state)
                    await self.write_state(state)
                if written:
                    log.warning("%d rows a stopped process had journaled were written to their tables", written)

    async def _absent(self, table: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows whose id `table` does not hold."""
        present: set[str] = set()
        ids = [r["id"] for r in rows]
        for start in range(0, len(ids), 1_000):
            query = table.query().where(sql_in("id", ids[start : start + 1_000])).select(["id"])
            present.update((await self.read(table, query.to_arrow))["id"].to_pylist())
        return [r for r in rows if r["id"] not in present]

    async def _migrate_fulltext(self) -> None:
        """Bring a store written before Chinese was indexed as bigrams (`memos.store.fulltext`) up to
        date, once: rows whose text holds CJK get the index tokens (only the `text` column is
        rewritten) and the table's full-text index is rebuilt. English rows are left alone."""
        for name, typed in self.tables.items():
            rows = await self.rows(name, None, columns=["id", "text"])
            changed = [{"id": r["id"], "text": index_form(r["text"])} for r in rows
                       if r["text"] and MARK not in r["text"] and has_cjk(r["text"])]
            for start in range(0, len(changed), 1_000):
                batch = pa.Table.from_pylist(changed[start : start + 1_000], schema=pa.schema([("id", pa.string()), ("text", pa.string())]))
                await self.write(typed.table, lambda batch=batch, table=typed.table: table.merge_insert("id").when_matched_update_all().execute(batch))
            if changed:
                await self.rebuild_text_index(name)
                log.info("full-text index of %s: %d rows with Chinese, Japanese or Korean text re-indexed", name, len(changed))

    @staticmethod
    def _settle_embedder(uri: str, stored: dict[str, Any] | None, embedder: TextEmbedder | None) -> tuple[int, str | None]:
        if stored is None:
            return (embedder.dim, embedder.name) if embedder else (DEFAULT_DIM, None)
        if embedder is None:
            if stored["name"]:
                # the caller's choice (read-only commands open without one on purpose); a missing
                # local embedder was already reported once by resolve_embedder
                log.info("%s opens without an embedder: full-text search only (vectors are kept)", uri)
            return stored["dim"], stored["name"]
        if stored["dim"] != embedder.dim or (stored["name"] and stored["name"] != embedder.name):
            raise EmbeddingDimensionError(
                f"the store at {uri} holds {stored['dim']}-d vectors from {stored['name'] or 'no embedder'}, "
                f"but it was opened with {embedder.name} ({embedder.dim}-d). Open it with the original "
                f"embedder, or re-embed every record: memos reindex {uri} --embedder {embedder.name}"
            )
        if stored["name"] is None:
            log.warning("%s was built without an embedder; run `memos reindex %s` to add vectors to old records", uri, uri)
        return embedder.dim, embedder.name

    async def _open_type(self, record_type: type[MemoryRecord], physical: str) -> None:
        schema = arrow_schema(record_type, self.dim)
        if physical in await self._table_names():
            table = await self.conn.open_table(physical)  # its schema may predate fields added since
        else:
            table = await self.conn.create_table(physical, schema=schema, exist_ok=True)
        existing = await table.schema()
        missing = [f for f in schema if f.name not in existing.names]
        if missing:  # a custom type gained fields: add them as empty columns
            await self.write(table, lambda: table.add_columns({f.name: f"CAST(NULL AS {_sql_type(f.type)})" for f in missing}))
        vec = existing.field(VECTOR_COLUMN) if VECTOR_COLUMN in existing.names else None
        if vec is not None and vec.type.list_size != self.dim:
            raise EmbeddingDimensionError(
                f"table {physical} has {vec.type.list_size}-d vectors but the store is {self.dim}-d; run memos reindex {self.uri}"
            )
        if not any(idx.columns == ["text"] for idx in await table.list_indices()):
            await self.write(table, text_index(table, replace=False))
        self.tables[record_type.memory_type] = TypeTable(record_type, table, json_columns(record_type))

    async def _table_names(self) -> set[str]:
        if self._names is None:
            self._names = set(await self.conn.table_names(limit=100_000))
        return self._names

    def type_table(self, memory_type: str) -> TypeTable:
        return self.tables[memory_type]

    def known_rows(self, memory_type: str) -> bool | None:
        """What `has_rows` would answer without reading the table, or None if it must read: a
        table once seen with rows is taken to have them (searching a table emptied since is
        harmless); one seen empty stays empty for `READ_CONSISTENCY`."""
        if memory_type in self._nonempty:
            return True
        seen = self._empty_checked.get(memory_type)
        if seen is not None and time.monotonic() - seen <= READ_CONSISTENCY.total_seconds():
            return False
        return None

    async def has_rows(self, memory_type: str) -> bool:
        """Whether a table has rows (`known_rows`, else one count), so searches skip empty
        tables instead of querying them."""
        known = self.known_rows(memory_type)
        if known is not None:
            return known
        table = self.tables[memory_type].table
        if await self.read(table, lambda: table.count_rows()) > 0:
            self._nonempty.add(memory_type)
            return True
        self._empty_checked[memory_type] = time.monotonic()
        return False

    async def add_rows(self, memory_type: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            typed = self.tables[memory_type]
            table, data = typed.table, arrow_table(rows, arrow_schema(typed.record_type, self.dim))
            with self._reporting(memory_type) as report:
                report(await self.write(table, lambda: table.add(data)), rows)
            self._nonempty.add(memory_type)
            await self._committed(table, len(rows))
            if self.search.covers(memory_type):
                await self.search.added(memory_type, rows)

    def hold(self, typed: dict[str, list[dict[str, Any]]], history: list[dict[str, Any]]) -> bool:
        """Queue rows to add instead of committing them (a chat's turns: `memos.store.lancedb.write_behind`):
        journaled with their history rows before this returns, so durable, and counted by this
        process's remembered reads at once. False (nothing queued) when the store has no journal
        or a row's values need LanceDB's own conversion: the caller commits them itself."""
        if not self.behind.journaled:
            return False
        tables = {name: arrow_table(rows, arrow_schema(self.tables[name].record_type, self.dim)) for name, rows in typed.items()}
        if any(not isinstance(t, pa.Table) for t in tables.values()):
            return False
        shared = [row for name, rows in typed.items() if self.search.covers(name) and self.search.table is not None
                  for row in self.search.project(name, rows)]
        try:
            self.behind.queue(history, shared, typed=tables)
        except OSError as exc:  # the journal could not take them (a full disk): nothing was queued
            error = storage_error(exc, self.uri)
            raise (error if error is not exc else StoreUnavailableError(
                f"memos cannot write the journal of the store {self.uri}: {exc}")) from exc
        for name, rows in typed.items():
            self.reads.added(name, rows)
            self._nonempty.add(name)
        return True

    async def write_held(self, memory_type: str, rows: pa.Table) -> None:
        """Commit rows `hold` queued (their remembered reads counted them already)."""
        table = self.tables[memory_type].table
        with self._reporting(memory_type) as report:
            report(await self.write(table, lambda: table.add(rows)), [])
        await self._committed(table, rows.num_rows)

    async def upsert_rows(self, memory_type: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            table = self.tables[memory_type].table
            with self._reporting(memory_type) as report:
                report(await self.write(
                    table, lambda: table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
                ))
            await self._committed(table, len(rows))
            if self.search.covers(memory_type):
                await self.search.upserted(memory_type, rows)

    async def update_rows(self, memory_type: str, rows: list[dict[str, Any]], read_at: dict[str, datetime]) -> None:
        """Replace existing rows, each only if it is still the version that was read (its
        `updated_at` is `read_at[id]`): optimistic concurrency. Nothing is ever inserted, so a
        record deleted meanwhile stays deleted. Raises `RecordChangedError` naming the ids that
        changed or vanished (the rows that still matched are written)."""
        if not rows:
            return
        table = self.tables[memory_type].table
        condition = " OR ".join(
            f"(target.id = {sql_string(r['id'])} AND CAST(target.updated_at AS BIGINT) = {_micros(read_at[r['id']])})" for r in rows)
        with self._reporting(memory_type) as report:
            result = report(await self.write(table, lambda: table.merge_insert("id").when_matched_update_all(where=condition).execute(rows)))
        await self._committed(table, len(rows))
        updated = getattr(result, "num_updated_rows", len(rows))
        if self.search.covers(memory_type):
            if updated == len(rows):
                await self.search.upserted(memory_type, rows)
            else:  # only some still matched: mirror what the table holds now
                await self.search.synced(memory_type, [r["id"] for r in rows])
        if updated != len(rows):
            raise RecordChangedError(memory_type, [r["id"] for r in rows], updated)

    async def delete_rows(self, memory_type: str, where: str) -> None:
        table = self.tables[memory_type].table
        ids = [r["id"] for r in await self.rows(memory_type, where, columns=["id"])] if self.search.covers(memory_type) else []
        with self._reporting(memory_type) as report:
            report(await self.write(table, lambda: table.delete(where)))
        if ids:
            await self.search.synced(memory_type, ids)

    async def rows(
        self, memory_type: str, where: str | None, limit: int | None = None, columns: list[str] | None = None
    ) -> list[dict[str, Any]]:
        query = self.tables[memory_type].table.query()
        if where:
            query = query.where(where)
        if columns:
            query = query.select(columns)
        if limit is not None:
            query = query.limit(limit)
        return arrow_rows(await self.read(self.tables[memory_type].table, query.to_arrow))

    async def columns(self, memory_type: str, where: str | None, columns: list[str]) -> pa.Table:
        """Some columns of a store's rows in `where`, as one Arrow table: for work done column by
        column over many rows (`rows` makes a dict of each)."""
        query = self.tables[memory_type].table.query().select(columns)
        if where:
            query = query.where(where)
        return await self.read(self.tables[memory_type].table, query.to_arrow)

    async def refresh(self) -> None:
        """Point every table handle at its latest version (a job that runs for hours sees other
        processes' writes without waiting for the read-consistency interval)."""
        for table in [*(t.table for t in self.tables.values()), self.history, self.meta, *self.search_tables()]:
            await table.checkout_latest()

    def search_tables(self) -> list[Any]:
        """The shared search table, if there is one (compacted, indexed and purged like the stores)."""
        return [self.search.table] if self.search.table is not None else []

    async def versions(self) -> dict[str, int]:
        """The latest version of every memory type's table and of the meta table (key `META`), in
        one call: a read remembered at a version is still right while its table is there (`reads`)."""
        names = [*self.tables, META]
        handles = [*(t.table for t in self.tables.values()), self.meta]
        found = await asyncio.gather(*(self._retrying(h, h.version, 4) for h in handles))
        return dict(zip(names, found, strict=True))

    async def label(self, name: str) -> int | None:
        """The version to label a read of table `name` about to start with (`ReadCache.at`), once
        what this process queued for that table is written (`memos.store.lancedb.write_behind`): the read would
        write it first, moving the table past a label taken before, and its value would never be
        reused (a chat with pauses re-counted the turns' store at every step, 10-25 ms)."""
        await self.behind.barrier(self.meta if name == META else self.tables[name].table, read=True)
        return self.reads.at(name)

    @contextlib.contextmanager
    def _reporting(self, table: str) -> Iterator[Callable[..., Any]]:
        """Report one write of this process to `reads` (its version; rows, for an add); a write
        that fails is reported without a version, so no read of that table is trusted."""
        done: list[int | None] = []

        def report(result: Any, added: list[dict[str, Any]] | None = None) -> Any:
            version = getattr(result, "version", None)
            self.reads.wrote(table, version, added)
            done.append(version)
            return result

        try:
            yield report
        finally:
            if not done:
                self.reads.wrote(table, None)

    async def count(self, memory_type: str, where: str | None = None) -> int:
        table = self.tables[memory_type].table
        return await self.read(table, lambda: table.count_rows(where))

    async def vector_search(self, memory_type: str, vector: list[float], where: str | None, limit: int,
                            columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The `limit` nearest rows in `where` (cosine), best first, with `_distance`. With
        `columns`, only those are read, plus `_rowid` for `take`; otherwise every field but the vector."""
        query = self.tables[memory_type].table.query().nearest_to(vector).distance_type("cosine")
        return await self._ranked(memory_type, query, "_distance", where, limit, columns)

    async def text_search(self, memory_type: str, text: str, where: str | None, limit: int,
                          columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The `limit` best BM25 matches of `text` in `where`, best first, with `_score`
        (`columns` as for `vector_search`)."""
        query = self.tables[memory_type].table.query().nearest_to_text(text, columns="text")
        return await self._ranked(memory_type, query, "_score", where, limit, columns)

    async def _ranked(self, memory_type: str, query: Any, score: str, where: str | None, limit: int,
                      columns: Sequence[str] | None) -> list[dict[str, Any]]:
        self.searching(self.tables[memory_type].table)
        query = query.select([*(columns or self.tables[memory_type].result_columns), score]).limit(limit)
        if columns:
            query = query.with_row_id()
        if where:
            query = query.where(where)
        return arrow_rows(await self.read(self.tables[memory_type].table, query.to_arrow))

    async def take(self, memory_type: str, rows: Sequence[dict[str, Any]], where: str | None) -> list[dict[str, Any]]:
        """Full rows (every field but the vector) for search rows read with `columns`, in order.

        Rows are taken by `_rowid`, the cheapest read there is; a row id is a physical address
        that a compaction since the search may have moved, so a row that comes back with another
        id (or none) is read again by its id, still inside `where`. Rows deleted since are left out."""
        typed = self.tables[memory_type]
        if not rows:
            return []
        addresses = [r["_rowid"] for r in rows if "_rowid" in r]  # rows of the shared search table have none
        try:
            taken = arrow_rows(await typed.table.take_row_ids(addresses).select(typed.result_columns).to_arrow()) if addresses else []
        except (OSError, RuntimeError, ValueError) as exc:  # an address gone with a compaction
            log.debug("take by row id failed on %s (%s); reading by id", memory_type, exc)
            taken = []
        by_id = {r["id"]: r for r in taken}
        missing = [r["id"] for r in rows if r["id"] not in by_id]
        if missing:
            ids = sql_in("id", missing)
            for row in await self.rows(memory_type, f"({where}) AND {ids}" if where else ids, columns=typed.result_columns):
                by_id[row["id"]] = row
        return [by_id[r["id"]] for r in rows if r["id"] in by_id]

    # --- history -------------------------------------------------------------------------

    async def append_history(self, entries: list[dict[str, Any]]) -> None:
        if entries:
            data = arrow_table(entries, HISTORY_SCHEMA)
            await self.write(self.history, lambda: self.history.add(data))
            await self._committed(self.history, len(entries), HISTORY_COMPACT_EVERY)

    async def history_rows(self, where: str | None, limit: int | None = None) -> list[HistoryEntry]:
        query = self.history.query()
        if where:
            query = query.where(where)
        if limit is not None:
            query = query.limit(limit)
        rows = arrow_rows(await self.read(self.history, query.to_arrow))
        rows.sort(key=lambda r: r["at"])
        return [
            HistoryEntry(**{**r, "before": _loads(r["before"]), "after": _loads(r["after"])})
            for r in rows
        ]

    async def raw_history(self, where: str) -> list[dict[str, Any]]:
        """History rows as stored (before/after as JSON text)."""
        return arrow_rows(await self.read(self.history, self.history.query().where(where).to_arrow))

    async def rewrite_history(self, rows: list[dict[str, Any]]) -> None:
        """Replace history rows by id (used only to scrub a secret out of the audit trail)."""
        if rows:
            await self.write(
                self.history, lambda: self.history.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
            )

    async def purge_old_versions(self, memory_type: str | None = None, *, wait: float = PURGE_WAIT) -> bool:
        """Compact and drop every old version of a table (all tables by default) and of history
        and meta, so removed data is gone from disk; returns whether that happened now.

        It runs holding the store lease alone (`memos.store.lancedb.lease`): no write of any process is in
        flight, so deleting unreferenced files cannot hit another writer's uncommitted data, and a
        reader that was on a dropped version re-reads the latest. If the lease cannot be had
        within `wait` seconds (busy writers, or an object-storage URI that has no lease), the
        purge is deferred: a `purge:pending` meta entry asks the next maintenance run to finish it
        (`finish_deferred_purge`), and versions older than `KEEP_VERSIONS` are dropped now.

        Each table's indexes are built again too (`_scrub_table`): removed rows leave no key in
        an index either."""
        tables = self._purge_tables(memory_type)
        await self.behind.flush()  # queued rows are written before, not into a scrubbed table after
        async with self.lease.exclusive(wait) as alone:
            if alone:
                for table in tables:
                    await self._scrub_table(table)
        if alone:
            if memory_type is None and PENDING_PURGE in await self.get_meta():
                await self.delete_meta([PENDING_PURGE])
            return True
        meta = await self.get_meta()
        if PENDING_PURGE not in meta:
            await self.set_meta(PENDING_PURGE, datetime.now(UTC).isoformat())
        log.warning("purge of old versions of %s deferred: other writers held the store for %.0f s or it is remote; "
                    "the next maintenance run finishes it", self.uri, wait)
        for table in tables:
            await self.write(table, lambda table=table: table.optimize(cleanup_older_than=KEEP_VERSIONS))
        return False

    async def finish_deferred_purge(self, now: datetime | None = None, *, wait: float = PURGE_WAIT) -> str | None:
        """Finish a purge that `purge_old_versions` deferred (the maintenance job calls this):
        with the lease, at once; without it, once `PURGE_MARGIN` has passed since it was asked
        for, by dropping the versions older than the margin (nobody still reads them). Returns
        what happened, or None when nothing was pending."""
        requested = (await self.get_meta()).get(PENDING_PURGE)
        if requested is None:
            return None
        if await self.purge_old_versions(wait=wait):
            return "purged"
        if (now or datetime.now(UTC)) - datetime.fromisoformat(requested) < PURGE_MARGIN:
            return "waiting"
        for table in self._purge_tables(None):
            await self.write(table, lambda table=table: table.optimize(cleanup_older_than=PURGE_MARGIN))
        await self.delete_meta([PENDING_PURGE])
        return "purged past the margin"

    def _purge_tables(self, memory_type: str | None) -> list[Any]:
        typed = [self.tables[memory_type].table] if memory_type else [t.table for t in self.tables.values()]
        shared = self.search_tables() if memory_type is None or self.search.covers(memory_type) else []
        return [self.history, self.meta, *typed, *shared]

    async def _scrub_table(self, table: Any) -> None:
        """Leave nothing of a table's deleted rows on disk: not in its data files, not in its
        indexes, not in an old version (a purge's step, holding the lease alone).

        A compaction rewrites a data file only once a tenth of its rows are deleted, so a deleted
        row of a small user in a large, compacted file stayed on disk inside a file still in use
        (`memos forget` of one user among 800 rows left their text there; the shared search table
        mixes every user's rows in its files). Then every row is updated to itself in one commit:
        all rows move to new files, the old files are wholly deleted and unreferenced, and the
        clean-up removes them. One commit, so a crash leaves the old version or the new one.

        Indexes keep what a deletion, a compaction or that rewrite removed: the forgotten user's
        id was still in the `user_id` B-tree's page files of the typed and the shared table after
        either, while the index statistics counted only live rows. Nothing on a table says for
        sure whether it ever had a row removed (deleting a fragment's only row leaves no deletion
        file; old versions are gone after `KEEP_VERSIONS`), so every index is built again from
        the rows as they are now: B-trees, bitmaps and full-text in seconds, the vector index in
        what `ensure_indexes` takes (README, Security)."""
        await self._drop_old_versions(table, timedelta(0))
        rewritten = await _holds_deleted(table)
        if rewritten:
            await self._retrying(table, lambda: table.update(updates_sql={"id": "id"}), 12)
        if await self._recreate_indexes(table) or rewritten:
            await self._drop_old_versions(table, timedelta(0))

    async def _recreate_indexes(self, table: Any) -> bool:
        """Build every index of `table` again from its rows; returns whether it had any."""
        rows = await table.count_rows()
        indexes = await table.list_indices()
        for index in indexes:
            build = _INDEX_CONFIGS.get(index.index_type)
            if build is None:
                raise RuntimeError(f"{index.name} on {table.name}: memos cannot rebuild a {index.index_type} index")
            column, = index.columns
            await self._retrying(table, lambda column=column, config=build(rows), name=index.name: table.create_index(
                column, config=config, replace=True, name=name), 12)
        return bool(indexes)

    async def _drop_old_versions(self, table: Any, older_than: timedelta) -> None:
        await table.checkout_latest()
        with warnings.catch_warnings():
            # LanceDB warns that a reader still on an old version fails; readers retry on the latest one
            # (Storage.read), and keeping the old version would keep the removed data on disk.
            warnings.simplefilter("ignore", UserWarning)
            await self._retrying(table, lambda: table.optimize(cleanup_older_than=older_than, delete_unverified=True), 12)

    async def delete_history(self, where: str) -> None:
        await self.write(self.history, lambda: self.history.delete(where))

    async def set_meta(self, key: str, value: str) -> None:
        await self.behind.barrier(self.meta, read=False)  # a value queued before is not written over this one
        with self._reporting(META) as report:
            async with self.lease.shared():
                report(await _write_meta(self.meta, [{"key": key, "value": value}]), [{"key": key, "value": value}])

    def hold_state(self, values: dict[str, str]) -> bool:
        """Queue state entries instead of writing them (a chat session's state: `memos.store.lancedb.write_behind`):
        journaled before this returns, counted by this process's remembered reads at once. False
        (nothing queued) when the store has no journal: the caller writes them itself."""
        if not self.behind.journaled:
            return False
        try:
            self.behind.queue([], [], state=values)
        except OSError as exc:  # the journal could not take them (a full disk): nothing was queued
            error = storage_error(exc, self.uri)
            raise (error if error is not exc else StoreUnavailableError(
                f"memos cannot write the journal of the store {self.uri}: {exc}")) from exc
        self.reads.added(META, [{"key": k, "value": v} for k, v in values.items()])
        return True

    async def write_state(self, values: dict[str, str]) -> None:
        """Write state entries `hold_state` queued (their remembered reads counted them already)."""
        with self._reporting(META) as report:
            async with self.lease.shared():
                report(await _write_meta(self.meta, [{"key": k, "value": v} for k, v in values.items()]), [])

    async def delete_meta(self, keys: list[str]) -> None:
        """Remove meta entries (exact keys, quoted; never a pattern built from input)."""
        for key in keys:
            with self._reporting(META) as report:
                report(await self.write(self.meta, lambda key=key: self.meta.delete(f"key = {sql_string(key)}")))

    async def rebuild_text_index(self, memory_type: str) -> None:
        """Recreate a table's full-text index from its current rows (drops terms of deleted rows)."""
        table = self.tables[memory_type].table
        await self.write(table, text_index(table))
        if self.search.covers(memory_type):
            await self.search.rebuild_text_index()

    async def get_meta(self) -> dict[str, str]:
        return await self.read(self.meta, lambda: _read_meta(self.meta))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of an Arrow table as dicts (what LanceDB's `to_list` gives, 3-4x faster).

    pyarrow builds each time-zoned timestamp through the time-zone database, which made three
    timestamp columns most of a search's row conversion; here they are read as microseconds
    and offset from the epoch in UTC."""
    names = table.column_names
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type) and column.type.unit == "us" and column.type.tz in ("UTC", "+00:00"):
            micros = [us for chunk in column.chunks for us in chunk.view(pa.int64()).to_pylist()]  # a view: no cast kernel
            columns.append([None if us is None else _EPOCH + timedelta(microseconds=us) for us in micros])
        else:
            columns.append(column.to_pylist())
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def history_row(
    op: str, record: MemoryRecord, actor: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
    at: datetime, note: str | None = None,
) -> dict[str, Any]:
    """A history row for an operation on `record` (before/after must already be redacted)."""
    return {
        "id": new_id(), "at": at.astimezone(UTC), "op": op, "memory_type": record.memory_type, "record_id": record.id,
        "actor": actor, "user_id": record.user_id, "agent_id": record.agent_id, "session_id": record.session_id,
        "before": json.dumps(before, default=str) if before is not None else None,
        "after": json.dumps(after, default=str) if after is not None else None, "note": note,
    }


def _micros(at: datetime) -> int:
    """A stored timestamp as LanceDB compares it (microseconds since the epoch, UTC)."""
    delta = at.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _loads(value: str | None) -> dict[str, Any] | None:
    return json.loads(value) if value else None


async def _read_meta(meta: Any) -> dict[str, str]:
    return {row["key"]: row["value"] for row in await meta.query().to_list()}


async def _write_meta(meta: Any, rows: list[dict[str, str]]) -> Any:
    return await retry_conflicts(
        lambda: meta.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(rows))


_SESSION: Any = None


def _session() -> Any:
    global _SESSION
    if _SESSION is None:
        _SESSION = lancedb.Session(index_cache_size_bytes=CACHE_BYTES["index"], metadata_cache_size_bytes=CACHE_BYTES["metadata"])
    return _SESSION


def _sql_type(data_type: pa.DataType) -> str:
    if pa.types.is_timestamp(data_type):
        return "TIMESTAMP"
    if pa.types.is_boolean(data_type):
        return "BOOLEAN"
    if pa.types.is_int64(data_type):
        return "BIGINT"
    if pa.types.is_floating(data_type):
        return "DOUBLE"
    return "STRING"
