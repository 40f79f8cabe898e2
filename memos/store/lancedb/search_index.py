"""One shared search table for the stores a search covers by default, mirrored from them.

A top-k search would make a vector and a full-text query per store (ten LanceDB queries over
the five default stores, each with a fixed cost). The shared
table holds, for every record of the mirrored stores, what ranking and filtering read (id,
store, scope, status, importance, time, tags), its indexed text, its vector and the record as
a search returns it (`RECORD`: every field but the vector and the secret fields); a search
makes one vector and one full-text query on it, always inside the scope, and builds its winners
from those rows, with no second read from their own stores.

The typed tables stay the source of truth. Every write to a mirrored store is repeated here
right after it commits (`Storage` calls `added`, `upserted`, `synced`), or, for the group
commit's adds on a local store, right after they are journaled (`memos.group_commit`); a write here that fails
marks the index behind, and searches of this process go back to the per-store queries until
`check` has caught it up. `check` runs on every open: a crash between the two commits leaves
rows missing, stale or left over here, and it finds and fixes them by comparing ids and
`updated_at` with the typed tables, so nothing acknowledged stays unsearchable (a row whose
record waits in a live process's journal, `memos.store.lancedb.journal`, is no left-over). A store that
has no shared table yet, or one built for another embedder or set of stores, gets it rebuilt.

A store with secret fields (the vault) is mirrored without them: its caption, which its own
table already embeds and indexes, and the caption's vector are here, the secret is not, not
even as ciphertext (a search hands out records with secret fields blank anyway). The stores
outside the default set (core, entity) are searched with their own queries.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from memos.memtypes import MemoryRecord
from memos.store.fulltext import FORM as FULLTEXT_FORM
from memos.store.protocol import EVENT_TIME, RECORD
from memos.store.schema import VECTOR_COLUMN, arrow_schema, arrow_table
from memos.store.scope import RowTest, sql_in, sql_string

from .held_reads import HeldReads
from .text_index import text_index

T = TypeVar("T")


class _Store(Protocol):
    """What the shared table uses of its store (`memos.store.lancedb.storage.Storage`), named here
    so that the store, which holds one, and this module import each other in no direction but one."""

    dim: int
    embedder_name: str | None
    conn: Any
    tables: dict[str, Any]
    behind: Any
    compaction: Any
    commits: Any

    async def get_meta(self) -> dict[str, str]: ...
    async def set_meta(self, key: str, value: str) -> None: ...
    async def read(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 4) -> T: ...
    async def write(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 12) -> T: ...
    async def commit(self, table: Any, op: Callable[[], Awaitable[T]], rows: int = 0, rows_of: Collection[str] = (),
                     changed: Sequence[str] | None = None) -> T: ...
    async def rows(self, memory_type: str, where: str | None, limit: int | None = None,
                   columns: list[str] | None = None) -> list[dict[str, Any]]: ...

__all__ = ["EVENT_TIME", "Gathered", "RANKED", "RECORD", "SEARCH_META", "SEARCH_TABLE", "SearchIndex", "mirrored", "ranked_row",
           "ranked_rows", "record_row", "record_text"]

log = logging.getLogger("memos.store.lancedb.search_index")

SEARCH_TABLE = "_search"
"""The shared table's name prefix (a rebuild writes `_search_g<n>` and switches in meta)."""
SEARCH_META = "search:index"
"""Meta key: the shared table in use and what it was built for (stores, embedder, dimension)."""

_SCALARS = ("id", "user_id", "agent_id", "session_id", "status", "importance", "created_at", "updated_at", "tags", "text")

_CHUNK = 1_000
FORM = 2
"""The shared table's layout; a table of another form is rebuilt on open (2: `RECORD`, the vault's captions)."""
_GATHERED: ContextVar[list[dict[str, Any]] | None] = ContextVar("memos_search_gathered", default=None)
RANKED = [RECORD]
"""What a search reads of each candidate here (`RECORD`)."""


@functools.lru_cache(maxsize=256)
def _record_columns(record_type: type[MemoryRecord]) -> tuple[str, ...]:
    """The typed columns `RECORD` holds: every field but the vector and the secret fields."""
    return tuple(name for name in record_type.model_fields if name != VECTOR_COLUMN and name not in record_type.secret_fields)


@functools.lru_cache(maxsize=256)
def _time_columns(record_type: type[MemoryRecord]) -> tuple[str, ...]:
    """The fields stored as timestamps (ISO text in `RECORD`, datetimes again when read)."""
    schema = arrow_schema(record_type, 1)
    return tuple(name for name in _record_columns(record_type) if pa.types.is_timestamp(schema.field(name).type))


