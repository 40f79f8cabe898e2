"""The store-wide purge lease: writers share it, a purge of old table versions takes it alone.

Dropping every old version of a table (`optimize(cleanup_older_than=0, delete_unverified=True)`)
is what makes a removed secret or a forgotten user leave the disk, but it also deletes the data
files a concurrent transaction of another process has written and not yet committed, and the
files of versions another process still reads. So on a local store every write holds the lease
*shared* for the duration of one commit (with its retries), and a purge holds it *exclusively*:
while it runs no write of any process is in flight, and readers that were on a version it
removed re-read the latest one (`memos.store.lancedb.storage` retries a read that finds a file gone).

Two `flock` files beside the tables implement it (`.memos-gate`, `.memos-lease`): a purger first
closes the gate (new writers wait at it), then waits for the lease, so a steady stream of writers
cannot starve it. `flock` locks belong to one open file description, so a process keeps one
shared hold for all its threads and tasks (counted) and a purger opens files of its own.
The lock files hold no data; an object-storage URI (s3://, gs://, ...) has no lease: its purges
are deferred to versions older than a safe margin (see `Storage.purge_old_versions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["GATE_FILE", "LEASE_FILE", "StoreLease", "local_path"]

GATE_FILE = ".memos-gate"
LEASE_FILE = ".memos-lease"
_POLL = 0.005


def local_path(uri: str) -> Path | None:
    """The directory of a local store, or None for an object-storage URI."""
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    return None if "://" in uri else Path(uri)


class StoreLease:
    """Shared holds for writers, an exclusive hold for a purge; a no-op for remote stores."""

    _by_dir: dict[str, StoreLease] = {}
    _registry_lock = threading.Lock()

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._holders = 0
        self._fd: int | None = None

    @classmethod
    def for_uri(cls, uri: str) -> StoreLease:
        """The one lease object of this process for the store at `uri`."""
        root = local_path(uri)
        if root is None:
            return cls(None)
        key = str(root.resolve())
        with cls._registry_lock:
            lease = cls._by_dir.get(key)
            if lease is None:
                lease = cls._by_dir[key] = cls(root)
            return lease

    @property
    def available(self) -> bool:
        """Whether this store can be leased (a local directory)."""
        return self.root is not None

    def _open(self, name: str) -> int:
        assert self.root is not None
        self.root.mkdir(parents=True, exist_ok=True)
        return os.open(self.root / name, os.O_RDWR | os.O_CREAT, 0o600)

    def _try_share(self) -> bool:
        with self._lock:
            if self._holders:
                self._holders += 1
                return True
            gate = self._open(GATE_FILE)
            try:
                try:
                    fcntl.flock(gate, fcntl.LOCK_SH | fcntl.LOCK_NB)  # the gate is open: no purge is waiting
                except BlockingIOError:
                    return False
                if self._fd is None:
                    self._fd = self._open(LEASE_FILE)
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                self._holders = 1
                return True
            finally:
                os.close(gate)  # closing releases the gate hold; the lease hold stays

    def _release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """Hold the lease shared for one write (waits while a purge runs)."""
        if self.root is None:
            yield
            return
        while not self._try_share():
            await asyncio.sleep(_POLL)
        try:
            yield
        finally:
            self._release()

    @contextlib.asynccontextmanager
    async def exclusive(self, timeout: float) -> AsyncIterator[bool]:
        """Hold the lease alone: yields True once no write of any process is in flight, or
        False if that did not happen within `timeout` seconds (or the store cannot be leased)."""
        if self.root is None:
            yield False
            return
        gate, lease = self._open(GATE_FILE), self._open(LEASE_FILE)
        got = False
        try:
            deadline = time.monotonic() + timeout
            got = await _flock_until(gate, deadline) and await _flock_until(lease, deadline)
            yield got
        finally:
            os.close(lease)  # closing releases the holds
            os.close(gate)


async def _flock_until(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL)
