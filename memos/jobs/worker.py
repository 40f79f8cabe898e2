"""`memos worker`: the scheduler in its own process, against the same store as the agents.

The worker opens the store once, registers it (and the model, if any) for scheduled jobs,
and runs a thread-mode `MemoryScheduler` on the store's persistent job store until it is told
to stop (SIGINT / SIGTERM, `duration` elapsed, or `stop` set). Jobs are whatever the job store
holds: add them with `memos jobs add` or `MemoryScheduler.add` from any process.

Always start it as a fresh process (`multiprocessing.get_context("spawn")` from Python):
LanceDB must not be used across a fork.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["run_worker", "worker_main"]

log = logging.getLogger("memos.jobs.worker")


def run_worker(
    uri: str | Path,
    *,
    embedder: Any = "local",
    model: Any = None,
    jobs_url: str | None = None,
    duration: float | None = None,
    stop: threading.Event | None = None,
    stop_file: str | Path | None = None,
    max_workers: int = 4,
) -> dict[str, Any]:
    """Run scheduled jobs for the store at `uri` until stopped; returns how many runs happened.

    Stops on SIGINT/SIGTERM, when `stop` is set, after `duration` seconds, or once `stop_file` exists
    (a portable way for another process to ask it to finish its current jobs and exit).
    """
    from memos.memory import MemoryOS

    from .scheduler import MemoryScheduler

    stop = stop or threading.Event()
    memory = MemoryOS.open_sync(uri, embedder=embedder)
    scheduler = MemoryScheduler(memory.storage.uri, jobs_url=jobs_url, mode="thread", max_workers=max_workers,
                                memory=memory, model=model)
    runs: list[dict[str, Any]] = []
    scheduler.add_listener(lambda event: runs.append({"job": event.job_id}), _executed_mask())
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    scheduler.start()
    log.info("memos worker on %s: %d jobs scheduled", uri, len(scheduler.jobs()))
    deadline = time.monotonic() + duration if duration is not None else None
    try:
        while not stop.is_set():
            remaining = None if deadline is None else deadline - time.monotonic()
            if (remaining is not None and remaining <= 0) or (stop_file is not None and Path(stop_file).exists()):
                break
            stop.wait(min(0.2, remaining) if remaining is not None else 0.2)
    finally:
        scheduler.shutdown(wait=True)
    return {"runs": len(runs)}


def _executed_mask() -> int:
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED

    return EVENT_JOB_EXECUTED | EVENT_JOB_ERROR


def worker_main(uri: str, embedder: str | None = "local", model: str | None = None, duration: float | None = None,
                jobs_url: str | None = None, stop_file: str | None = None) -> None:
    """Spawn-friendly entry point (plain arguments): `ctx.Process(target=worker_main, args=(uri, None))`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    result = run_worker(uri, embedder=None if embedder in (None, "none") else embedder, model=model,
                        jobs_url=jobs_url, duration=duration, stop_file=stop_file)
    log.info("memos worker stopped after %d job runs", result["runs"])