def _source_columns(record_type: type[MemoryRecord]) -> list[str]:
    """The typed columns a shared row is made of (never a secret field)."""
    return list(dict.fromkeys(["id", *_SCALARS, record_type.time_field, *_record_columns(record_type), VECTOR_COLUMN]))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not stored in a search record")


def record_text(record_type: type[MemoryRecord], row: dict[str, Any]) -> str:
    """`RECORD` of a typed row (never its vector or a secret field)."""
    when = row.get(record_type.time_field) or row["created_at"]
    head = json.dumps([record_type.memory_type, row["id"], row.get("importance"), _micros(when)])  # escapes any newline
    body = json.dumps({name: row.get(name) for name in _record_columns(record_type)}, default=_json_value,
                      ensure_ascii=False, separators=(",", ":"))
    return f"{head}\n{body}"


def ranked_row(text: str) -> dict[str, Any]:
    """What ranking reads of a candidate, from its `RECORD` (the record itself is kept as text
    under `RECORD` until the candidate is known to be returned: `record_row`)."""
    return ranked_rows([text])[0]


def ranked_rows(texts: Sequence[str]) -> list[dict[str, Any]]:
    """`ranked_row` of each of a query's candidates; their first lines are parsed as one JSON
    text (a query returns 100-300 candidates: half the time of parsing them one by one)."""
    heads, bodies = [], []
    for text in texts:
        head, body = text.split("\n", 1)
        heads.append(head)
        bodies.append(body)
    rows = []
    for (memory_type, record_id, importance, micros), body in zip(json.loads(f"[{','.join(heads)}]"), bodies, strict=True):
        when = _EPOCH + timedelta(microseconds=micros)
        rows.append({"memory_type": memory_type, "id": record_id, "importance": importance, EVENT_TIME: when, "created_at": when,
                     RECORD: body})
    return rows


def record_row(record_type: type[MemoryRecord], body: str) -> dict[str, Any]:
    """The typed row (as `Storage.take` reads it, secret fields blank) of a record's JSON
    (`ranked_row(...)[RECORD]`)."""
    row = json.loads(body)
    for name in _time_columns(record_type):
        if row.get(name) is not None:
            row[name] = datetime.fromisoformat(row[name])
    for name in record_type.secret_fields:
        row[name] = ""
    return row


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _held_ranked(found: Sequence[dict[str, Any]], score: str, with_text: bool) -> list[dict[str, Any]]:
    """A held copy's answer as `_ranked` gives LanceDB's: `ranked_row`s with the score (and text)."""
    out = ranked_rows([r[RECORD] for r in found])
    for row, hit in zip(out, found, strict=True):
        row[score] = hit[score]
        if with_text:
            row["text"] = hit["text"]
    return out


def _micros(at: datetime) -> int:
    delta = at.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def mirrored(record_type: type[MemoryRecord]) -> bool:
    """Whether a store is kept in the shared table: searched by default (a secret store without
    its secret fields, see the module docstring)."""
    return record_type.searched_by_default


