"""Which processes have a local store open: a re-embedding (`memos reindex`) needs the others gone.

`rebuild_tables` writes every record into new tables with the new embedder's vectors, switches the
store to them and drops the old ones. Another process with the store open (a `memos serve` worker,
a job worker, a script) went on writing to the old tables: an add it acknowledged during or after
the rebuild was in no table the store names, and its reads failed with LanceDB's "Not found". So a
process holds `.memos-open` beside the tables shared (`flock`, one descriptor for all its opens of
the store) from its first `open_storage` until its last open of the store is garbage-collected; a
re-embedding turns its process's hold exclusive without waiting, or refuses to start and says why
(`StoreUnavailableError`), and an open in another process while it runs is refused the same way.
A killed process's hold goes with it. Other opens of the store in the re-embedding process are
its own to drop. An object-storage store has no directory to hold: stop its other processes first.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from memos.exceptions import StoreUnavailableError

__all__ = ["OPEN_FILE", "Openers"]

OPEN_FILE = ".memos-open"

log = logging.getLogger("memos.store.lancedb.openers")

_held: dict[Path, list[int]] = {}
"""This process's hold of each store it has open: [descriptor, opens]."""
_lock = threading.Lock()
_deferred: list[Path] = []
"""Opens collected while `_lock` was held (the collector can run inside `Openers()` itself): let
go by the holder before it unlocks."""


def _let_go(root: Path) -> None:
    """An open of the store at `root` was collected (a finalizer: it never waits for `_lock`, which
    this very thread may hold)."""
    _deferred.append(root)
    if _lock.acquire(blocking=False):
        _unlock()


def _unlock() -> None:
    """Let go of the deferred opens, then release `_lock` (held by the caller)."""
    try:
        while _deferred:
            held = _held.get(root := _deferred.pop())
            if held is not None:
                held[1] -= 1
                if not held[1]:
                    os.close(held[0])  # and the lock with it
                    del _held[root]
    finally:
        _lock.release()


class Openers:
    """One open's part in its process's shared hold of the store (`alone`: exclusive); a no-op without a directory."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        if root is None:
            return
        _lock.acquire()
        try:
            held = _held.get(root)
            if held is None:
                try:
                    root.mkdir(parents=True, exist_ok=True)
                    fd = os.open(root / OPEN_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError as exc:  # a read-only copy: nothing to hold (nor can it be re-embedded)
                    log.info("no open hold on %s (%s)", root, exc)
                    self.root = None
                    return
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise StoreUnavailableError(f"the memos store at {root} is being re-embedded (`memos reindex`) by another "
                                                "process; open it when that has finished, with the embedder it used") from None
                held = _held[root] = [fd, 0]
            held[1] += 1
        finally:
            _unlock()
        weakref.finalize(self, _let_go, root)  # the hold ends with the process's last open of the store

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the store exclusively for the block: no other process has it open meanwhile."""
        if self.root is None:
            yield
            return
        fd = _held[self.root][0]
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(fd, fcntl.LOCK_SH)  # a change that failed may have let the shared hold go
            raise StoreUnavailableError(
                f"another process has the memos store at {self.root} open (a `memos serve` worker, a job worker, a "
                "script); re-embedding needs the store to itself: stop them first") from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_SH)
