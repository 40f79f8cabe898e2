"""Write-behind for a chat's audit rows: a turn's history row and shared-table row, batched.

A chat turn is one record added to the turns' store. Its row there is the turn: committed before
`MemorySession.record_turn` returns (durable), what every read of that store sees. Two more rows
follow it, each a LanceDB commit of its own: the turn's history row (`memos.audit`) and its row
in the shared search table (`memos.search_index`). Written with the turn they were four of a
turn's six commits (~4 ms of CPU each whatever the rows) and most of the background optimizes,
on two cores that the turn's own queries need (README, issue 18). Here they are queued instead
and written together: `DELAY` seconds after the first of a batch (during the model's call, in a
chat), or at once when `LIMIT` rows wait.

Nothing reads them late in this process: every read of the history or the shared table, and every
other write to them (an update's mirror, a deletion, a purge), first writes what waits (`barrier`),
in order. A search may leave them waiting when it leaves their records out of its lists anyway:
the chat step's own search, which excludes the turns in context (`excused`). Other processes see
the rows within `DELAY` plus a commit, inside the `READ_CONSISTENCY` second that reads of another
process's writes already allow. The queue is written at exit too: a task waiting on the delay that
is cancelled (`asyncio.run` ending, the sync loop's exit) writes it before it ends.

A process killed in between loses the queue, never the turns: the shared table is checked
against the stores at every open (`SearchIndex.check`) and the maintenance job writes the history
rows a record lacks, marked as repaired (`memos.audit.repair_history`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Protocol

__all__ = ["DELAY", "LIMIT", "WriteBehind", "closing"]

log = logging.getLogger("memos.storage")

DELAY = 0.5
"""Seconds the first queued row waits for others before the batch is written."""
LIMIT = 64
"""Queued rows (history and shared together) that are written at once, without the delay."""

_EXCUSED: contextvars.ContextVar[Collection[str]] = contextvars.ContextVar("memos_excused", default=())
_FLUSHING: contextvars.ContextVar[bool] = contextvars.ContextVar("memos_flushing", default=False)
_CLOSING: contextvars.ContextVar[bool] = contextvars.ContextVar("memos_closing", default=False)


def closing() -> bool:
    """Whether this is the queue's last write as its event loop ends (no background work after it)."""
    return _CLOSING.get()


class _Index(Protocol):
    table: Any

    async def append(self, rows: Sequence[dict[str, Any]]) -> None: ...


class _Store(Protocol):
    """What the queue uses of `memos.storage.Storage` (which owns it)."""

    history: Any
    search: _Index

    async def append_history(self, entries: list[dict[str, Any]]) -> None: ...


class WriteBehind:
    """The queue of one open store (`Storage.behind`)."""

    def __init__(self, storage: _Store) -> None:
        self.storage = storage
        self._lock = threading.Lock()  # the queue is shared by every event loop using the store
        self._history: list[dict[str, Any]] = []
        self._shared: list[dict[str, Any]] = []  # shared-table rows (`SearchIndex.project`)
        self._writing: concurrent.futures.Future[None] | None = None  # the batch being written...
        self._writing_ids: frozenset[str] = frozenset()  # ...and the records of its shared rows
        self._waiting: asyncio.Task[None] | None = None  # the task that writes once the delay is over
        self._now: asyncio.Event | None = None  # set: that task writes at once
        self._tasks: set[asyncio.Task[None]] = set()
        self.delay = DELAY

    def __len__(self) -> int:
        return len(self._history) + len(self._shared)

    def queue(self, history: list[dict[str, Any]], shared: list[dict[str, Any]]) -> None:
        """Queue the rows of a committed add (on the event loop that committed it)."""
        if not history and not shared:
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            self._history.extend(history)
            self._shared.extend(shared)
            if self._waiting is None or self._waiting.get_loop() is not loop or self._now is None:
                self._now = asyncio.Event()
                self._waiting = task = loop.create_task(self._after_delay(self._now))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if len(self) >= LIMIT:
                self._now.set()

    async def _after_delay(self, now: asyncio.Event) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(now.wait(), self.delay)
        except asyncio.CancelledError:  # the loop is ending: write the queue before this task ends
            self._release()
            _CLOSING.set(True)  # and start no compaction that would outlive the loop
            await self.flush()
            raise
        self._release()
        await self.flush()

    def _release(self) -> None:
        """The waiting task's delay is over: rows queued from now on start another one."""
        with self._lock:
            if self._waiting is asyncio.current_task():
                self._waiting = self._now = None

    @staticmethod
    @contextlib.contextmanager
    def excused(ids: Collection[str]) -> Iterator[None]:
        """Reads inside this block may leave queued shared rows of these record ids unwritten
        (a search that leaves them out of its lists: the chat step's turns in context)."""
        token = _EXCUSED.set(ids)
        try:
            yield
        finally:
            _EXCUSED.reset(token)

    async def barrier(self, table: Any, *, read: bool) -> None:
        """Before a read of, or another write to, `table`: write what is queued for it first."""
        if _FLUSHING.get() or (self._writing is None and not self._history and not self._shared):
            return
        if table is self.storage.history:
            if self._history or self._writing is not None:
                await self.flush()
        elif table is not None and table is self.storage.search.table:
            excused = _EXCUSED.get() if read else ()
            ids = {row["id"] for row in self._shared} | (self._writing_ids if self._writing is not None else set())
            if not ids.issubset(excused):
                await self.flush()

    async def flush(self) -> None:
        """Write everything queued, and wait for a batch already being written. A failed history
        write puts its rows back for the next batch (and returns); a failed shared write marks the
        shared table behind (`SearchIndex.mirror`), which searches then go around."""
        while True:
            with self._lock:
                writing = self._writing
                if writing is None:
                    if not self._history and not self._shared:
                        return
                    history, shared = self._history, self._shared
                    self._history, self._shared = [], []
                    self._writing, self._writing_ids = concurrent.futures.Future(), frozenset(r["id"] for r in shared)
                    mine = self._writing
            if writing is not None:
                await asyncio.wrap_future(writing)
                continue
            written: object = None
            token = _FLUSHING.set(True)
            try:
                written, _ = await asyncio.gather(self.storage.append_history(history), self.storage.search.append(shared),
                                                  return_exceptions=True)
            finally:
                _FLUSHING.reset(token)
                with self._lock:
                    if isinstance(written, Exception):
                        self._history[:0] = history
                    self._writing = None
                mine.set_result(None)
            if isinstance(written, BaseException):
                log.warning("history rows of %d changes not written yet (%s); retried with the next batch",
                            len(history), str(written).splitlines()[0][:200] if str(written) else type(written).__name__)
                return
