"""Locks by key, held across every process of one local store: a chat session served by several workers.

`memos serve --workers N` answers a session's requests in whichever worker the kernel hands them
to. Each opens the session from its saved state, records its turns and saves the state again; two
workers doing that at once for one session each saved a state without the other's turns (with 4
concurrent requests at a time over 2 workers, 6-8 of 20 turns were missing from the session's
context), and the lock per session each process held (`memos.keyed_locks`) could not see the other.
These can: a key has its own small file under `.memos-locks/` beside the tables (named by the
key's SHA-256), and holding it is an exclusive `flock` on that file through a descriptor of its
own, taken without blocking and tried again every `POLL` seconds, so the event loop never waits in
the kernel. A `flock` belongs to its open file, so two tasks of one process exclude each other as
two processes do. A file per key, not a few shared by hashing: locks are nested (a core-block edit
holds its label's while the supersede under it takes the record's), and two keys sharing a file
would then wait for each other for ever. The holder removes the file as it lets go, so files do not
pile up (one per record ever superseded); a waiter that got the lock of a file removed meanwhile
sees it is no longer the key's file and tries again. A killed holder's lock goes with its process
(its file stays, and serves the next holder). An object-storage store has no directory: its locks
are this process's only.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from memos.keyed_locks import KeyedLocks

__all__ = ["KeyLocks", "LOCKS_DIR", "POLL"]

LOCKS_DIR = ".memos-locks"
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
        path = self.folder / f"{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()}.lock"  # any str: a model's label too
        fd = await _take(path)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # before the lock goes: a waiter on this file then sees it is gone
            os.close(fd)  # and its lock


async def _take(path: Path) -> int:
    """An exclusive `flock` on the file at `path` through a descriptor of its own (returned: closing
    it unlocks), on the file that is at `path` once the lock is held."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(POLL)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
        except BaseException:  # cancelled while waiting, or the file cannot be locked
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it as it let go: lock the one at `path` now
