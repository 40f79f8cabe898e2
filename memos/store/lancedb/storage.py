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
import logging
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pyarrow as pa

from memos.exceptions import RecordChangedError
from memos.memtypes import MemoryRecord
from memos.store.fulltext import index_form, plain_text, without_mark
from memos.store.history import HISTORY_SCHEMA, HistoryEntry, history_entry, micros
from memos.store.read_cache import ReadCache
from memos.store.schema import VECTOR_COLUMN, arrow_rows, arrow_schema, arrow_table, record_from_row, row_from_record
from memos.store.scope import sql_in, sql_string
from memos.time_bounds import EARLIEST

from .commits import CommitCounter, meta_of
from .commits import rows_of as counted_rows
from .compaction import HISTORY_COMPACT_EVERY, Compaction
from .elsewhere import await_journaled, settle_journaled
from .errors import Retries, journal_error, retry_conflicts, retrying
from .holding import hold_rows
from .journal import Journal
from .keylocks import KeyLocks
from .lease import StoreLease, local_path
from .notices import Notices
from .openers import Openers
from .presence import RowPresence, store_epochs, stored_rows
from .purge import PURGE_WAIT, Purge
from .search_index import SearchIndex
from .text_index import text_index
from .write_behind import WriteBehind

__all__ = ["DEFAULT_DIM", "HISTORY_TABLE", "META", "META_SCHEMA", "READ_CONSISTENCY", "Storage", "TypeTable", "read_meta", "upsert_meta", "write_meta"]

log = logging.getLogger("memos.store.lancedb.storage")

READ_CONSISTENCY = timedelta(seconds=1)
"""How stale a read may be: other processes' commits (a worker's consolidation, another agent)
become visible within this interval without reopening the store."""
T = TypeVar("T")

DEFAULT_DIM = 384
META = "_meta"
"""The meta table's name in `Storage.versions()` and `Storage.reads`."""
HISTORY_TABLE = "_history"
META_SCHEMA = pa.schema([pa.field("key", pa.string()), pa.field("value", pa.string())])


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
        # Chinese words findable (memos.store.fulltext); a separator typed into the text would cut it there
        row["text"] = index_form(without_mark(row["text"] or ""), without_mark(record.index_text()))
        return row


