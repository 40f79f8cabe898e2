"""Locks by key, held across every process of one local store: a chat session served by several workers.

`memos serve --workers N` answers a session's requests in whichever worker the kernel hands them
to. Each opens the session from its saved state, records its turns and saves the state again; two
workers doing that at once for one session each saved a state without the other's turns (with 4
concurrent requests at a time over 2 workers, 6-8 of 20 turns were missing from the session's
context), and the lock per session each process held (`memos.keyed_locks`) could not see the other.
These can: a key hashes to one of `BUCKETS` small files under `.memos-locks/` beside the tables, and
holding it is an exclusive `flock` on that file through a descriptor of its own, taken without
blocking and tried again every `POLL` seconds, so the event loop never waits in the kernel. A
`flock` belongs to its open file, so two tasks of one process exclude each other as two processes
do; two keys that share a file only take turns. A killed holder's lock goes with its process. An
object-storage store has no directory: its locks are this process's only.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

from memos.keyed_locks import KeyedLocks

__all__ = ["BUCKETS", "KeyLocks", "LOCKS_DIR", "POLL"]

LOCKS_DIR = ".memos-locks"
BUCKETS = 1024
"""Lock files at most (a key's is its CRC-32 modulo this): different keys that meet in one only take turns."""
POLL = 0.01
"""Seconds between two tries of a lock another holder has."""


class KeyLocks:
    """The cross-process locks of the store at `root` (None: an object-storage store, this process only)."""

    def __init__(self, root: Path | None) -> None:
        self.folder = None if root is None else root / LOCKS_DIR
        self._local: KeyedLocks[str] = KeyedLocks()  # without a folder

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold `key`: one holder at a time among every task of every process of the store."""
        if self.folder is None:
            async with self._local.hold(key):
                yield
            return
        self.folder.mkdir(exist_ok=True)
        fd = await _take(self.folder / f"{zlib.crc32(key.encode('utf-8', 'surrogatepass')) % BUCKETS}.lock")  # any str: a model's label too
        try:
            yield
        finally:
            os.close(fd)  # and its lock


async def _take(path: Path) -> int:
    """An exclusive `flock` on `path` through a descriptor of its own (returned: closing it unlocks)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                await asyncio.sleep(POLL)
    except BaseException:  # cancelled while waiting, or the file cannot be locked
        os.close(fd)
        raise
