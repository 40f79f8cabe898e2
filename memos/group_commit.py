"""Group commit: adds that arrive together are embedded in one call and committed once per table.

Each `MemoryOS.add` (an HTTP request, a tool call, a script's `asyncio.gather`) checks and stamps
its records on its own, then hands them here (`memos.batching.Coalescer`): the adds that wait
together are one batch. The batch embeds every text it lacks in one call, adds each store's
rows in one commit (the caller's rows in the order they came, callers in the order they
came), mirrors them into the shared search table in one commit and appends every history row in
one, each row with its own caller's actor. A caller returns only once that has committed, as
an add did alone: what it was told is stored is in the tables, visible to other processes
within `READ_CONSISTENCY`.

On a local store (one with a journal) a batch makes one commit instead (`_hold`): its stores'
rows and history rows are appended to the journal, durable when that returns, and only their
shared search table rows are committed at once, so a search finds an add when its caller is
told; the rest is committed a moment later for many batches together
(`memos.store.lancedb.write_behind`: every read of those tables in this process writes it
first, and the next open writes it from the journal if the process is killed first). Other
processes see those rows up to `write_behind.DELAY` later than a commit's. Records with secret
fields, and bulk batches (over `HOLD_ROWS` rows), take the commits above.

One caller's failure is its own: an explicit id that two adds of one batch both claim, or that
an earlier batch took after the caller's own check, fails the later add (`DuplicateIdError`); an embedder that fails on a batch is asked again caller by caller, so only
the add whose text it refuses fails; a store whose commit fails fails the adds with rows in it,
the others' rows stay committed and audited (as `add` does for one call's several stores).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .batching import Coalescer, Outcome, QueueLimits
from .exceptions import DuplicateIdError, MemosError
from .memtypes import MemoryRecord
from .store.scope import Scope, Where
from .telemetry import span

if TYPE_CHECKING:
    from .store.lancedb.storage import Storage

__all__ = ["AddJob", "GroupCommit", "HOLD_ROWS", "LINGER", "linger"]

LINGER = 0.15
"""Seconds a batch after one of several callers waits at most for more (`linger`)."""
HOLD_ROWS = 64
"""Rows a batch holds at most to go through the journal (`GroupCommit._hold`); a larger one commits."""


def linger(callers: int, seconds: float) -> float:
    """How long the next batch waits for more adds: the last batch's commit time (at most
    `LINGER`) when that one had several callers, none after a lone caller. A batch on a local
    store is one commit (`GroupCommit._hold`), so without it concurrent adds would come in
    smaller batches, and every commit to the shared search table is a fragment that each search
    scans until the table is next optimized (`memos.store.lancedb.compaction`). `seconds` is
    the batch's time less its embedding (`GroupCommit.linger`): the wait buys a bigger commit,
    and an encoder call of a few texts outlasts a commit, so waiting as long again as the whole
    batch only delayed every write (20 clients, local embedder, 2 cores: write p50 / p95
    353 / 524 -> 290 / 438 ms, medians of six runs; docs/benchmarks.md)."""
    return min(LINGER, seconds) if callers > 1 else 0.0


@dataclass(eq=False)
class AddJob:
    """One caller's add, checked, stamped and sealed: its records by store, ready to write."""

    scope: Scope
    actor: str
    records: Mapping[str, Sequence[MemoryRecord]]
    vectors: dict[str, list[float] | None]
    """Index text -> vector embedded ahead by the caller (others are embedded by the batch)."""
    explicit: list[str] = field(default_factory=list)
    """Ids the caller set itself: looked up again by the batch (an add that committed after the
    caller's own check may have taken one)."""

    def texts(self) -> list[str]:
        return [r.index_text() for group in self.records.values() for r in group]


