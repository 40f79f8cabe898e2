"""Other processes' commits, seen at once: a read right after a write another process of the
store acknowledged finds it.

LanceDB looks for a table's new versions at most once a `READ_CONSISTENCY` (a second) unless told;
so with `memos serve --workers N` a search answered by one process right after another process
acknowledged an add missed it for up to a second (11 of 20 such searches, `docs/serving.md`), which
the facade in one process never does. Asking LanceDB to look on every read costs a listing of the
table's versions per query (~1.5 ms CPU each, several queries a search).

Instead every commit to a local store increments counters in one small file beside the tables
(`.memos-commits`, under its `flock`), after the commit and before the write returns (so before its
caller is answered): the counter of the table it wrote, and for rows mirrored to the shared search
table the counter of each memory type they are of (what tells a search that a store counted empty
has rows now). The counters are `SLOTS` slots that names hash into (two names sharing one only
cost an extra look). A process knows which increments were its own: when a counter has moved by
more than those, another process has committed, and that counter's epoch here moves on. A read,
and a write (a merge or a delete by key must see the rows another process added: on an older
version a merge added a second row beside one), first reads its table's counter (one `pread` of
8 bytes) and, when its epoch moved since this process last brought the table up to date, points
the table's handle at its latest version first; a store counted empty stays so while neither its table's nor its rows' epoch moves
(`memos.store.lancedb.presence`). A process's own commits never make its tables look stale. An
object-storage store has no such file and keeps the interval.

A search reads a few dozen counters (each store's table and rows, the journal's), so they are read
through a read-only shared mapping of the file (0.6 µs a counter) rather than an open, a `pread`
and a close each (2.4 µs; 3.5% of a served search's samples); a commit writes them with `pwrite`
under the lock, which the mapping sees at once. The first commit grows the file to its full size
(`SLOTS` counters), so it is mapped whole; a file not yet grown is read the old way.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["COMMITS_FILE", "CommitCounter", "FILE_SIZE", "SLOTS", "meta_of", "rows_of"]

COMMITS_FILE = ".memos-commits"
SLOTS = 1024
"""Counters in the file (8 bytes each, read and written one by one): tables and memory types hash
into them; a store's ~15 names rarely share one (a shared counter costs an extra look, no more)."""
_COUNT = struct.Struct("<Q")
FILE_SIZE = SLOTS * _COUNT.size
log = logging.getLogger("memos.store.lancedb.commits")


def _slot(name: str) -> int:
    return zlib.crc32(name.encode()) % SLOTS


def rows_of(memory_type: str) -> str:
    """The counter name of a memory type's rows in the shared search table."""
    return f"rows:{memory_type}"


def meta_of(key: str) -> str:
    """The counter name of a meta entry's family: its key up to the first ':' (`apikey:<hash>` is
    of `apikey`), whole if it has none. A process that caches a family's entries (the API keys of
    `memos.serve.tenancy`) re-reads them when it moves, not on a timer."""
    return "meta:" + key.split(":", 1)[0]


class CommitCounter:
    """The commit counters of the local store at `root` (None: an object-storage store, none).
    The file is opened for each look (no descriptor held between: a process may open many stores)."""

    def __init__(self, root: Path | None) -> None:
        self.path = None if root is None else root / COMMITS_FILE
        self._epochs = [0] * SLOTS  # each moves on when this process finds that another has committed there
        self._expected: list[int | None] = [None] * SLOTS  # each counter as last seen here, plus this process's own commits since
        self._at: dict[str, int] = {}  # each table's epoch when its handle was last pointed at its latest version
        self._lock = threading.Lock()  # commits counted from several threads of this process
        self._map: mmap.mmap | None = None  # the file, read-only, once it has its full size

    def _moved(self, slot: int, count: int) -> None:
        if count != self._expected[slot]:
            self._epochs[slot] += 1
        self._expected[slot] = count

    def epoch(self, name: str) -> int:
        """The epoch of `name`'s counter as of now (0, and no file read, without counters; as it
        was, where the file cannot be read: a read-only copy of a store)."""
        if self.path is None:
            return 0
        slot = _slot(name)
        if self._map is not None:
            count = _COUNT.unpack_from(self._map, slot * _COUNT.size)[0]
        else:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if os.fstat(fd).st_size >= FILE_SIZE:
                        self._map = mmap.mmap(fd, FILE_SIZE, access=mmap.ACCESS_READ)
                    data = os.pread(fd, _COUNT.size, slot * _COUNT.size)
                finally:
                    os.close(fd)  # a mapping outlives its descriptor
            except FileNotFoundError:  # nothing counted yet
                data = b""
            except OSError as exc:
                log.debug("commit counters of %s unreadable (%s)", self.path, exc)
                return self._epochs[slot]
            count = _COUNT.unpack(data)[0] if len(data) == _COUNT.size else 0
        with self._lock:
            self._moved(slot, count)
            return self._epochs[slot]

    def committed(self, names: Iterable[str]) -> None:
        """Commits by this process have landed: count one for each of `names` (tables, `rows_of`
        memory types); one that another process counted since this one last looked moves that
        counter's epoch on."""
        slots = sorted({_slot(name) for name in names})
        if self.path is None or not slots:
            return
        with self._lock:
            counts: dict[int, int] = {}
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    if os.fstat(fd).st_size < FILE_SIZE:  # every counter in place (zeros): the readers map it whole
                        os.ftruncate(fd, FILE_SIZE)
                    for slot in slots:
                        data = os.pread(fd, _COUNT.size, slot * _COUNT.size)
                        counts[slot] = (_COUNT.unpack(data)[0] if len(data) == _COUNT.size else 0) + 1
                        os.pwrite(fd, _COUNT.pack(counts[slot]), slot * _COUNT.size)
                finally:
                    os.close(fd)  # and its lock
            except OSError as exc:  # the commit has landed and is answered; the others find it by LanceDB's interval
                log.warning("a commit to %s was not counted (%s); other processes see it within a second", self.path.parent, exc)
                return  # a count written before the failure looks like another process's: one extra look
            for slot, count in counts.items():
                self._moved(slot, count - 1)
                self._expected[slot] = count

    async def catch_up(self, table: Any) -> None:
        """Before a read of `table`: if another process committed to it since this one last
        brought it up to date, point its handle at the latest version."""
        if self.path is None:
            return
        epoch = self.epoch(table.name)
        if self._at.get(table.name) == epoch:
            return
        await table.checkout_latest()
        self._at[table.name] = epoch
