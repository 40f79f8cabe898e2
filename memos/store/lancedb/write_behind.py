"""Write-behind for a chat's turns: the turn's own row, its history row and its shared-table row, batched.

(The group commit's adds on a local store take it too, but commit their shared-table rows at
once: `memos.group_commit`.)

A chat turn is one record added to the turns' store, and three rows: its row there, its history
row (`memos.jobs.audit`) and its row in the shared search table (`memos.store.lancedb.search_index`). Each was a
LanceDB commit (a fixed cost whatever the rows), and the commits brought most of the
background optimizes, on the cores that the turn's own queries need. Here
they are queued instead and written together: `DELAY` seconds after the first of a batch (during
the model's call, in a chat), or at once when `LIMIT` rows wait. The turn's own row is first in
every batch; its history and shared rows follow once it has committed.

The turn is durable before it is queued: on a local store its row and its history row are
appended to the store's journal first (`memos.store.lancedb.journal`), and a process that stops before its
batch is written leaves them there for the next process that opens the store, which writes them
(`memos.store.lancedb.opening.open_storage`). On an object-storage store, which has no journal, the turn's row is committed
at once and only its history and shared rows wait, as before.

Nothing reads them late in this process: every read of a table with queued rows, and every
other write to it (an update's mirror, a deletion, a purge), first writes what waits
(`barrier`), in order. A search may leave them waiting when it leaves their records out of its
lists anyway: the chat step's own search, which excludes the turns in context (`excused`). What
this process has remembered reading (`memos.store.read_cache`: store counts, the turns in context)
counts a queued row as added when it is queued. A read in another process that finds journaled
rows of its table asks this one to write them now (`memos.store.lancedb.others`): the delay's wait
polls for such a request and cuts the wait short. The queue is written at exit too: a task waiting on the delay that is cancelled
(`asyncio.run` ending, the sync loop's exit) writes it before it ends.

Rows without a journal (a remote store's history and shared rows) are lost with a killed
process, never the turns: the shared table is checked against the stores at every open
(`SearchIndex.check`) and the maintenance job writes the history rows a record lacks, marked as
repaired (`memos.jobs.audit.repair_history`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from memos._sync import background_loop

from .journal import Journal, Segment, live_ids
from .others import ASK_POLL, OtherQueues

__all__ = ["DELAY", "HISTORY", "LIMIT", "WriteBehind", "closing"]

log = logging.getLogger("memos.store.lancedb.storage")

DELAY = 0.5
"""Seconds the first queued row waits for others before the batch is written."""
LIMIT = 64
"""Queued rows (the turns', history and shared together) that are written at once, without the delay."""
STEP_WAIT = 1.0
"""Seconds a due batch waits at most for the chat steps in progress to end."""
HISTORY = "_history"
"""The journal's name for history rows (the stores' rows go under their memory type)."""
STATE = "_meta"
"""The journal's name for state entries (`MemoryOS.set_state(..., behind=True)`: a chat session's)."""
SHARED = "*"
"""The queue's name for the shared search table."""
_SIBLINGS: dict[str, weakref.WeakSet[WriteBehind]] = {}
"""The queues of every open of a local store in this process, by directory: a read through one
open writes what the others have queued for that table first, so two `MemoryOS` objects on one
store in one process (a store opened per request, a session reopened) see each other's turns."""
_SIBLINGS_LOCK = threading.Lock()

_EXCUSED: contextvars.ContextVar[Collection[str]] = contextvars.ContextVar("memos_excused", default=())
_FLUSHING: contextvars.ContextVar[bool] = contextvars.ContextVar("memos_flushing", default=False)
_CLOSING: contextvars.ContextVar[bool] = contextvars.ContextVar("memos_closing", default=False)


def closing() -> bool:
    """Whether this is the queue's last write as its event loop ends (no background work after it)."""
    return _CLOSING.get()


class _Index(Protocol):
    @property
    def table(self) -> Any: ...

    async def append(self, rows: Sequence[dict[str, Any]]) -> None: ...


class _Typed(Protocol):
    @property
    def table(self) -> Any: ...


class _Store(Protocol):
    """What the queue uses of `memos.store.lancedb.storage.Storage` (which owns it)."""

    history: Any
    history_schema: pa.Schema
    meta: Any
    meta_schema: pa.Schema
    commits: Any
    retries: Any

    @property
    def search(self) -> _Index: ...

    @property
    def tables(self) -> Mapping[str, _Typed]: ...

    async def append_history(self, entries: list[dict[str, Any]]) -> None: ...

    async def write_held(self, memory_type: str, rows: pa.Table) -> None: ...

    async def write_state(self, values: dict[str, str]) -> None: ...


def _pending(name: str) -> Callable[[dict[str, set[str]]], set[str]]:
    """The ids that other processes' journals (`live_ids`) hold for table `name`: for the shared
    search table, those of every store (a chat turn's shared row waits with its own)."""
    if name == SHARED:
        return lambda live: set().union(*(ids for table, ids in live.items() if table not in (HISTORY, STATE)))
    return lambda live: set(live.get(name, ()))


class _Batch:
    """Rows taken off the queue together: the stores' (Arrow, by memory type), then history and
    shared rows, and the journal segments that hold them."""

    def __init__(self, typed: dict[str, list[pa.Table]], history: list[dict[str, Any]], shared: list[dict[str, Any]],
                 state: dict[str, str], segments: list[Segment], after: int) -> None:
        self.typed, self.history, self.shared, self.state, self.segments = typed, history, shared, state, segments
        self.after = after
        """The queue's count of `queue` calls when the batch before this one was taken."""

    def ids(self) -> dict[str, frozenset[str]]:
        """The records the batch writes, by the table they go to (history and state: those it writes to)."""
        found = {name: frozenset(i for t in tables for i in t.column("id").to_pylist()) for name, tables in self.typed.items()}
        if self.shared:
            found[SHARED] = frozenset(r["id"] for r in self.shared)
        if self.history:
            found[HISTORY] = frozenset(r["record_id"] for r in self.history)
        if self.state:
            found[STATE] = frozenset(self.state)
        return found


class WriteBehind:
    """The queue of one open store (`Storage.behind`)."""

    def __init__(self, storage: _Store, journal: Journal | None = None) -> None:
        self.storage = storage
        self.journal = journal
        """Where a queued turn is made durable (`memos.store.lancedb.journal`); None: a store without one (object storage)."""
        self._lock = threading.Lock()  # the queue is shared by every event loop using the store
        self._typed: dict[str, list[pa.Table]] = {}  # a store's own rows, by memory type (journaled)
        self._typed_ids: dict[str, set[str]] = {}
        self._history: list[dict[str, Any]] = []
        self._shared: list[dict[str, Any]] = []  # shared-table rows (`SearchIndex.project`)
        self._state: dict[str, str] = {}  # state entries, the newest value of each key (journaled)
        self._segments: list[Segment] = []  # journal segments of rows taken off the queue and not yet all written
        self._writing: concurrent.futures.Future[None] | None = None  # the batch being written...
        self._writing_ids: dict[str, frozenset[str]] = {}  # ...and its records, by table (`_Batch.ids`)
        self._queued = 0  # `queue` calls so far...
        self._taken = 0  # ...and how many of them the batches taken so far hold
        self._waiting: asyncio.Task[None] | None = None  # the task that writes once the delay is over
        self._now: asyncio.Event | None = None  # set: that task writes at once
        self._tasks: set[asyncio.Task[None]] = set()
        self.delay = DELAY
        self._steps = 0  # chat steps in progress (`step`)
        self.others = OtherQueues(journal.root, storage.commits, storage.retries) if journal is not None else None
        """What other processes of the store journaled: a read here waits for their rows (`memos.store.lancedb.others`)."""
        self._root = str(journal.root.resolve()) if journal is not None else None
        if self._root is not None:
            with _SIBLINGS_LOCK:
                _SIBLINGS.setdefault(self._root, weakref.WeakSet()).add(self)

    def __len__(self) -> int:
        typed = sum(t.num_rows for tables in self._typed.values() for t in tables)
        return typed + len(self._history) + len(self._shared) + len(self._state)

    def _empty(self) -> bool:
        return not (self._history or self._shared or self._typed or self._state)

    @property
    def journaled(self) -> bool:
        """Whether a store's own rows can wait here (the store has a journal)."""
        return self.journal is not None

    def waiting(self) -> dict[str, set[str]]:
        """The record ids, by memory type, that live processes (this one included) have journaled
        and not yet written to their tables (`memos.store.lancedb.journal.live_ids`)."""
        return live_ids(self.journal.root) if self.journal is not None else {}

    def holds(self, memory_type: str) -> bool:
        """Whether rows of this store wait in the queue."""
        return bool(self._typed_ids.get(memory_type))

    def queue(self, history: list[dict[str, Any]], shared: list[dict[str, Any]],
              typed: Mapping[str, pa.Table] | None = None, state: Mapping[str, str] | None = None) -> None:
        """Queue rows on the event loop that will write them. `typed`: a store's own rows (Arrow,
        by memory type), and `state`: state entries, appended to the journal with their `history`
        before anything is queued, so that they are durable when this returns (an `OSError` if
        the journal cannot take them: nothing is queued then). Without either, the rows of an
        add that has committed."""
        if not history and not shared and not typed and not state:
            return
        loop = asyncio.get_running_loop()
        journaled = [*(typed or {}), *([STATE] if state else []), *([HISTORY] if history and typed else []),
                     *([SHARED] if shared and (typed or state) else [])]
        with self._lock:
            if typed or state:
                assert self.journal is not None, "rows wait here only where a journal makes them durable"
                entry = [*(typed or {}).items()]
                if state:
                    entry.append((STATE, pa.Table.from_pylist([{"key": k, "value": v} for k, v in state.items()],
                                                              schema=self.storage.meta_schema)))
                if history and typed:
                    entry.append((HISTORY, pa.Table.from_pylist(history, schema=self.storage.history_schema)))
                self.journal.append(entry)
                for name, rows in (typed or {}).items():
                    self._typed.setdefault(name, []).append(rows)
                    self._typed_ids.setdefault(name, set()).update(rows.column("id").to_pylist())
                self._state.update(state or {})
            self._history.extend(history)
            self._shared.extend(shared)
            self._queued += 1
            if self._waiting is None or self._waiting.get_loop() is not loop or self._now is None:
                self._now = asyncio.Event()
                # the others' requests as of now, before they can know of these rows
                asked = self.others.asked() if self.others is not None and journaled else None
                self._waiting = task = loop.create_task(self._after_delay(self._now, asked))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if len(self) >= LIMIT:
                self._now.set()
        if journaled and self.others is not None:  # before the caller is answered: a read elsewhere waits for them
            self.others.journaled(journaled)

    async def _after_delay(self, now: asyncio.Event, asked: int | None) -> None:
        try:
            if not await self._delay(now, asked):
                # not in the middle of a chat step: its commits would compete with the step's queries
                # for the cores (a step that met a batch took twice as long); right after it, they
                # run while the model answers
                loop = asyncio.get_running_loop()
                until = loop.time() + STEP_WAIT  # by the clock: a loaded machine's 5 ms sleeps take longer
                while self._steps and loop.time() < until:
                    await asyncio.sleep(0.005)
        except asyncio.CancelledError:  # the loop is ending: write the queue before this task ends
            self._release()
            _CLOSING.set(True)  # and start no compaction that would outlive the loop
            await self._flush_logged()
            raise
        self._release()
        await self._flush_logged()

    async def _delay(self, now: asyncio.Event, asked: int | None) -> bool:
        """Wait `delay` seconds, or until `now` is set; where other processes may read the rows
        (`asked` is the epoch of their requests when the batch began), until one asks for them
        too: then True (the batch is written at once, chat step or not)."""
        if asked is None or self.others is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(now.wait(), self.delay)
            return False
        loop = asyncio.get_running_loop()
        until = loop.time() + self.delay
        while not now.is_set() and (left := until - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(now.wait(), min(left, ASK_POLL))
            if self.others.asked() != asked:
                return True
        return False

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """A chat step runs inside this block: the delay's batch waits for it to end (up to
        `STEP_WAIT`); reads and writes that need the rows still write them at once."""
        self._steps += 1
        try:
            yield
        finally:
            self._steps -= 1

    async def _flush_logged(self) -> None:
        """`flush` from the delay's task: a failure is logged (the rows stay queued and journaled)."""
        try:
            await self.flush()
        except (OSError, RuntimeError, ValueError) as exc:  # incl. memos' storage errors
            log.warning("queued rows not written yet (%s); written with the next batch, or from the journal "
                        "at the next open", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)

    def _release(self) -> None:
        """The waiting task's delay is over: rows queued from now on start another one."""
        with self._lock:
            if self._waiting is asyncio.current_task():
                self._waiting = self._now = None

    @staticmethod
    @contextlib.contextmanager
    def excused(ids: Collection[str]) -> Iterator[None]:
        """Reads inside this block may leave queued rows of these record ids unwritten (a search
        that leaves them out of its lists: the chat step's turns in context)."""
        token = _EXCUSED.set(ids)
        try:
            yield
        finally:
            _EXCUSED.reset(token)

    async def barrier(self, table: Any, *, read: bool) -> None:
        """Before a read of, or another write to, `table`: write what is queued for it first, here
        and in every other open of the same store in this process (`_SIBLINGS`)."""
        if _FLUSHING.get():
            return
        name = self._name_of(table)
        if name is None:
            return
        if self._owes(name, _EXCUSED.get() if read else ()):
            await self.flush()
        if waited := [sibling for sibling in self._siblings() if sibling._owes(name, ())]:
            for sibling in waited:
                await sibling.flush()
            await table.checkout_latest()  # this handle may not look for new versions for a second yet
        if read and self.others is not None:  # and what other processes journaled for it
            await self.others.written(name, table, _pending(name))

    def _name_of(self, table: Any) -> str | None:
        """What `table` is to the queue: `HISTORY`, `SHARED`, a store's memory type, or None."""
        if table is None:
            return None
        if table is self.storage.history:
            return HISTORY
        if table is self.storage.meta:
            return STATE
        if table is self.storage.search.table:
            return SHARED
        return next((name for name, typed in self.storage.tables.items() if typed.table is table), None)

    def _owes(self, name: str, excused: Collection[str]) -> bool:
        """Whether rows of table `name` wait here or are being written, other than `excused` records."""
        if self._writing is None and self._empty():
            return False
        writing = self._writing_ids.get(name, frozenset()) if self._writing is not None else frozenset()
        if name == HISTORY:
            return bool(self._history or writing)
        if name == STATE:
            return bool(self._state or writing)
        ids = {row["id"] for row in self._shared} if name == SHARED else set(self._typed_ids.get(name, ()))
        ids |= writing
        return bool(ids) and not ids.issubset(excused)

    @staticmethod
    async def flush_open(root: Path) -> None:
        """Write what every open of the store at `root` in this process has queued (a new open of
        it: the handles it is about to open see those rows from the start)."""
        with _SIBLINGS_LOCK:
            queues = list(_SIBLINGS.get(str(root.resolve()), ()))
        for queue in queues:
            await queue.flush()

    def _siblings(self) -> list[WriteBehind]:
        if self._root is None:
            return []
        with _SIBLINGS_LOCK:
            return [w for w in _SIBLINGS.get(self._root, ()) if w is not self]

    async def flush(self) -> None:
        """Write everything queued so far, and wait for a batch already being written: the stores' own
        rows first, then (once they have committed) their history and shared rows. A store whose
        rows fail keeps them queued, with their history and shared rows and the journal segments
        that hold them, and the error is raised; a failed history write puts its rows back for the
        next batch; a failed shared write marks the shared table behind (`SearchIndex.mirror`),
        which searches then go around."""
        with self._lock:
            target = self._queued  # rows queued from now on are the next batch's, not this call's
        while True:
            with self._lock:
                writing = self._writing
                if writing is None:
                    if self._taken >= target or self._empty():
                        return
                    sealed = self.journal.seal() if self.journal is not None else []
                    batch = _Batch(self._typed, self._history, self._shared, self._state, [*self._segments, *sealed], self._taken)
                    self._typed, self._typed_ids, self._history, self._shared, self._state, self._segments = {}, {}, [], [], {}, []
                    self._writing, self._writing_ids, self._taken = concurrent.futures.Future(), batch.ids(), self._queued
                    mine = self._writing
            if writing is not None:
                await asyncio.wrap_future(writing)
                continue
            await self._write_off_loop(batch, mine)

    async def _write_off_loop(self, batch: _Batch, mine: concurrent.futures.Future[None]) -> None:
        """Write `batch` on memos' background loop (`memos._sync.background_loop`), not the
        caller's: a batch begun on one event loop must finish even when that loop is then blocked
        (a synchronous call made inside it, e.g. a scheduler's `run_due` in an async app), for the
        reads of every other loop wait for it. Its end is `mine`'s result, set where it was
        written, whether or not the caller is still waiting."""
        closing = _CLOSING.get()

        async def write() -> None:
            flushing, closed = _FLUSHING.set(True), _CLOSING.set(closing)
            try:
                await self._write(batch)
            finally:
                _FLUSHING.reset(flushing)
                _CLOSING.reset(closed)
                with self._lock:
                    self._writing = None
                mine.set_result(None)

        loop = background_loop()
        if loop is None or loop is asyncio.get_running_loop():  # exiting, or already there
            await write()
            return
        # shielded: a caller cancelled while it waits leaves the batch to finish there
        await asyncio.shield(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(write(), loop)))

    async def _write(self, batch: _Batch) -> None:
        names = [*batch.typed, *([STATE] if batch.state else [])]
        outcomes = await asyncio.gather(*(
            self.storage.write_state(batch.state) if name == STATE else self.storage.write_held(name, pa.concat_tables(batch.typed[name]))
            for name in names), return_exceptions=True)
        failed = {name for name, outcome in zip(names, outcomes, strict=True) if isinstance(outcome, BaseException)}
        history = [r for r in batch.history if r["memory_type"] not in failed]
        shared = [r for r in batch.shared if r["memory_type"] not in failed]
        written: object = None
        if history or shared:
            written, _ = await asyncio.gather(self.storage.append_history(history), self.storage.search.append(shared),
                                              return_exceptions=True)
        with self._lock:
            if failed or isinstance(written, Exception):  # what goes back is queued again for every flush
                self._taken = batch.after
            if failed:  # back to the front of the queue, journal segments kept: nothing is lost
                if STATE in failed:
                    self._state = {**batch.state, **self._state}
                for name in failed - {STATE}:
                    self._typed.setdefault(name, [])[:0] = batch.typed[name]
                    self._typed_ids.setdefault(name, set()).update(
                        i for t in batch.typed[name] for i in t.column("id").to_pylist())
                self._history[:0] = [r for r in batch.history if r["memory_type"] in failed]
                self._shared[:0] = [r for r in batch.shared if r["memory_type"] in failed]
                self._segments[:0] = batch.segments
            if isinstance(written, Exception):
                self._history[:0] = history
        if not failed and self.journal is not None:
            self.journal.retire(batch.segments)  # every store's rows are in their tables
        if isinstance(written, BaseException):
            log.warning("history rows of %d changes not written yet (%s); retried with the next batch",
                        len(history), str(written).splitlines()[0][:200] if str(written) else type(written).__name__)
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
