"""What the kernel needs from a store, as protocols: the boundary every backend implements.

The kernel (the facade, retrieval, the context, the jobs, the graph, the vault) types its store
as `Store` and uses nothing else of it. `memos.store.lancedb.Storage` is the implementation
today, on a local directory or any LanceDB URI (object storage); a second backend implements
these protocols and passes the contract suite (`tests/test_store_contract.py`).

Conventions every implementation keeps:

- A memory type's rows are dicts of the record's fields (`memos.store.schema.row_from_record`);
  `id` is unique in the whole store. Times are UTC-aware `datetime`s.
- `where` filters are built only by `memos.store.scope.Where` (a SQL subset: `=`, `IN`, `AND`,
  `OR`, comparisons of timestamps, `array_has_any`), never from input text.
- `update_rows` is conditional: a row is replaced only while its `updated_at` is the one read,
  and never inserted (a record deleted meanwhile stays deleted); the ids that lost the race are
  a `RecordChangedError`.
- History rows follow `memos.store.history.HISTORY_SCHEMA`; meta is a string key-value table.
- Reads may be up to `READ_CONSISTENCY` stale for other processes' writes, never for this one's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

import pyarrow as pa

from memos.memtypes import MemoryRecord

from .history import HistoryEntry
from .read_cache import ReadCache
from .scope import RowTest

__all__ = ["EVENT_TIME", "KeyLock", "NoticeBoard", "RECORD", "RecordTable", "SharedIndex", "Store", "WriteQueue"]

EVENT_TIME = "event_time"
"""The column holding each record's own time field (`time_field`: occurred_at for a turn)."""
RECORD = "record"
"""The column a search reads of each candidate: one line of what ranking needs (a JSON array:
store, id, importance, the record's time in microseconds), then the record as a search returns
it (its typed row without the vector and the secret fields, JSON, datetimes in ISO form). So a
top-k search's winners need no read by id from their own stores, and each query reads one
column of its candidates (each further column costs every query)."""


class RecordTable(Protocol):
    """A memory type bound to the store's table for it: how its records become rows and back."""

    record_type: type[MemoryRecord]

    @property
    def name(self) -> str: ...

    @property
    def result_columns(self) -> list[str]:
        """The columns a search returns: every field but the vector."""
        ...

    def to_record(self, row: dict[str, Any]) -> MemoryRecord: ...

    def to_row(self, record: MemoryRecord, vector: list[float] | None) -> dict[str, Any]: ...


class SharedIndex(Protocol):
    """One search over the default stores at once (a table mirroring them), when the store has one."""

    @property
    def types(self) -> Collection[str]:
        """The memory types mirrored."""
        ...

    @property
    def usable(self) -> bool: ...

    def covers(self, memory_type: str) -> bool: ...

    async def vector_search(self, vector: list[float], where: str, limit: int, *, with_text: bool = False,
                            test: RowTest | None = None) -> list[dict[str, Any]]: ...

    async def text_search(self, text: str, where: str, limit: int, *, with_text: bool = False,
                          test: RowTest | None = None) -> list[dict[str, Any]]: ...

    def typed_row(self, memory_type: str, body: str) -> dict[str, Any]:
        """The typed row of a shared row's record, as `Store.take` reads it."""
        ...

    def gathering(self) -> Any:
        """A context in which mirrored rows are gathered for one commit (`flush`)."""
        ...


class WriteQueue(Protocol):
    """Rows acknowledged once journaled and written a moment later (a chat turn's)."""

    def step(self) -> AbstractContextManager[None]:
        """Queued writes wait while a step runs (its reads are not delayed by them)."""
        ...

    def excused(self, ids: Collection[str]) -> AbstractContextManager[None]:
        """Reads in this context may leave queued rows of these records unwritten."""
        ...

    def queue(self, history: list[dict[str, Any]], shared: list[dict[str, Any]]) -> None: ...


class KeyLock(Protocol):
    """Locks by key that every process of a store shares (`memos.store.lancedb.keylocks`)."""

    def hold(self, key: str) -> AbstractAsyncContextManager[None]: ...


class NoticeBoard(Protocol):
    """Small notices one process of a store posts for its others (`memos.store.lancedb.notices`)."""

    def pseudonym(self, value: str) -> str: ...
    def post(self, notice: dict[str, Any]) -> None: ...
    def skip(self) -> None: ...
    def stop(self) -> None: ...
    def read(self) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


