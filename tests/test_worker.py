"""`memos worker` in a spawned process consolidates while this process keeps writing: nothing lost or doubled."""

from __future__ import annotations

import multiprocessing
import time
from datetime import UTC, datetime, timedelta

from memos.memtypes import Fact

from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.jobs.consolidation import normalize_text
from memos.jobs.runs import job_history, refresh_tables
from memos.jobs.scheduler import MemoryScheduler
from memos.jobs.worker import worker_main
from memos.store.scope import Where


def _runs(mem: MemoryOS, scope: Scope) -> list[dict]:
    run_sync(refresh_tables(mem.storage))
    return run_sync(job_history(mem, scope, kind="consolidate", limit=None))


def _wait_for(predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_worker_consolidates_concurrent_writes_without_loss_or_duplicates(tmp_path):
    db = tmp_path / "db"
    scope = Scope("alice", "assistant", "s1")
    mem = MemoryOS.open_sync(db, embedder=None)  # full-text only: the agent side needs no vectors here
    with MemoryScheduler(db, mode="manual") as scheduler:
        scheduler.add("consolidate", scope, every=timedelta(seconds=1), options={"embedder": None})
    stop_file = tmp_path / "stop"
    worker = multiprocessing.get_context("spawn").Process(
        target=worker_main, args=(str(db), None, None, 180.0, None, str(stop_file)), daemon=True)
    worker.start()
    try:
        _wait_for(lambda: _runs(mem, scope), "the worker's first consolidation")

        written: list[Fact] = []
        first_write = datetime.now(UTC)
        for batch in range(30):
            fresh = [Fact(subject=f"topic {batch}-{k}", summary=f"note {batch * 10 + k}: item {batch}-{k} is filed")
                     for k in range(10)]
            if batch % 3 == 2:  # plant a duplicate of an earlier fact (new id, same words)
                earlier = written[batch * 7 % len(written)]
                fresh[0] = Fact(subject=earlier.subject, summary=earlier.summary + "!", source_ids=[f"dup-{batch}"])
            mem.add_sync(scope, fresh)
            written += fresh
            mem.ingest_sync(scope, [{"speaker": "alice", "text": f"turn {batch}", "id": f"t{batch}"}])
            time.sleep(0.1)
        last_write = datetime.now(UTC)
        _wait_for(lambda: any(datetime.fromisoformat(r["started_at"]) > last_write for r in _runs(mem, scope)),
                  "a consolidation that started after the last write")
    finally:
        stop_file.touch()
        worker.join(timeout=60)
        if worker.is_alive():
            worker.kill()
    assert worker.exitcode == 0

    check = MemoryOS.open_sync(db, embedder=None)
    rows = run_sync(check.storage.rows("semantic", Where(scope).build()))
    by_id: dict[str, list[dict]] = {}
    for row in rows:
        by_id.setdefault(row["id"], []).append(row)
    assert len(written) == 300 and len(rows) == 300  # nothing lost, nothing added
    active_text: dict[str, str] = {}
    for fact in written:
        [row] = by_id[fact.id]  # present exactly once
        if row["status"] == "active":
            active_text[row["id"]] = normalize_text(row["text"])
    merged = 0
    for fact in written:
        [row] = by_id[fact.id]
        if row["status"] != "active":
            assert row["status"] == "archived" and row["superseded_by"] in active_text, row  # merged with a link
            assert active_text[row["superseded_by"]] == normalize_text(row["text"])
            merged += 1
    assert merged == 10  # the ten planted duplicates, no more
    assert len(set(active_text.values())) == len(active_text) == 290  # no duplicate left active
    episodes = check.list_sync(scope, "episodic", status=None, limit=None)
    assert sorted(e.summary for e in episodes) == sorted(f"turn {b}" for b in range(30))
    runs = run_sync(job_history(check, scope, kind="consolidate", limit=None))
    assert len(runs) >= 3 and all(r["errors"] == [] for r in runs)
    assert sum(r["merged"] for r in runs) == 10
    during = [r for r in runs if first_write < datetime.fromisoformat(r["started_at"]) < last_write]
    assert during, "no consolidation ran while this process was writing"


async def test_in_process_scheduler_and_agent_writes_race_without_loss(tmp_path):
    """The same race inside one process: agent writes on its loop, jobs on the scheduler thread."""
    import asyncio

    mem = await MemoryOS.open(tmp_path / "db", embedder=None)  # real clock: the thread wakes by itself
    scope = Scope("alice")
    sched = mem.scheduler()
    sched.add("consolidate", scope, every=timedelta(seconds=1))
    written: list[Fact] = []
    for batch in range(20):
        fresh = [Fact(subject=f"s{batch}-{k}", summary=f"item {batch}-{k} is here") for k in range(10)]
        if batch % 2:
            fresh[0] = Fact(subject=written[batch].subject, summary=written[batch].summary)  # planted duplicate
        await mem.add(scope, fresh)
        written += fresh
        await asyncio.sleep(0.1)
    sched.run_soon("consolidate", scope)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = await job_history(mem, scope, kind="consolidate", limit=None)
        if sum(r["merged"] for r in runs) == 10 and runs[-1]["merged"] == 0:
            break
        await asyncio.sleep(0.2)
    sched.shutdown()
    rows = await mem.storage.rows("semantic", Where(scope).build())
    assert sorted(r["id"] for r in rows) == sorted(f.id for f in written)  # each exactly once
    archived = [r for r in rows if r["status"] == "archived"]
    assert len(archived) == 10 and all(r["superseded_by"] for r in archived)
    assert all(r["errors"] == [] for r in await job_history(mem, scope, kind="consolidate", limit=None))
