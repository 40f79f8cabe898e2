"""Memories from posted messages: the memory manager runs over turns after they are stored.

`POST /v1/messages` stores the turns and answers at once; with extraction on (the server's
default when it has a model, `extract` per request) an extraction job then runs the memory
manager (`memos.agents.manager`) over those turns in the background, so an app whose agent
lives elsewhere gets facts, procedures and entities without writing records by hand. Each
record it writes carries the turns' ids as provenance (`source_ids`).

The job is listed by `/v1/jobs` as soon as it is queued ("running", from the process that runs
it) and its outcome is appended to the job history when it ends ("ok" with what it wrote, or
"failed" with the error). A failed model run is tried again after a doubling backoff, up to
`attempts` tries; a job still running when the server stops is recorded as failed. The turns
stay stored whatever happens to the job. Jobs of one session run one at a time (each sees what
the one before wrote); at most `concurrency` run at once in a process. A job holds its user's job
lock (`memos.jobs.partition.user_jobs_lock`, as reflection does): forgetting the user waits for it,
and a job that starts after its turns were deleted reads nothing ("skipped").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memos.jobs.partition import user_jobs_lock
from memos.keyed_locks import KeyedLocks
from memos.memory import MemoryOS
from memos.memtypes import Episode, new_id
from memos.store.scope import Scope

__all__ = ["ExtractionJob", "Extractions", "with_running"]

log = logging.getLogger("memos.serve.extraction")

KIND = "extract"


@dataclass
class ExtractionJob:
    """One extraction: the turns it reads, where it stands and what it wrote."""

    job_id: str
    scope: Scope
    turn_ids: list[str]
    status: str = "running"
    """"running" while this process runs it; its history row says "ok" or "failed"."""
    attempts: int = 0
    written: list[dict[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started_at: str = ""
    skipped: str = ""
    """Why it read nothing (its turns deleted before it ran), if so."""

    def outcome(self) -> dict[str, Any]:
        """The job as `/v1/jobs` shows it (and as its history row keeps it)."""
        return {"job": KIND, "job_id": self.job_id, "status": self.status, "scope": str(self.scope),
                "session_id": self.scope.session_id, "started_at": self.started_at, "turns": len(self.turn_ids),
                "turn_ids": list(self.turn_ids), "attempts": self.attempts, "written": list(self.written),
                "errors": list(self.errors), **({"skipped": self.skipped} if self.skipped else {})}


class Extractions:
    """The extraction jobs of one server process (see the module docstring)."""

    def __init__(self, *, attempts: int = 3, backoff: float = 1.0, concurrency: int = 4) -> None:
        self.attempts = max(1, attempts)
        self.backoff = backoff
        """Seconds before the first retry of a failed run; doubles with each further failure."""
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._sessions: KeyedLocks[Scope] = KeyedLocks()
        self._jobs: dict[str, ExtractionJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, memory: MemoryOS, scope: Scope, model: Any, turns: Sequence[Episode]) -> ExtractionJob:
        """Queue a job over `turns` (already stored) and return it at once."""
        job = ExtractionJob(new_id(), scope, [t.id for t in turns], started_at=memory.clock().isoformat())
        self._jobs[job.job_id] = job
        task = asyncio.ensure_future(self._run(memory, job, model, list(turns)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def running(self, scope: Scope) -> list[dict[str, Any]]:
        """The jobs of `scope` (a user's, or one agent's) this process is running now."""
        return [j.outcome() for j in self._jobs.values() if _within(j.scope, scope)]

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for the running jobs (`timeout` seconds at most; the rest are stopped and recorded as failed)."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _run(self, memory: MemoryOS, job: ExtractionJob, model: Any, turns: list[Episode]) -> None:
        started = time.perf_counter()
        # the user's job lock (as reflection's): forgetting the user waits for this job, and a job after a forget finds
        # its turns gone instead of writing what it drew from them
        lock = memory.exclusive(user_jobs_lock(job.scope.user_id))
        try:
            async with self._sessions.hold(job.scope), self._slots, lock:
                await self._go(memory, job, model, turns, started)
        except asyncio.CancelledError:
            job.errors.append("interrupted: the server stopped before the job ended; the turns are stored")
            await self._record(memory, job, started, "failed")
            raise

    async def _go(self, memory: MemoryOS, job: ExtractionJob, model: Any, turns: list[Episode], started: float) -> None:
        from memos.agents.manager import MemoryManager

        manager = MemoryManager(memory, job.scope, model)
        if turns := await manager.still_stored(turns):
            for attempt in range(1, self.attempts + 1):
                job.attempts = attempt
                try:
                    report = await manager.run(turns)
                except Exception as exc:  # noqa: BLE001 - not swallowed: logged, retried, then a failed job in history
                    job.errors.append(f"{type(exc).__name__}: {exc}")
                    log.warning("extraction %s failed (try %d of %d): %s", job.job_id, attempt, self.attempts, job.errors[-1])
                    if attempt < self.attempts:
                        await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
                    continue
                job.written = [{"action": a, "store": s, "id": i} for a, s, i in report.written]
                break
        else:
            job.skipped = "its turns were deleted before it ran"
        await self._record(memory, job, started, "failed" if job.attempts and len(job.errors) == job.attempts else "ok")

    async def _record(self, memory: MemoryOS, job: ExtractionJob, started: float, status: str) -> None:
        """Append the job's outcome to history (then it is no longer listed as running)."""
        outcome = {**job.outcome(), "status": status, "seconds": round(time.perf_counter() - started, 3)}
        if status == "ok" and job.errors:  # it failed before it succeeded: the earlier tries' errors, apart
            outcome.update(errors=[], retried_after=list(job.errors))
        if status == "failed":
            log.error("extraction %s failed: %s", job.job_id, job.errors[-1])
        try:
            await memory.record_job(job.scope, KIND, outcome, actor="memory_manager", note=status)
        finally:
            self._jobs.pop(job.job_id, None)


def _within(scope: Scope, caller: Scope) -> bool:
    return scope.user_id == caller.user_id and (caller.agent_id is None or (scope.agent_id or "") == (caller.agent_id or ""))


def with_running(history: Sequence[dict[str, Any]], running: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job history (oldest first) followed by the running jobs it has no outcome of yet."""
    done = {row.get("job_id") for row in history}
    return [*history, *(job for job in running if job["job_id"] not in done)]
