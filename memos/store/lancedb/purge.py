"""Purging: removed data gone from disk, not just from the latest table version.

Forgetting a user, rotating the vault key and scrubbing a secret out of a turn must drop every
old version of the tables they touched, which deletes files another process may still read or
write. A purge holds the store lease alone (`memos.store.lancedb.lease`): no write of any process
is in flight. Without the lease (busy writers, or object storage) it is deferred, and the
maintenance job finishes it once no reader can still be on a version that old.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from lancedb.index import Bitmap, BTree, IvfHnswSq

from .compaction import KEEP_VERSIONS
from .lease import StoreLease
from .text_index import text_index_config

__all__ = ["PENDING_PURGE", "PURGE_MARGIN", "PURGE_WAIT", "Purge", "vector_index"]

log = logging.getLogger("memos.store.lancedb.purge")
T = TypeVar("T")

PURGE_WAIT = 30.0
"""Seconds a purge waits for other processes' in-flight writes before it defers itself."""
PURGE_MARGIN = KEEP_VERSIONS
"""A deferred purge drops the versions older than this at the next maintenance run: no reader
or writer of any process still needs a version that old."""
PENDING_PURGE = "purge:pending"
"""Meta key: when a purge that could not run at once was asked for (finished by maintenance)."""


def vector_index(rows: int) -> IvfHnswSq:
    """The ANN index a table of `rows` rows gets (`memos.store.lancedb.indexing`): IVF-HNSW-SQ, cosine."""
    return IvfHnswSq(distance_type="cosine", num_partitions=max(1, min(256, rows // 4096)))


_INDEX_CONFIGS: dict[str, Callable[[int], Any]] = {
    "BTree": lambda rows: BTree(), "Bitmap": lambda rows: Bitmap(),
    "FTS": lambda rows: text_index_config(), "IvfHnswSq": vector_index,
}
"""How to build each kind of index memos makes again, by LanceDB's index type name."""


class _Purged(Protocol):
    """What a purge uses of the store (`Storage`)."""

    uri: str
    lease: StoreLease

    async def flush_queued(self) -> None: ...
    async def write(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 12) -> T: ...
    async def get_meta(self) -> dict[str, str]: ...
    async def set_meta(self, key: str, value: str) -> None: ...
    async def delete_meta(self, keys: list[str]) -> None: ...


class Purge:
    """Drops old table versions of one store (`Storage.purge_old_versions` and friends)."""

    def __init__(self, store: _Purged, retrying: Callable[[Any, Callable[[], Awaitable[Any]], int], Awaitable[Any]]) -> None:
        self._store = store
        self._retrying = retrying
        """Runs one write with its conflicts retried and purged versions re-read, outside the lease
        (the purge holds it alone)."""

    async def old_versions(self, tables: Sequence[Any], *, everything: bool, wait: float = PURGE_WAIT) -> bool:
        """Compact and drop every old version of `tables`, rebuilding their indexes, so removed data
        is gone from disk; returns whether that happened now. Deferred (`PENDING_PURGE`) when the
        lease cannot be had within `wait` seconds; versions older than `KEEP_VERSIONS` go now.
        `everything`: the tables are the whole store, so a pending purge is finished by this one."""
        store = self._store
        await store.flush_queued()  # queued rows are written before, not into a scrubbed table after
        async with store.lease.exclusive(wait) as alone:
            if alone:
                for table in tables:
                    await self._scrub_table(table)
        if alone:
            if everything and PENDING_PURGE in await store.get_meta():
                await store.delete_meta([PENDING_PURGE])
            return True
        if PENDING_PURGE not in await store.get_meta():
            await store.set_meta(PENDING_PURGE, datetime.now(UTC).isoformat())
        log.warning("purge of old versions of %s deferred: other writers held the store for %.0f s or it is remote; "
                    "the next maintenance run finishes it", store.uri, wait)
        for table in tables:
            await store.write(table, functools.partial(table.optimize, cleanup_older_than=KEEP_VERSIONS))
        return False

    async def finish_deferred(self, tables: Sequence[Any], now: datetime | None = None, *, wait: float = PURGE_WAIT) -> str | None:
        """Finish a deferred purge of the whole store (`tables`): with the lease, at once; without it,
        once `PURGE_MARGIN` has passed since it was asked for, by dropping the versions older than
        the margin. Returns what happened, or None when nothing was pending."""
        store = self._store
        requested = (await store.get_meta()).get(PENDING_PURGE)
        if requested is None:
            return None
        if await self.old_versions(tables, everything=True, wait=wait):
            return "purged"
        if (now or datetime.now(UTC)) - datetime.fromisoformat(requested) < PURGE_MARGIN:
            return "waiting"
        for table in tables:
            await store.write(table, functools.partial(table.optimize, cleanup_older_than=PURGE_MARGIN))
        await store.delete_meta([PENDING_PURGE])
        return "purged past the margin"

    async def _scrub_table(self, table: Any) -> None:
        """Leave nothing of a table's deleted rows on disk: not in its data files, not in its indexes,
        not in an old version (holding the lease alone).

        A compaction rewrites a data file only once a tenth of its rows are deleted, so a deleted row
        can stay inside a file still in use; then every row is updated to itself in one commit, which
        moves all rows to new files (a crash leaves the old version or the new one). Indexes keep
        keys of removed rows, so every index is built again from the rows as they are now."""
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
            await self._retrying(table, functools.partial(table.create_index, column, config=build(rows), replace=True,
                                                          name=index.name), 12)
        return bool(indexes)

    async def _drop_old_versions(self, table: Any, older_than: timedelta) -> None:
        await table.checkout_latest()
        with warnings.catch_warnings():
            # LanceDB warns that a reader still on an old version fails; readers retry on the latest one,
            # and keeping the old version would keep the removed data on disk.
            warnings.simplefilter("ignore", UserWarning)
            await self._retrying(table, lambda: table.optimize(cleanup_older_than=older_than, delete_unverified=True), 12)


async def _holds_deleted(table: Any) -> bool:
    """Whether a table's latest version still keeps deleted rows inside its data files."""
    versions = await table.list_versions()
    latest = max(versions, key=lambda v: v["version"])
    return int((latest.get("metadata") or {}).get("total_deletion_file_rows") or 0) > 0