class Store(Protocol):
    """An open store: one table per memory type, history, meta, and the shared search."""

    uri: str
    dim: int
    embedder_name: str | None
    reads: ReadCache
    """Reads remembered at table versions; every write reports to it."""

    @property
    def search(self) -> SharedIndex:
        """The shared search over the default stores (read-only here, so an implementation's own class fits)."""
        ...

    @property
    def behind(self) -> WriteQueue:
        """The write-behind queue (read-only here, so an implementation's own class fits)."""
        ...

    @property
    def locks(self) -> KeyLock:
        """Locks by key across every process of the store (read-only here)."""
        ...

    @property
    def notices(self) -> NoticeBoard:
        """Notices posted by one process of the store for the others (read-only here)."""
        ...

    # --- rows of a memory type ---------------------------------------------------------------

    def memory_types(self) -> list[str]: ...
    def type_table(self, memory_type: str) -> RecordTable: ...
    def known_rows(self, memory_type: str) -> bool | None: ...
    async def has_rows(self, memory_type: str) -> bool: ...
    async def add_rows(self, memory_type: str, rows: list[dict[str, Any]]) -> None: ...
    async def upsert_rows(self, memory_type: str, rows: list[dict[str, Any]]) -> None: ...
    async def update_rows(self, memory_type: str, rows: list[dict[str, Any]], read_at: dict[str, datetime]) -> None: ...
    async def delete_rows(self, memory_type: str, where: str) -> None: ...
    async def rows(self, memory_type: str, where: str | None, limit: int | None = None,
                   columns: list[str] | None = None) -> list[dict[str, Any]]: ...
    async def columns(self, memory_type: str, where: str | None, columns: list[str]) -> pa.Table: ...
    async def count(self, memory_type: str, where: str | None = None) -> int: ...
    def hold(self, typed: dict[str, list[dict[str, Any]]], history: list[dict[str, Any]]) -> bool:
        """Queue rows (journaled, so durable) instead of committing them; False: commit them yourself."""
        ...

    # --- queries -----------------------------------------------------------------------------

    async def vector_search(self, memory_type: str, vector: list[float], where: str | None, limit: int,
                            columns: Sequence[str] | None = None) -> list[dict[str, Any]]: ...
    async def text_search(self, memory_type: str, text: str, where: str | None, limit: int,
                          columns: Sequence[str] | None = None) -> list[dict[str, Any]]: ...
    async def take(self, memory_type: str, rows: Sequence[dict[str, Any]], where: str | None) -> list[dict[str, Any]]: ...

    # --- history and meta --------------------------------------------------------------------

    async def append_history(self, entries: list[dict[str, Any]]) -> None: ...
    async def history_rows(self, where: str | None, limit: int | None = None) -> list[HistoryEntry]: ...
    async def history_columns(self, columns: list[str]) -> pa.Table: ...
    async def raw_history(self, where: str) -> list[dict[str, Any]]: ...
    async def rewrite_history(self, rows: list[dict[str, Any]]) -> None: ...
    async def delete_history(self, where: str) -> None: ...
    async def get_meta(self) -> dict[str, str]: ...
    def meta_epoch(self, family: str) -> Hashable | None:
        """Moves on when another process writes a meta entry of `family` (the key up to its first ':'); None: not known."""
    async def set_meta(self, key: str, value: str) -> None: ...
    async def delete_meta(self, keys: list[str]) -> None: ...
    def hold_state(self, values: dict[str, str]) -> bool: ...
    async def write_state(self, values: dict[str, str]) -> None: ...

    # --- versions, consistency, purge --------------------------------------------------------

    async def versions(self) -> dict[str, int]: ...
    async def version(self, memory_type: str) -> int: ...
    async def label(self, name: str) -> int | None: ...
    async def refresh(self) -> None: ...
    async def await_journaled(self, memory_type: str, record_id: str) -> bool: ...
    async def settle(self) -> None: ...
    def after_optimize(self, name: str, hook: Callable[[], Awaitable[None]]) -> None: ...
    async def purge_old_versions(self, memory_type: str | None = None, *, wait: float = ...) -> bool: ...
    async def finish_deferred_purge(self, now: datetime | None = None, *, wait: float = ...) -> str | None: ...
