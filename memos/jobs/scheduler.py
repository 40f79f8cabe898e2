"""The background scheduler: APScheduler 3 with a persistent job store and an injected clock.

Jobs live in a SQLite file next to the LanceDB directory (`<db>.jobs.sqlite`), so they survive
restarts. A job is one *kind* of work (`reflect`, `consolidate`, `decay`, `maintain`) for one
scope; its id is `kind:user:agent:session` so there is at most one job -- and, with
`max_instances=1`, one running instance -- per kind and scope. Missed runs are coalesced into
one run (`coalesce=True`, and a misfire grace as long as the interval, so the catch-up run is
never dropped as "too late").

Jobs reference the importable `memos.jobs.runs:run_scheduled_job` with plain arguments (kind, db
URI, scope ids, an options dict), which is what lets `memos worker` run them in another
process; a scheduler hands each run what it holds (`LiveStore`: the open memory and model it
was given, or the stores its runs opened), never a process-wide registry. Run the scheduler either in-process (`MemoryOS.scheduler()`) or in a worker for a
given store, not both at once: APScheduler 3 does not share its jobs' runs across processes, so
each would run every job. Two jobs of one user never overlap, in any process (`run_job` holds
the user's job lock, `memos.jobs.partition.user_jobs_lock`): the later one starts from what the
earlier wrote.

APScheduler 3 reads the wall clock itself; `ClockedScheduler` replaces every such read with
the injected clock, so tests move a clock instead of sleeping: `scheduler.run_due()` runs,
in the caller's thread, every job due at the clock's "now".
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_JOB_SUBMITTED,
    JobExecutionEvent,
    JobSubmissionEvent,
)
from apscheduler.executors.base import BaseExecutor, MaxInstancesReachedError
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_PAUSED, STATE_STOPPED, BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from memos.exceptions import ConfigError
from memos.store.scope import Scope

from .reflection_state import scope_key

__all__ = ["JOB_KINDS", "JobInfo", "LiveStore", "MemoryScheduler", "canonical_uri", "default_jobs_url", "job_id"]

log = logging.getLogger("memos.jobs.scheduler")

JOB_KINDS = ("reflect", "consolidate", "decay", "maintain")
"""The kinds of background work a scope can have scheduled (see `memos.jobs.runs`)."""

_JOB_FUNC = "memos.jobs.runs:run_scheduled_job"


def canonical_uri(uri: str | Path) -> str:
    """One spelling per store: local paths absolute and resolved, other URIs as given.

    Jobs carry the store's URI; the worker finds its open store by it, so `memory` and
    `./memory` must be the same key.
    """
    text = str(uri)
    if "://" in text and not text.startswith("file://"):
        return text
    return str(Path(text.removeprefix("file://")).expanduser().resolve())


def default_jobs_url(uri: str | Path) -> str:
    """The SQLite job store beside a local LanceDB directory: `<dir>.jobs.sqlite`."""
    text = str(uri)
    if "://" in text and not text.startswith("file://"):
        raise ConfigError(f"{text} is not a local directory; pass jobs_url= (an SQLAlchemy URL) for the job store")
    path = Path(text.removeprefix("file://")).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.parent / (path.name + '.jobs.sqlite')}"


def job_id(kind: str, scope: Scope) -> str:
    """The id of the one job of `kind` for `scope`: `kind:user:agent:session` (`scope_key`)."""
    if kind not in JOB_KINDS:
        raise ConfigError(f"unknown job kind {kind!r}; known kinds: {', '.join(JOB_KINDS)}")
    return f"{kind}:{scope_key(scope)}"


@dataclass(frozen=True)
class JobInfo:
    """A scheduled job as `memos inspect jobs` shows it."""

    id: str
    kind: str
    scope: Scope
    every_seconds: float | None
    next_run_time: datetime | None
    """None while the job is paused."""
    options: dict[str, Any]

    @property
    def paused(self) -> bool:
        return self.next_run_time is None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "scope": str(self.scope), "user_id": self.scope.user_id,
                "agent_id": self.scope.agent_id, "session_id": self.scope.session_id, "every_seconds": self.every_seconds,
                "next_run_time": self.next_run_time.isoformat() if self.next_run_time else None,
                "paused": self.paused, "options": self.options}


@dataclass
class LiveStore:
    """What a scheduler hands each job it runs (`memos.jobs.runs.run_scheduled_job`).

    `memory` is a `memos.memory.MemoryOS`, which opens schedulers and so sits above this module:
    carried here, not imported."""

    memory: Any = None
    """The open memory the jobs run on (`MemoryOS.scheduler()`, `memos worker`); None: they open the store."""
    model: Any = None
    """What reflection and consolidation use (None: the job's own `model` option, else raw mode)."""
    opened: dict[str | None, Any] = field(default_factory=dict)
    """Stores this scheduler's jobs opened, by embedder (when `memory` is None)."""


# --- the clock-aware APScheduler pieces ------------------------------------------------------


def _run_job(scheduler: _ClockedMixin, job: Any, run_times: list[datetime], logger: logging.Logger) -> list[JobExecutionEvent]:
    """APScheduler's `run_job`, judging misfires by the injected clock instead of the wall clock."""
    events = []
    for run_time in run_times:
        late = scheduler.now() - run_time
        if job.misfire_grace_time is not None and late > timedelta(seconds=job.misfire_grace_time):
            events.append(JobExecutionEvent(EVENT_JOB_MISSED, job.id, job._jobstore_alias, run_time))
            logger.warning("run of job %s at %s was missed by %s", job.id, run_time, late)
            continue
        try:
            retval = job.func(*job.args, **job.kwargs, live=scheduler.live)
        except Exception as exc:  # the job failed: reported as an APScheduler error event, not swallowed
            logger.exception("job %s raised", job.id)
            events.append(JobExecutionEvent(EVENT_JOB_ERROR, job.id, job._jobstore_alias, run_time, exception=exc,
                                            traceback="".join(traceback.format_tb(exc.__traceback__))))
        else:
            events.append(JobExecutionEvent(EVENT_JOB_EXECUTED, job.id, job._jobstore_alias, run_time, retval=retval))
    return events


class _InlineExecutor(BaseExecutor):
    """Runs a job in the thread that found it due (what `run_due()` and tests use)."""

    def submit_job(self, job: Any, run_times: list[datetime]) -> None:
        with self._lock:
            if self._instances[job.id] >= job.max_instances:
                raise MaxInstancesReachedError(job)
            self._instances[job.id] += 1
        try:
            events = _run_job(self._scheduler, job, run_times, self._logger)
        finally:
            with self._lock:
                self._instances[job.id] -= 1
                if not self._instances[job.id]:
                    del self._instances[job.id]
        for event in events:
            self._scheduler._dispatch_event(event)

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:  # pragma: no cover - submit_job is overridden
        raise NotImplementedError


class _ThreadExecutor(BaseExecutor):
    """Runs jobs on a small thread pool (the worker): different scopes run side by side."""

    def __init__(self, max_workers: int = 4) -> None:
        super().__init__()
        import concurrent.futures

        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="memos-job")

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        try:
            future = self._pool.submit(_run_job, self._scheduler, job, run_times, self._logger)
        except RuntimeError:  # the worker is shutting down (pool closed): the job runs at the next start
            log.info("job %s not started: the scheduler is shutting down", job.id)
            return

        def done(f: Any) -> None:
            if f.exception() is not None:
                self._run_job_error(job.id, f.exception(), f.exception().__traceback__)
            else:
                self._run_job_success(job.id, f.result())

        future.add_done_callback(done)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait)