class Storage:
    """An open memos database: typed tables, history and meta on one LanceDB connection."""

    history_schema = HISTORY_SCHEMA
    meta_schema = META_SCHEMA

    def __init__(self, uri: str, conn: Any, meta: Any, history: Any, dim: int, embedder_name: str | None,
                 openers: Openers | None = None) -> None:
        self.uri = uri
        self.conn = conn
        self.meta = meta
        self.history = history
        self.dim, self.embedder_name = dim, embedder_name
        self.tables: dict[str, TypeTable] = {}
        self.compaction = Compaction(self.write, local_path(uri))
        """When each table is optimized (`memos.store.lancedb.compaction`)."""
        self.purge = Purge(self, self._retrying)
        """Old table versions dropped, now or deferred (`memos.store.lancedb.purge`)."""
        self.lease, self.openers = StoreLease.for_uri(uri), openers or Openers(None)  # (`openers`: this open's hold of the store)
        self.reads = ReadCache()
        """Reads remembered at table versions; every write below reports its version to it."""
        self.retries = Retries()
        """LanceDB calls tried again (commit conflicts, purged versions) since the store opened."""
        root = local_path(uri)
        self.commits = CommitCounter(root)
        """Every process's commits, counted: a read finds what another acknowledged (`memos.store.lancedb.commits`)."""
        self.search = SearchIndex(self, [])
        """The shared search table of the default stores, mirrored on every write (`memos.store.lancedb.search_index`)."""
        self.locks, self.notices = KeyLocks(root), Notices(root)
        """Locks by key, and notices one process posts for the others (`memos.store.lancedb.keylocks`, `.notices`)."""
        self.presence = RowPresence(READ_CONSISTENCY.total_seconds(), functools.partial(store_epochs, self) if root is not None else None)
        """Which tables hold rows, as far as this process knows (`memos.store.lancedb.presence`)."""
        self.behind = WriteBehind(self, Journal(root) if root is not None else None)
        """A chat turn's rows, journaled and written in batches (`memos.store.lancedb.write_behind`, `memos.store.lancedb.journal`)."""

    async def write(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 12, rows_of: Collection[str] = (),
                    meta: Collection[str] = (), changed: Sequence[str] | None = None) -> T:
        """Run one LanceDB write holding the purge lease shared (`memos.store.lancedb.lease`), retried
        as `errors.retrying` does; then count it for other processes (`commits`): the table's commit,
        the memory types `rows_of` it added to the shared search table, the `meta` keys it wrote. A
        write to the shared search table posts its change notice (the keys it `changed`) before it
        is counted (`HeldReads.noticed`)."""
        await self.behind.barrier(table, read=False)
        await self.commits.catch_up(table)  # a merge or a delete by key finds the rows another process added (`commits`)
        if table is self.search.table:
            op = self.search.reads.noticed(op, changed)
        async with self.lease.shared():
            result = await self._retrying(table, op, attempts)
        self.commits.committed([table.name, *map(counted_rows, rows_of), *map(meta_of, meta)])
        return result

    def meta_epoch(self, family: str) -> int | None:
        """Moves on when another process writes a meta entry of `family` (`commits.meta_of`); None: not known (object storage)."""
        return None if self.commits.path is None else self.commits.epoch(meta_of(family))

    async def read(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 4) -> T:
        """Run one LanceDB read; a version removed under it by a purge is re-read at the latest.
        Rows queued for the table (`behind`) are written first; the handle moves to the latest
        version first if any process has committed since it last did (`commits`)."""
        await self.behind.barrier(table, read=True)
        await self.commits.catch_up(table)
        return await self._retrying(table, op, attempts)

    async def _retrying(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int) -> T:
        return await retrying(table, op, attempts, self.uri, self.retries)

    async def commit(self, table: Any, op: Callable[[], Awaitable[T]], rows: int = 0, rows_of: Collection[str] = (),
                     changed: Sequence[str] | None = None) -> T:
        """A write to a table that is no memory type's own (the shared search table), counted
        toward its automatic compaction like the stores' writes (`Compaction.committed`)."""
        result = await self.write(table, op, rows_of=rows_of, changed=changed)
        await self.compaction.committed(table, rows)
        return result

    async def settle(self) -> None:
        """Write the queued rows (`behind`) and wait for the background optimizes that writes started."""
        await self.behind.flush()
        await self.compaction.settle()

    async def flush_queued(self) -> None:
        """Write what `behind` holds queued for any table."""
        await self.behind.flush()

    def rewrite(self, table: Any, op: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        """A write that rewrites or indexes a table: one at a time in this store (`Compaction.rewrite`)."""
        return self.compaction.rewrite(table, op)

    def after_optimize(self, name: str, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook` (a bound method, held weakly) once memory type `name`'s table has been optimized
        by this process next (`Compaction.after_optimize`)."""
        self.compaction.after_optimize(self.tables[name].table, hook)

    def memory_types(self) -> list[str]:
        """The memory types this store was opened with."""
        return list(self.tables)

    def type_table(self, memory_type: str) -> TypeTable:
        return self.tables[memory_type]

    def known_rows(self, memory_type: str) -> bool | None:
        """What `has_rows` would answer without reading the table, or None if it must read
        (`memos.store.lancedb.presence`)."""
        return self.presence.known(memory_type)

    async def has_rows(self, memory_type: str) -> bool:
        """Whether a table has rows (`known_rows`, else one count, shared by concurrent callers),
        so searches skip empty tables instead of querying them."""
        return await self.presence.has_rows(memory_type, functools.partial(stored_rows, self, memory_type))

    async def add_rows(self, memory_type: str, rows: list[dict[str, Any]], *, shared_by_key: bool = False) -> None:
        """Commit new rows and mirror them to the shared table; `shared_by_key`: written there by
        key (a replay: a group-commit add's shared row was committed before it was acknowledged)."""
        if rows:
            typed = self.tables[memory_type]
            table, data = typed.table, arrow_table(rows, arrow_schema(typed.record_type, self.dim))
            with self._reporting(memory_type) as report:
                report(await self.write(table, lambda: table.add(data)), rows)
            self.presence.added(memory_type)
            await self.compaction.committed(table, len(rows))
            if self.search.covers(memory_type):
                await (self.search.upserted if shared_by_key else self.search.added)(memory_type, rows)

    def hold(self, typed: dict[str, list[dict[str, Any]]], history: list[dict[str, Any]]) -> bool:
        """Queue rows to add instead of committing them (a chat's turns: `memos.store.lancedb.write_behind`):
        journaled with their history and shared rows before this returns, so durable, and counted by
        this process's remembered reads at once. False (nothing queued) when the store has no journal
        or a row's values need LanceDB's own conversion: the caller commits them itself."""
        return hold_rows(self, typed, history, shared_behind=True) is not None

    def hold_added(self, typed: dict[str, list[dict[str, Any]]], history: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """`hold`, but the rows' shared-table rows are returned for the caller to commit now (`search.append`)."""
        return hold_rows(self, typed, history, shared_behind=False)

    async def write_held(self, memory_type: str, rows: pa.Table) -> None:
        """Commit rows `hold` queued (their remembered reads counted them already)."""
        table = self.tables[memory_type].table
        with self._reporting(memory_type) as report:
            report(await self.write(table, lambda: table.add(rows)), [])
        await self.compaction.committed(table, rows.num_rows)

    async def upsert_rows(self, memory_type: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            table = self.tables[memory_type].table
            with self._reporting(memory_type) as report:
                report(await self.write(
                    table, lambda: table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
                ))
            await self.compaction.committed(table, len(rows))
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
            f"(target.id = {sql_string(r['id'])} AND CAST(target.updated_at AS BIGINT) = {micros(read_at[r['id']])})" for r in rows)
        with self._reporting(memory_type) as report:
            result = report(await self.write(table, lambda: table.merge_insert("id").when_matched_update_all(where=condition).execute(rows)))
        await self.compaction.committed(table, len(rows))
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
        covered = self.search.covers(memory_type)
        ids = [r["id"] for r in await self.rows(memory_type, where, columns=["id"])] if covered or self.behind.journaled else []
        await settle_journaled(self, memory_type, ids)  # no replay of a journal segment brings them back
        with self._reporting(memory_type) as report:
            report(await self.write(table, lambda: table.delete(where)))
        if ids and covered:
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

    async def await_journaled(self, memory_type: str, record_id: str) -> bool:
        """A read by id missed `record_id`: wait if a live process has journaled it (`elsewhere`)."""
        return await await_journaled(self, memory_type, record_id)

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

    async def version(self, memory_type: str) -> int:
        """The latest version of a memory type's table (`reads` remembers reads at versions)."""
        table = self.tables[memory_type].table
        return await self.read(table, table.version)

    async def label(self, name: str) -> int | None:
        """The version to label a read of table `name` with (`ReadCache.at`), once what this process
        queued for that table is written: the read would write it first and move past the label."""
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
        self.compaction.searching(self.tables[memory_type].table)
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
            await self.compaction.committed(self.history, len(entries), HISTORY_COMPACT_EVERY)

    async def history_rows(self, where: str | None, limit: int | None = None) -> list[HistoryEntry]:
        query = self.history.query()
        if where:
            query = query.where(where)
        if limit is not None:
            query = query.limit(limit)
        rows = arrow_rows(await self.read(self.history, query.to_arrow))
        rows.sort(key=lambda r: (r["at"] is not None, r["at"] or EARLIEST))  # a row stored without a time (malformed) first
        return [history_entry(r) for r in rows]

    async def history_columns(self, columns: list[str]) -> pa.Table:
        """Some columns of every history row, as one Arrow table (the audit's repair pass)."""
        return await self.read(self.history, self.history.query().select(columns).to_arrow)

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
        """Drop every old version of a memory type's tables (all by default), history and meta
        included, so removed data is gone from disk; False when deferred to maintenance (`Purge`)."""
        return await self.purge.old_versions(self._purge_tables(memory_type), everything=memory_type is None, wait=wait)

    async def finish_deferred_purge(self, now: datetime | None = None, *, wait: float = PURGE_WAIT) -> str | None:
        """Finish a purge that `purge_old_versions` deferred (the maintenance job calls this)."""
        return await self.purge.finish_deferred(self._purge_tables(None), now, wait=wait)

    def _purge_tables(self, memory_type: str | None) -> list[Any]:
        typed = [self.tables[memory_type].table] if memory_type else [t.table for t in self.tables.values()]
        shared = self.search_tables() if memory_type is None or self.search.covers(memory_type) else []
        return [self.history, self.meta, *typed, *shared]

    async def delete_history(self, where: str) -> None:
        await self.write(self.history, lambda: self.history.delete(where))

    async def set_meta(self, key: str, value: str) -> None:
        await self.behind.barrier(self.meta, read=False)  # a value queued before is not written over this one
        rows = [{"key": key, "value": value}]
        with self._reporting(META) as report:
            report(await self.write(self.meta, functools.partial(upsert_meta, self.meta, rows), meta=[key]), rows)

    def hold_state(self, values: dict[str, str]) -> bool:
        """Queue state entries instead of writing them (a chat session's state: `memos.store.lancedb.write_behind`):
        journaled before this returns, counted by this process's remembered reads at once. False
        (nothing queued) when the store has no journal: the caller writes them itself."""
        if not self.behind.journaled:
            return False
        try:
            self.behind.queue([], [], state=values)
        except OSError as exc:  # the journal could not take them (a full disk): nothing was queued
            raise journal_error(exc, self.uri) from exc
        self.reads.added(META, [{"key": k, "value": v} for k, v in values.items()])
        return True

    async def write_state(self, values: dict[str, str]) -> None:
        """Write state entries `hold_state` queued (their remembered reads counted them already)."""
        with self._reporting(META) as report:
            rows = [{"key": k, "value": v} for k, v in values.items()]
            report(await self.write(self.meta, functools.partial(upsert_meta, self.meta, rows), meta=values), [])

    async def delete_meta(self, keys: list[str]) -> None:
        """Remove meta entries (exact keys, quoted; never a pattern built from input)."""
        for key in keys:
            with self._reporting(META) as report:
                report(await self.write(self.meta, functools.partial(self.meta.delete, f"key = {sql_string(key)}"), meta=[key]))

    async def rebuild_text_index(self, memory_type: str) -> None:
        """Recreate a table's full-text index from its current rows (drops terms of deleted rows)."""
        table = self.tables[memory_type].table
        await self.write(table, text_index(table))
        if self.search.covers(memory_type):
            await self.search.rebuild_text_index()

    async def get_meta(self) -> dict[str, str]:
        return await self.read(self.meta, lambda: read_meta(self.meta))


async def read_meta(meta: Any) -> dict[str, str]:
    return {row["key"]: row["value"] for row in await meta.query().to_list()}


def upsert_meta(meta: Any, rows: list[dict[str, str]]) -> Awaitable[Any]:
    """One write of meta entries, by key (a store's writes run it through `Storage.write`)."""
    return meta.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(rows)


async def write_meta(meta: Any, rows: list[dict[str, str]]) -> Any:
    """`upsert_meta` before a store is open (commit conflicts retried)."""
    return await retry_conflicts(lambda: upsert_meta(meta, rows))
