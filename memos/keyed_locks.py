"""Locks by key that do not outlive their use: one asyncio lock per conversation or scope.

A server meets an unbounded number of sessions; a `dict` of locks that only grows keeps one for
every session ever seen. `KeyedLocks.hold(key)` counts its holders and waiters and drops the
key's lock when the last one leaves, so the map holds only the keys in use right now.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

__all__ = ["KeyedLocks"]

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    """`async with locks.hold(key):` runs one holder of `key` at a time; other keys run freely."""

    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        """Keys held or waited for now."""
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