class _ClockedMixin:
    """Every "now" APScheduler needs comes from `self.clock` (an injected callable)."""

    clock: Callable[[], datetime]
    live: LiveStore
    # what it uses of APScheduler's BaseScheduler, which it is mixed into (declared, not defined,
    # so the scheduler's own members stay in force)
    state: int
    jobstore_retry_interval: float
    _jobstores: dict[str, Any]
    _jobstores_lock: Any
    _lookup_executor: Callable[[str], Any]
    _dispatch_event: Callable[[Any], None]
    remove_job: Callable[..., None]

    def now(self) -> datetime:
        value = self.clock()
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    def _process_jobs(self) -> float | None:
        """APScheduler's `_process_jobs` with the injected clock (same semantics, fewer comments)."""
        if self.state == STATE_PAUSED:
            return None
        now = self.now()
        next_wakeup: datetime | None = None
        events = []
        with self._jobstores_lock:
            for alias, store in self._jobstores.items():
                try:
                    due = store.get_due_jobs(now)
                except Exception as exc:  # a broken job store: retry later, as APScheduler does
                    log.warning("cannot read due jobs from %s: %s", alias, exc)
                    retry = now + timedelta(seconds=self.jobstore_retry_interval)
                    next_wakeup = retry if next_wakeup is None or retry < next_wakeup else next_wakeup
                    continue
                for job in due:
                    executor = self._lookup_executor(job.executor)
                    run_times = job._get_run_times(now)
                    run_times = run_times[-1:] if run_times and job.coalesce else run_times
                    if not run_times:
                        continue
                    # Move the job on before running it, so a job that takes long (or a crash in it)
                    # cannot make the same window run twice.
                    following = job.trigger.get_next_fire_time(run_times[-1], now)
                    if following:
                        job._modify(next_run_time=following)
                        store.update_job(job)
                    else:
                        self.remove_job(job.id, alias)
                    try:
                        executor.submit_job(job, run_times)
                    except MaxInstancesReachedError:
                        log.warning("job %s skipped: an instance is still running", job.id)
                        events.append(JobSubmissionEvent(EVENT_JOB_MAX_INSTANCES, job.id, alias, run_times))
                    else:
                        events.append(JobSubmissionEvent(EVENT_JOB_SUBMITTED, job.id, alias, run_times))
                store_next = store.get_next_run_time()
                if store_next and (next_wakeup is None or store_next < next_wakeup):
                    next_wakeup = store_next
        for event in events:
            self._dispatch_event(event)
        if self.state == STATE_PAUSED or next_wakeup is None:
            return None
        return min(max(next_wakeup.timestamp() - self.now().timestamp(), 0.0), 60.0)


