"""Which tables hold rows, as far as one process knows: what lets a search skip empty stores.

A table once seen with rows (counted, or written by this process) is taken to have them
(searching a table emptied since is harmless); one counted empty stays empty until another
process commits to the store (its epoch, `memos.store.lancedb.commits`; `UNCOUNTED` seconds at
most), or, for a store without that counter (object storage), for the store's read-consistency
interval, then is counted again.
Concurrent searches that find a table's answer stale share one count instead of each reading
the table (every search of a busy server asks about every store at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol

from .commits import rows_of
from .errors import retrying

__all__ = ["RowPresence", "UNCOUNTED", "store_epochs", "stored_rows"]


UNCOUNTED = 30.0
"""Seconds a table counted empty stays so even while no process counts a commit to it."""


class RowPresence:
    """What one open store knows about its tables' emptiness (see the module docstring)."""

    def __init__(self, consistency: float, epoch: Callable[[str], Hashable] | None = None) -> None:
        self.consistency = consistency
        """Seconds a table counted empty is taken to stay empty (without `epoch`)."""
        self.epoch = epoch
        """A table's epoch: moves on when another process has written it (None: not known)."""
        self._nonempty: set[str] = set()
        self._empty_at: dict[str, tuple[float, Hashable]] = {}  # table -> when it was last counted empty (monotonic; epoch)
        self._counting: dict[str, asyncio.Task[int]] = {}

    def known(self, name: str) -> bool | None:
        """Whether `name` has rows, without reading it; None when it must be counted."""
        if name in self._nonempty:
            return True
        seen = self._empty_at.get(name)
        if seen is None:
            return None
        if self.epoch is not None:  # and a while at most: a process killed between a commit and its count never counted it
            return False if self.epoch(name) == seen[1] and time.monotonic() - seen[0] <= UNCOUNTED else None
        return False if time.monotonic() - seen[0] <= self.consistency else None

    def added(self, name: str) -> None:
        """Rows were written to `name` (by this process)."""
        self._nonempty.add(name)

    async def has_rows(self, name: str, count: Callable[[], Awaitable[int]]) -> bool:
        """`known`, else the answer of one `count` of the table, shared by the callers asking meanwhile."""
        known = self.known(name)
        if known is not None:
            return known
        loop = asyncio.get_running_loop()
        task = self._counting.get(name)
        if task is None or task.get_loop() is not loop:
            task = self._counting[name] = loop.create_task(self._count(name, count))
        return await asyncio.shield(task) > 0  # a cancelled caller leaves the count to the others

    async def _count(self, name: str, count: Callable[[], Awaitable[int]]) -> int:
        epoch = self.epoch(name) if self.epoch is not None else 0  # before the count: a commit landing meanwhile makes it count again
        try:
            rows = await count()
        finally:
            self._counting.pop(name, None)
        if rows > 0:
            self._nonempty.add(name)
        else:
            self._empty_at[name] = (time.monotonic(), epoch)
        return rows


class _Store(Protocol):
    """What counting a store's rows uses of `memos.store.lancedb.storage.Storage`."""

    uri: str
    tables: dict[str, Any]
    behind: Any
    commits: Any
    retries: Any


async def stored_rows(storage: _Store, memory_type: str) -> int:
    """A store's rows, counting those another process has acknowledged and not yet written to its
    table (journaled: `memos.store.lancedb.journal`); this process's own queued rows are not
    counted, nor written first as a read would (`RowPresence.added` knows them). The journals are
    read before the table is counted: rows that leave a journal meanwhile were written to it first."""
    table = storage.tables[memory_type].table
    waiting = await asyncio.to_thread(storage.behind.waiting) if storage.behind.journaled else {}
    await storage.commits.catch_up(table)
    return await retrying(table, lambda: table.count_rows(), 4, storage.uri, storage.retries) + len(waiting.get(memory_type, ()))


def store_epochs(storage: _Store, memory_type: str) -> tuple[int, int]:
    """What a store counted empty stays empty while it does not move: the epochs of its table and
    of its rows in the shared search table (`memos.store.lancedb.commits`)."""
    return storage.commits.epoch(storage.tables[memory_type].table.name), storage.commits.epoch(rows_of(memory_type))