class GroupCommit:
    """The add queue of one open memory (`RecordAccess.group`): its store, and from the memory how
    it embeds texts, makes a store's rows and makes history rows."""

    def __init__(self, storage: Storage, vectors: Callable[[list[str]], Awaitable[list[list[float] | None]]],
                 rows: Callable[[str, Sequence[MemoryRecord], Sequence[list[float] | None]], list[dict[str, Any]]],
                 history_rows: Callable[..., list[dict[str, Any]]], limits: Callable[[], QueueLimits]) -> None:
        self.storage = storage
        self.vectors, self.rows, self.history_rows = vectors, rows, history_rows
        self.queue: Coalescer[AddJob, None] = Coalescer("add", self._commit, limits, self.linger)
        """Its batches and calls are counted (`Coalescer.batches`, `.calls`)."""
        self.embedding_s = 0.0
        """Seconds the last batch spent embedding its texts."""
        self.embedded_s = 0.0
        """Seconds every batch so far spent embedding, summed (the rest of `queue.busy_s` is writing)."""

    def linger(self, callers: int, seconds: float) -> float:
        """The queue's wait for more adds after a batch of `callers` that took `seconds`: `linger`
        of the batch's time less its embedding."""
        return linger(callers, max(0.0, seconds - self.embedding_s))

    async def add(self, job: AddJob) -> None:
        """Write `job` with the adds waiting beside it; returns once its rows have committed."""
        await self.queue.submit(job)

    async def _commit(self, jobs: list[AddJob]) -> Sequence[Outcome[None]]:
        outcomes: list[BaseException | None] = [None] * len(jobs)
        claimed: set[str] = set()
        for index, job in enumerate(jobs):
            ids = [r.id for group in job.records.values() for r in group]
            if clash := next((i for i in ids if i in claimed), None):
                outcomes[index] = DuplicateIdError(clash, "by another add in progress")
            else:
                claimed.update(ids)
        await self._check_explicit(jobs, outcomes)
        started = time.monotonic()
        vectors = await self._embed(jobs, outcomes)
        self.embedding_s = time.monotonic() - started
        self.embedded_s += self.embedding_s
        live = [index for index, outcome in enumerate(outcomes) if outcome is None]
        if live:
            await self._write([jobs[i] for i in live], vectors, live, outcomes)
        return outcomes

    async def _check_explicit(self, jobs: list[AddJob], outcomes: list[BaseException | None]) -> None:
        """Fail the jobs whose explicit ids a table holds now (one `id IN (...)` query per table)."""
        wanted = [i for job, outcome in zip(jobs, outcomes, strict=True) if outcome is None for i in job.explicit]
        used: set[str] = set()
        for start in range(0, len(wanted), 1000):
            for name in self.storage.memory_types():
                where = Where().id_in(wanted[start : start + 1000]).build()
                used.update(r["id"] for r in await self.storage.rows(name, where, columns=["id"]))
        for index, job in enumerate(jobs):
            if outcomes[index] is None and (clash := next((i for i in job.explicit if i in used), None)):
                outcomes[index] = DuplicateIdError(clash)

    async def _embed(self, jobs: list[AddJob], outcomes: list[BaseException | None]) -> dict[str, list[float] | None]:
        """Vectors of every live job's texts, in one call; if that call fails, one call per job,
        and a job whose own call fails gets its error."""
        known: dict[str, list[float] | None] = {}
        for job, outcome in zip(jobs, outcomes, strict=True):
            if outcome is None:
                known.update(job.vectors)
        wanted = [t for job, outcome in zip(jobs, outcomes, strict=True) if outcome is None for t in job.texts()]
        missing = [t for t in dict.fromkeys(wanted) if t not in known]
        if not missing:
            return known
        try:
            known.update(zip(missing, await self.vectors(missing), strict=True))
            return known
        except Exception as exc:
            if sum(o is None for o in outcomes) == 1:
                outcomes[outcomes.index(None)] = exc
                return known
        for index, job in enumerate(jobs):
            own = [t for t in dict.fromkeys(job.texts()) if t not in known]
            if outcomes[index] is None and own:
                try:
                    known.update(zip(own, await self.vectors(own), strict=True))
                except Exception as exc:  # this caller's texts only: its add fails, the others go on
                    outcomes[index] = exc
        return known

    async def _write(self, jobs: list[AddJob], vectors: dict[str, list[float] | None], live: list[int],
                     outcomes: list[BaseException | None]) -> None:
        """Each store's rows in one commit, their shared rows in one, then every history row in one;
        on a store with a journal, the stores' and history rows are journaled instead (`_hold`)."""
        storage = self.storage
        by_store: dict[str, list[MemoryRecord]] = {}
        for job in jobs:
            for name, group in job.records.items():
                by_store.setdefault(name, []).extend(group)
        try:
            if await self._hold(jobs, by_store, vectors):
                return
        except MemosError as exc:  # the journal could not take them: nothing was written
            for index in live:
                outcomes[index] = exc
            return

        async def write(name: str, group: list[MemoryRecord]) -> None:
            with span("memos.add", memory_type=name, records=len(group), callers=len(jobs)):
                await storage.add_rows(name, self.rows(name, group, [vectors[r.index_text()] for r in group]))

        mirror = storage.search.gathering()
        with mirror:  # the stores' commits overlap (one table each); all have ended before the audit
            written = await asyncio.gather(*(write(name, group) for name, group in by_store.items()), return_exceptions=True)
        failed = {name: outcome for name, outcome in zip(by_store, written, strict=True) if isinstance(outcome, BaseException)}
        history: list[dict[str, Any]] = []
        for job in jobs:  # the stores that committed are audited (and mirrored) even when another one failed
            history += self.history_rows([r for name, group in job.records.items() if name not in failed for r in group],
                                            "add", job.actor, before=None)
        audited, _ = await asyncio.gather(storage.append_history(history), mirror.flush(), return_exceptions=True)
        for index, job in zip(live, jobs, strict=True):
            own = next((failed[name] for name in job.records if name in failed), None)
            if own is None and isinstance(audited, BaseException):
                own = audited
            outcomes[index] = own

    async def _hold(self, jobs: list[AddJob], by_store: dict[str, list[MemoryRecord]], vectors: dict[str, list[float] | None]) -> bool:
        """Journal the batch's rows and history rows (durable once appended; committed a moment
        later, with other batches', by `memos.store.lancedb.write_behind`) and commit only their
        shared-table rows now, so a search finds them when their callers are told. False, with
        nothing written, where the store has no journal, a record has secret fields (never
        journaled) or the batch is a bulk load (its commits cost little per row)."""
        rows = sum(len(group) for group in by_store.values())
        if rows > HOLD_ROWS or any(r.secret_fields for group in by_store.values() for r in group):
            return False
        typed = {name: self.rows(name, group, [vectors[r.index_text()] for r in group]) for name, group in by_store.items()}
        history: list[dict[str, Any]] = []
        for job in jobs:
            history += self.history_rows([r for group in job.records.values() for r in group], "add", job.actor, before=None)
        with span("memos.add", memory_type=",".join(by_store), records=rows, callers=len(jobs), held=True):
            shared = self.storage.hold_added(typed, history)
            if shared is None:
                return False
            await self.storage.search.append(shared)
        return True