class _ManualScheduler(_ClockedMixin, BaseScheduler):
    """Never wakes by itself: `run_due()` drives it (tests, one-shot CLI runs)."""

    def wakeup(self) -> None:
        pass

    def shutdown(self, wait: bool = True) -> None:
        super().shutdown(wait)


class _ThreadedScheduler(_ClockedMixin, BackgroundScheduler):
    """Wakes on its own thread (in-process background work and `memos worker`)."""


# --- the memos-facing scheduler ----------------------------------------------------------------


class MemoryScheduler:
    """Schedules memos jobs per scope on a persistent job store.

    `mode="manual"` runs nothing by itself: call `run_due()` (after moving the clock).
    `mode="thread"` runs due jobs on a background thread (real deployments, `memos worker`).
    `memory` (a `MemoryOS` of this store) and `model`: what the jobs run with; without a
    memory, the first job opens the store and the later ones reuse it.
    """

    def __init__(
        self,
        uri: str | Path,
        *,
        jobs_url: str | None = None,
        clock: Callable[[], datetime] | None = None,
        mode: str = "thread",
        max_workers: int = 4,
        memory: Any = None,
        model: Any = None,
    ) -> None:
        if mode not in ("thread", "manual"):
            raise ConfigError(f"scheduler mode must be 'thread' or 'manual', got {mode!r}")
        self.uri = canonical_uri(uri)
        self.jobs_url = jobs_url or default_jobs_url(uri)
        self.mode = mode
        self._results: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        cls = _ManualScheduler if mode == "manual" else _ThreadedScheduler
        self._aps = cls(timezone=UTC)
        self._aps.clock = clock or (lambda: datetime.now(UTC))
        self._aps.live = LiveStore(memory, model)
        executor = _InlineExecutor() if mode == "manual" else _ThreadExecutor(max_workers)
        self._aps.configure(jobstores={"default": SQLAlchemyJobStore(url=self.jobs_url)},
                            executors={"default": executor})
        self._aps.add_listener(self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)

    # lifecycle

    def start(self, *, paused: bool = False) -> MemoryScheduler:
        """Open the job store and (in thread mode) start waking up for due jobs."""
        if self._aps.state == STATE_STOPPED:
            self._aps.start(paused=paused)
            self._rekey()
        return self

    def _rekey(self) -> None:
        """Jobs stored under the ids of versions before scopes' ids were escaped (`scope_key`: user
        'org:42' was `decay:org:42:*:*`) move to their ids now, once, keeping their schedule; else
        `add` would schedule a second one beside them, and `get` / `remove` would not find them."""
        for job in self._aps.get_jobs():
            kind, _, user, agent, session, _ = job.args
            jid = job_id(kind, Scope(user, agent, session))
            if job.id == jid:
                continue
            if self._aps.get_job(jid) is None:
                self._aps.add_job(job.func_ref, trigger=job.trigger, id=jid, name=job.name, args=job.args, coalesce=job.coalesce,
                                  max_instances=job.max_instances, misfire_grace_time=job.misfire_grace_time,
                                  next_run_time=job.next_run_time)
            self._aps.remove_job(job.id)

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop; jobs stay in the job store for the next start."""
        if self._aps.state != STATE_STOPPED:
            self._aps.shutdown(wait=wait)

    @property
    def running(self) -> bool:
        return self._aps.state != STATE_STOPPED

    def __enter__(self) -> MemoryScheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def now(self) -> datetime:
        return self._aps.now()

    # jobs per scope

    def add(
        self,
        kind: str,
        scope: Scope,
        *,
        every: timedelta = timedelta(hours=1),
        options: dict[str, Any] | None = None,
        replace: bool = True,
    ) -> JobInfo:
        """Schedule `kind` for `scope` every `every` (first run one interval from now)."""
        self.start()
        if every.total_seconds() <= 0:
            raise ConfigError("a job interval must be positive")
        jid = job_id(kind, scope)
        opts = dict(options or {})
        now = self.now()
        trigger = IntervalTrigger(seconds=every.total_seconds(), start_date=now + every, timezone=UTC)
        self._aps.add_job(
            _JOB_FUNC, trigger=trigger, id=jid, name=f"{kind} {scope}", replace_existing=replace,
            args=[kind, self.uri, scope.user_id, scope.agent_id, scope.session_id, opts],
            coalesce=True, max_instances=1, misfire_grace_time=max(1, int(every.total_seconds())),
            next_run_time=now + every,
        )
        return self.get(kind, scope)

    def get(self, kind: str, scope: Scope) -> JobInfo:
        """The job of `kind` for `scope` (ConfigError naming the known jobs if there is none)."""
        self.start()
        job = self._aps.get_job(job_id(kind, scope))
        if job is None:
            raise ConfigError(f"no {kind} job for scope {scope}; scheduled: {', '.join(j.id for j in self.jobs()) or 'none'}")
        return _info(job)

    def pause(self, kind: str, scope: Scope) -> JobInfo:
        self.get(kind, scope)
        self._aps.pause_job(job_id(kind, scope))
        return self.get(kind, scope)

    def resume(self, kind: str, scope: Scope) -> JobInfo:
        """Resume a paused job; it next runs at the first point of its interval grid after now."""
        self.get(kind, scope)
        job = self._aps.get_job(job_id(kind, scope))
        after = self.now() + timedelta(microseconds=1)
        self._aps.modify_job(job.id, next_run_time=job.trigger.get_next_fire_time(None, after) or after)
        return self.get(kind, scope)

    def run_soon(self, kind: str, scope: Scope) -> JobInfo:
        """Make a scheduled job due now (e.g. after a burst of important turns); its own debounce still applies."""
        self.get(kind, scope)
        self._aps.modify_job(job_id(kind, scope), next_run_time=self.now())
        self.wakeup()
        return self.get(kind, scope)

    def remove(self, kind: str, scope: Scope) -> None:
        self.get(kind, scope)
        self._aps.remove_job(job_id(kind, scope))

    def jobs(self) -> list[JobInfo]:
        """Every scheduled job, by id."""
        self.start()
        return sorted((_info(j) for j in self._aps.get_jobs()), key=lambda j: j.id)

    # running

    def run_due(self) -> list[dict[str, Any]]:
        """Run every job due at the clock's now, in this thread; returns their results (manual mode)."""
        if self.mode != "manual":
            raise ConfigError("run_due() drives a manual scheduler; a thread scheduler runs jobs by itself")
        self.start()
        with self._lock:
            self._results = []
            self._aps._process_jobs()
            return list(self._results)

    def wakeup(self) -> None:
        """Look for due jobs now (thread mode, e.g. after the clock moved)."""
        self._aps.wakeup()

    def add_listener(self, callback: Callable[[Any], None], mask: int) -> None:
        """Call `callback` with each APScheduler event in `mask` (e.g. EVENT_JOB_EXECUTED)."""
        self._aps.add_listener(callback, mask)

    def _on_event(self, event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_EXECUTED and isinstance(event.retval, dict):
            self._results.append(event.retval)
        elif event.code == EVENT_JOB_ERROR:
            self._results.append({"job_id": event.job_id, "errors": [repr(event.exception)]})
        elif event.code == EVENT_JOB_MISSED:
            self._results.append({"job_id": event.job_id, "missed": event.scheduled_run_time.isoformat()})


def _info(job: Any) -> JobInfo:
    kind, uri, user, agent, session, options = job.args
    interval = getattr(job.trigger, "interval", None)
    return JobInfo(job.id, kind, Scope(user, agent, session), interval.total_seconds() if interval else None,
                   job.next_run_time, dict(options))
