"""Which tables hold rows, as far as one process knows: what lets a search skip empty stores.

A table once seen with rows (counted, or written by this process) is taken to have them
(searching a table emptied since is harmless); one counted empty stays empty for the store's
read-consistency interval, then is counted again, since another process may have written it.
Concurrent searches that find a table's answer stale share one count instead of each reading
the table (every search of a busy server asks about every store at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["RowPresence"]


class RowPresence:
    """What one open store knows about its tables' emptiness (see the module docstring)."""

    def __init__(self, consistency: float) -> None:
        self.consistency = consistency
        """Seconds a table counted empty is taken to stay empty."""
        self._nonempty: set[str] = set()
        self._empty_at: dict[str, float] = {}  # table -> when it was last counted empty (monotonic)
        self._counting: dict[str, asyncio.Task[int]] = {}

    def known(self, name: str) -> bool | None:
        """Whether `name` has rows, without reading it; None when it must be counted."""
        if name in self._nonempty:
            return True
        seen = self._empty_at.get(name)
        if seen is not None and time.monotonic() - seen <= self.consistency:
            return False
        return None

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
        try:
            rows = await count()
        finally:
            self._counting.pop(name, None)
        if rows > 0:
            self._nonempty.add(name)
        else:
            self._empty_at[name] = time.monotonic()
        return rows