class SearchIndex:
    """The shared search table of one open store (see the module docstring)."""

    def __init__(self, storage: _Store, types: Sequence[type[MemoryRecord]]) -> None:
        self.storage = storage
        self.types = {t.memory_type: t for t in types if mirrored(t)}
        self.table: Any = None
        self._schema: tuple[int, pa.Schema] | None = None
        self.behind = False
        """A mirror write failed in this process: searches use the per-store queries until `check`."""
        self.reads = HeldReads(self)
        """The held copies' loads, change notices and catch-ups (`memos.store.lancedb.held_reads`)."""
        self.held = self.reads.held
        """The rows of the filters searched most, held in memory and kept up to date by `mirror`
        and by the other processes' change notices (`memos.store.lancedb.held_rows`)."""

    def covers(self, memory_type: str) -> bool:
        return memory_type in self.types

    @property
    def usable(self) -> bool:
        return self.table is not None and not self.behind

    def schema(self) -> pa.Schema:
        if self._schema is not None and self._schema[0] == self.storage.dim:
            return self._schema[1]
        typed = arrow_schema(next(iter(self.types.values())), self.storage.dim)
        fields = [pa.field("key", pa.string()), pa.field("memory_type", pa.string()),
                  *(typed.field(name) for name in _SCALARS), pa.field(EVENT_TIME, pa.timestamp("us", tz="UTC"), nullable=True),
                  pa.field(RECORD, pa.string(), nullable=True), typed.field(VECTOR_COLUMN)]
        self._schema = (self.storage.dim, pa.schema(fields))
        return self._schema[1]

    def _built_for(self) -> dict[str, Any]:
        """What the table was built from: a store whose answer differs gets it rebuilt on open."""
        return {"form": FORM, "fulltext": FULLTEXT_FORM, "types": sorted(self.types), "dim": self.storage.dim,
                "embedder": self.storage.embedder_name, "tables": {name: self.storage.tables[name].table.name for name in sorted(self.types)}}

    def project(self, memory_type: str, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The shared rows of typed rows (as written: `text` in its indexed form, with the vector;
        never a secret field)."""
        record_type = self.types[memory_type]
        time_field = record_type.time_field
        return [{"key": f"{memory_type}:{r['id']}", "memory_type": memory_type, **{c: r.get(c) for c in _SCALARS},
                 EVENT_TIME: r.get(time_field), RECORD: record_text(record_type, r), VECTOR_COLUMN: r.get(VECTOR_COLUMN)}
                for r in rows]

    def typed_row(self, memory_type: str, body: str) -> dict[str, Any]:
        """The typed row of a candidate's record (`ranked_row(...)[RECORD]`): what `Storage.take`
        would read, secret fields blank."""
        return record_row(self.types[memory_type], body)

    # --- opening: find the table, rebuild or catch up ------------------------------------

    async def open(self) -> None:
        """Open the shared table, rebuilding it if it is missing or was built for other stores,
        another embedder or other physical tables; then catch it up (`check`)."""
        if not self.types:
            return
        meta = await self.storage.get_meta()
        recorded = json.loads(meta[SEARCH_META]) if SEARCH_META in meta else None
        names = set(await self.storage.conn.table_names(limit=100_000))
        if recorded is None or recorded.get("table") not in names or {k: recorded.get(k) for k in self._built_for()} != self._built_for():
            await self.rebuild()
            return
        self.table = await self.storage.conn.open_table(recorded["table"])
        self.held.clear()
        await self.check()

    async def rebuild(self) -> int:
        """Build a fresh shared table from the typed tables and switch to it; returns its rows."""
        await self.storage.behind.flush()  # into the old table, not twice into the new one
        meta = await self.storage.get_meta()
        recorded = json.loads(meta[SEARCH_META]) if SEARCH_META in meta else {}
        generation = int(recorded.get("generation", 0)) + 1
        name = f"{SEARCH_TABLE}_g{generation}"
        if name in set(await self.storage.conn.table_names(limit=100_000)):  # left by a rebuild cut short
            await self.storage.conn.drop_table(name)
        # created, not overwritten: LanceDB logs a warning to stderr for every overwrite of a new table
        table = await self.storage.conn.create_table(name, schema=self.schema())
        total = 0
        for memory_type in self.types:
            typed = self.storage.tables[memory_type].table
            columns = _source_columns(self.types[memory_type])
            async for batch in await typed.query().select(columns).to_batches():
                rows = self.project(memory_type, batch.to_pylist())
                if rows:
                    await table.add(rows)
                    total += len(rows)
        await self.storage.write(table, text_index(table))
        if total:
            await self.storage.write(table, lambda: table.optimize())
        old = recorded.get("table")
        await self.storage.set_meta(SEARCH_META, json.dumps({**self._built_for(), "table": name, "generation": generation}))
        self.table, self.behind = table, False
        self.held.clear()
        if old and old != name:
            try:
                await self.storage.conn.drop_table(old)
            except (OSError, RuntimeError, ValueError) as exc:  # another process may still read it; a later rebuild drops it
                log.info("old search table %s left in place (%s)", old, exc)
        log.info("search table %s built: %d rows of %s", name, total, ", ".join(self.types))
        return total

    async def check(self) -> dict[str, int]:
        """Compare the shared table with the typed tables (ids and `updated_at`) and fix what
        differs: rows missing or stale here are written from the typed rows, rows left over
        (deleted, or doubled by a repair racing a writer) are removed. Returns the counts.
        The comparison is two Arrow joins per store."""
        fixed = {"written": 0, "removed": 0}
        waiting = self.storage.behind.waiting()  # read before the stores: rows written meanwhile are in them
        for memory_type in self.types:
            truth = await self._pairs(self.storage.tables[memory_type].table, None)
            here = await self._pairs(self.table, f"memory_type = {sql_string(memory_type)}")
            keys = ["id", "updated_at"]
            stale = truth.join(here, keys=keys, join_type="left anti")["id"].to_pylist()
            # a row whose record waits in a live process's journal is not left over: it is written there soon
            extra = set(here.join(truth, keys=keys, join_type="left anti")["id"].to_pylist()) - waiting.get(memory_type, set())
            if extra:  # nor is one another process wrote (its store's row, then this one) between the two reads
                extra -= await self._now_in_store(memory_type, here, extra)
            counts = here.group_by("id").aggregate([("id", "count")])
            doubled = set(counts.filter(pa.compute.greater(counts["id_count"], 1))["id"].to_pylist())
            removed = sorted(extra | doubled)
            if removed:
                await self._delete(memory_type, removed)
                kept = pa.compute.is_in(pa.array(removed, pa.string()), value_set=truth["id"]).to_pylist()
                stale = list(dict.fromkeys([*stale, *(i for i, still in zip(removed, kept, strict=True) if still)]))
            for start in range(0, len(stale), _CHUNK):
                await self.synced(memory_type, stale[start : start + _CHUNK])
            fixed["written"] += len(stale)
            fixed["removed"] += len(set(removed) - set(stale))
        self.behind = False
        if fixed["written"] or fixed["removed"]:
            log.warning("search table caught up with the stores: %d rows written, %d removed", fixed["written"], fixed["removed"])
        return fixed

    async def _now_in_store(self, memory_type: str, here: pa.Table, ids: Collection[str]) -> set[str]:
        """Of `ids`, rows of the shared table that their store lacked when `check` read it, those
        whose record (id and `updated_at`) the store holds now, read at its latest version."""
        table, ids = self.storage.tables[memory_type].table, sorted(ids)
        await table.checkout_latest()  # on object storage too, where no commit counters move it
        now = pa.concat_tables([await self._pairs(table, sql_in("id", ids[start : start + _CHUNK]))
                                for start in range(0, len(ids), _CHUNK)])
        return set(here.join(now, keys=["id", "updated_at"], join_type="inner")["id"].to_pylist())

    async def _pairs(self, table: Any, where: str | None) -> pa.Table:
        query = table.query().select(["id", "updated_at"])
        if where:
            query = query.where(where)
        result = await self.storage.read(table, query.to_arrow)
        return pa.table({"id": result["id"], "updated_at": result["updated_at"].cast(pa.int64())})

    # --- mirroring the writes ------------------------------------------------------------

    def gathering(self) -> Gathered:
        """A block whose adds to several stores are mirrored in one commit (`Gathered`)."""
        return Gathered(self)

    async def added(self, memory_type: str, rows: Sequence[dict[str, Any]]) -> None:
        """Typed rows just added."""
        data = self.project(memory_type, rows)
        pending = _GATHERED.get()
        if pending is not None and self.table is not None:
            pending.extend(data)
            return
        await self.mirror(lambda: self.table.add(data), len(rows), [memory_type], sets=data)

    async def append(self, rows: Sequence[dict[str, Any]]) -> None:
        """Add shared rows (`project`) in one commit (a failure marks the table behind; never raises)."""
        if rows:
            await self.mirror(lambda: self.table.add(arrow_table(list(rows), self.schema())), len(rows),
                              {row["memory_type"] for row in rows}, sets=rows)

    async def upserted(self, memory_type: str, rows: Sequence[dict[str, Any]]) -> None:
        """Typed rows just written by id (inserted or replaced)."""
        data = self.project(memory_type, rows)
        await self.mirror(lambda: self.table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(data),
                          len(rows), [memory_type], sets=data)

    async def synced(self, memory_type: str, ids: Sequence[str]) -> None:
        """Make these ids here what the typed table holds now (written, or removed if gone)."""
        if not ids or self.table is None:
            return
        typed = self.storage.tables[memory_type]
        columns = _source_columns(typed.record_type)
        found: list[dict[str, Any]] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            found += await self.storage.rows(memory_type, sql_in("id", chunk), columns=columns)
        gone = sorted(set(ids) - {r["id"] for r in found})
        if gone:
            await self._delete(memory_type, gone)
        if found:
            await self.upserted(memory_type, found)

    async def _delete(self, memory_type: str, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), _CHUNK):
            chunk = [f"{memory_type}:{i}" for i in ids[start : start + _CHUNK]]
            keys = sql_in("key", chunk)
            await self.mirror(lambda keys=keys: self.table.delete(keys), 0, removed=chunk)

    async def mirror(self, op: Any, rows: int, types: Collection[str] = (), *, sets: Sequence[dict[str, Any]] = (),
                     removed: Sequence[str] = ()) -> None:
        """Run one write on the shared table after the typed write committed, adding rows of
        `types`: it sets the shared rows `sets` by key and removes the keys `removed` (what the
        held vectors take); a failure marks it behind."""
        if self.table is None:
            return
        try:
            result = await self.storage.commit(self.table, op, rows, rows_of=types, changed=[*(row["key"] for row in sets), *removed])
        except (OSError, RuntimeError, ValueError) as exc:  # incl. memos' storage errors: the typed write has committed
            self.held.clear()  # the write may have landed or not
            self.behind = True
            log.warning("the shared search table missed a write (%s); searches use each store's own queries until it "
                        "is caught up (next open, or maintenance)", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        except BaseException:  # cancelled: landed or not
            self.held.clear()
            raise
        else:
            self.held.wrote(getattr(result, "version", None), sets, removed)

    async def vector_search(self, vector: list[float], where: str, limit: int, *, with_text: bool = False,
                            test: RowTest | None = None) -> list[dict[str, Any]]:
        """The `limit` nearest rows in `where` (cosine), best first, as `ranked_row`s (with the
        indexed `text` if `with_text`) with `_distance`. With `test` (the same filter as a test of
        a row: `Where.test`), from the rows held in memory once the filter is searched often
        (`memos.store.lancedb.held_rows`)."""
        if test is not None and self.storage.commits.path is not None:
            found = await self.reads.answer(where, with_text, test, "vector",
                                            lambda epoch: self.held.nearest(where, with_text, epoch, vector, limit))
            if found is not None:
                return _held_ranked(found, "_distance", with_text)
        return await self._ranked(self.table.query().nearest_to(vector).distance_type("cosine"), "_distance", where, limit, with_text)

    async def text_search(self, text: str, where: str, limit: int, *, with_text: bool = False,
                          test: RowTest | None = None) -> list[dict[str, Any]]:
        """The `limit` best BM25 matches of `text` in `where`, best first, as `ranked_row`s with
        `_score`. With `test`, from the rows held in memory once the filter is searched often, with
        the table's terms (`memos.store.lancedb.held_rows`)."""
        if test is not None and self.storage.commits.path is not None:
            found = await self.reads.answer(where, with_text, test, "text",
                                            lambda epoch: self.held.best_text(where, with_text, epoch, text, limit))
            if found is not None:
                return _held_ranked(found, "_score", with_text)
        return await self._ranked(self.table.query().nearest_to_text(text, columns="text"), "_score", where, limit, with_text)

    async def _ranked(self, query: Any, score: str, where: str, limit: int, with_text: bool) -> list[dict[str, Any]]:
        table = self.table
        self.storage.compaction.searching(table)
        extra = ["text"] if with_text else []
        result = await self.storage.read(table, query.select([*RANKED, *extra, score]).limit(limit).where(where).to_arrow)
        rows = ranked_rows(result[RECORD].to_pylist())
        for row, value in zip(rows, result[score].to_pylist(), strict=True):
            row[score] = value
        for name in extra:
            for row, value in zip(rows, result[name].to_pylist(), strict=True):
                row[name] = value
        return rows

    async def rebuild_text_index(self) -> None:
        """Recreate the full-text index from the current rows (drops the terms of deleted rows)."""
        if self.table is not None:
            await self.storage.write(self.table, text_index(self.table))


class Gathered:
    """Rows added to several stores inside a `with` block are mirrored in one commit by `flush`,
    which the caller awaits afterwards (also when the block failed: the stores that committed are
    mirrored), beside its history append: one `MemoryOS.add` of mixed records is one commit here,
    not one per store (each commit is a version on disk until compaction)."""

    def __init__(self, index: SearchIndex) -> None:
        self.index = index
        self.rows: list[dict[str, Any]] = []
        self._token: Any = None

    def __enter__(self) -> Gathered:
        self._token = _GATHERED.set(self.rows)
        return self

    def __exit__(self, *exc: object) -> None:
        _GATHERED.reset(self._token)

    async def flush(self) -> None:
        """Mirror what was gathered (a failure marks the index behind; never raises)."""
        rows, self.rows = self.rows, []
        await self.index.append(rows)
