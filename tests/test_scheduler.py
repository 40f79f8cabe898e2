"""The scheduler: persistent jobs, coalesced missed runs, per-scope control, injected clock."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from memos.memtypes import Fact

from memos import ConfigError, MemoryOS, Scope
from memos.jobs.runs import job_history
from memos.jobs.scheduler import MemoryScheduler, default_jobs_url, job_id


async def _job_runs(db_path, kind=None) -> list[dict]:
    fresh = await MemoryOS.open(db_path, embedder=None)
    return await job_history(fresh, Scope("alice"), kind=kind, limit=None)


async def test_job_survives_restart_and_runs_once_for_missed_window(db_path, clock, alice):
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    await mem.add(alice, Fact(subject="alice", summary="likes tea"))
    sched = MemoryScheduler(db_path, clock=clock, mode="manual").start()
    # a job carries only plain options: the run after the restart opens the store itself
    info = sched.add("consolidate", alice, every=timedelta(hours=1), options={"embedder": None})
    assert info.next_run_time == clock() + timedelta(hours=1)
    sched.shutdown()  # the process "stops"

    clock.advance(hours=5, minutes=30)  # five runs missed while it was down
    reopened = MemoryScheduler(db_path, clock=clock, mode="manual").start()
    [job] = reopened.jobs()
    assert job.id == job_id("consolidate", alice) and job.kind == "consolidate" and job.scope == alice
    results = reopened.run_due()
    assert len(results) == 1 and results[0]["job"] == "consolidate" and results[0]["errors"] == []
    assert reopened.run_due() == []  # coalesced: nothing left for the missed window
    runs = await _job_runs(db_path, "consolidate")
    assert len(runs) == 1
    # next regular run is on the hour grid after the catch-up, once
    assert reopened.jobs()[0].next_run_time == clock() + timedelta(minutes=30)
    clock.advance(minutes=30)
    assert len(reopened.run_due()) == 1
    reopened.shutdown()


async def test_pause_resume_remove_per_scope(db_path, clock, alice, bob):
    sched = MemoryScheduler(db_path, clock=clock, mode="manual").start()
    plain = {"embedder": None}
    sched.add("decay", alice, every=timedelta(minutes=10), options=plain)
    sched.add("decay", bob, every=timedelta(minutes=10), options=plain)
    sched.add("reflect", alice, every=timedelta(minutes=10), options=plain)
    assert len(sched.jobs()) == 3
    assert sched.pause("decay", alice).paused
    clock.advance(minutes=10)
    ran = sorted(r["job_id"] for r in sched.run_due())
    assert ran == ["decay:bob:assistant:s1", "reflect:alice:assistant:s1"]
    resumed = sched.resume("decay", alice)
    assert not resumed.paused and resumed.next_run_time > clock()
    sched.remove("reflect", alice)
    assert [j.id for j in sched.jobs()] == ["decay:alice:assistant:s1", "decay:bob:assistant:s1"]
    with pytest.raises(ConfigError, match="no reflect job"):
        sched.remove("reflect", alice)
    with pytest.raises(ConfigError, match="unknown job kind"):
        sched.add("dream", alice)
    # run_soon makes a job due at once (then it continues on its interval)
    sched.run_soon("decay", bob)
    assert [r["job_id"] for r in sched.run_due()] == ["decay:bob:assistant:s1"] and sched.run_due() == []
    # adding the same kind for the same scope replaces, never duplicates
    sched.add("decay", bob, every=timedelta(minutes=5))
    assert len(sched.jobs()) == 2 and sched.get("decay", bob).every_seconds == 300
    sched.shutdown()


async def test_thread_scheduler_runs_due_jobs_by_itself(db_path, clock, alice):
    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    for n in range(4):  # four appends, each written to its table = four small fragments for compaction to fold
        await mem.add(alice, Fact(subject="alice", summary=f"note {n}"))
        await mem.storage.flush_queued()  # adds are journaled first: each batch its own commit here
    sched = mem.scheduler()  # in-process, background thread, the memory's clock
    assert mem.scheduler() is sched
    sched.add("maintain", alice, every=timedelta(hours=6))
    clock.advance(hours=6)
    sched.wakeup()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not await job_history(mem, alice, kind="maintain"):
        time.sleep(0.1)
    [run] = await job_history(mem, alice, kind="maintain")
    assert run["errors"] == [] and run["compaction"]["semantic"]["fragments_removed"] >= 4
    sched.shutdown()


def test_job_store_sits_next_to_the_store(tmp_path, monkeypatch):
    from memos.jobs.scheduler import canonical_uri

    monkeypatch.chdir(tmp_path)
    assert canonical_uri("db") == canonical_uri("./db") == str(tmp_path / "db")  # one key per store for the worker
    assert canonical_uri("s3://bucket/memos") == "s3://bucket/memos"
    assert default_jobs_url(tmp_path / "db") == f"sqlite:///{tmp_path / 'db.jobs.sqlite'}"
    with pytest.raises(ConfigError, match="jobs_url"):
        default_jobs_url("s3://bucket/memos")


async def test_one_running_instance_per_job(db_path, clock, alice):
    """A run still going when the next one is due is not started twice (max_instances=1)."""
    import threading

    from apscheduler.events import EVENT_JOB_MAX_INSTANCES
    from memos.memtypes import Episode
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    entered, release = threading.Event(), threading.Event()

    def slow_model(messages, info):
        entered.set()
        release.wait(30)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"insights": []})])

    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    await mem.add(alice, Episode(summary="something happened", importance=1.0))
    sched = mem.scheduler(model=FunctionModel(slow_model))
    skipped = []
    sched._aps.add_listener(lambda event: skipped.append(event.job_id), EVENT_JOB_MAX_INSTANCES)
    sched.add("reflect", alice, every=timedelta(minutes=1), options={"force": True})
    clock.advance(minutes=1)
    sched.wakeup()
    assert entered.wait(30)
    clock.advance(minutes=1)
    sched.wakeup()
    deadline = time.monotonic() + 30
    while not skipped and time.monotonic() < deadline:
        time.sleep(0.05)
    release.set()
    sched.shutdown()
    assert skipped == [job_id("reflect", alice)]
    assert len(await job_history(mem, alice, kind="reflect")) == 1


async def test_scopes_whose_ids_hold_colons_or_stars_get_their_own_jobs_and_reflection_state(db_path, clock):
    """Ids joined with ':' and an open id written '*' made one job id (and one reflection state
    key) for different scopes: scheduling the second replaced the first's job, and removing one
    removed the other's."""
    from memos.jobs.reflection_state import reflection_key

    look_alikes = [Scope("a:b", "c"), Scope("a", "b:c"), Scope("u", "*"), Scope("u"), Scope("v", "x", "*"), Scope("v", "x")]
    assert len({job_id("decay", s) for s in look_alikes}) == len({reflection_key(s) for s in look_alikes}) == len(look_alikes)
    assert job_id("decay", Scope("bob", "assistant", "s1")) == "decay:bob:assistant:s1"  # ordinary ids keep their job ids
    sched = MemoryScheduler(db_path, clock=clock, mode="manual").start()
    for scope in look_alikes:
        sched.add("decay", scope, every=timedelta(minutes=10), options={"embedder": None})
    assert {j.scope for j in sched.jobs()} == set(look_alikes)
    sched.remove("decay", Scope("u"))
    assert Scope("u", "*") in {j.scope for j in sched.jobs()} and len(sched.jobs()) == len(look_alikes) - 1
    clock.advance(minutes=10)
    assert len(sched.run_due()) == len(look_alikes) - 1
    sched.shutdown()

    # forgetting user 'a:b' removes its reflection state and leaves user 'a's
    from memos.portability import forget_user

    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    for scope in look_alikes:
        await mem.set_state(reflection_key(scope), "{}")
    await forget_user(mem, "a:b")
    assert {k for k in await mem.state() if k.startswith("reflection:")} == {reflection_key(s) for s in look_alikes[1:]}


async def test_a_job_stored_under_an_older_versions_id_is_found_and_not_doubled(db_path, clock):
    """Before scopes' ids were escaped, user 'org:42's job was stored as `decay:org:42:*:*`; the
    scheduler now moves it to its id on start, keeping its schedule, so `add` replaces it and
    `get` / `remove` find it."""
    from apscheduler.triggers.interval import IntervalTrigger

    from memos.jobs.scheduler import canonical_uri

    org = Scope("org:42")
    sched = MemoryScheduler(db_path, clock=clock, mode="manual").start()
    due = clock() + timedelta(minutes=10)
    sched._aps.add_job("memos.jobs.runs:run_scheduled_job", trigger=IntervalTrigger(minutes=10, start_date=due, timezone="UTC"),
                       id="decay:org:42:*:*", args=["decay", canonical_uri(db_path), "org:42", None, None, {"embedder": None}],
                       next_run_time=due)  # as an older version stored it
    sched.shutdown()
    reopened = MemoryScheduler(db_path, clock=clock, mode="manual").start()
    [job] = reopened.jobs()
    assert job.id == job_id("decay", org) == "decay:org%3A42:*:*" and job.next_run_time == due and job.scope == org
    reopened.add("decay", org, every=timedelta(minutes=5), options={"embedder": None})
    assert [j.every_seconds for j in reopened.jobs()] == [300]
    reopened.remove("decay", org)
    assert reopened.jobs() == []
    reopened.shutdown()


async def test_reflection_state_kept_under_an_older_versions_key_is_still_read(db_path, clock):
    """Reflection's counter and last run, kept by an older version under `reflection:org:42:*:*`,
    are read until the next reflection writes them under the escaped key (else that user's
    reflection would start again from nothing)."""
    import json

    from memos.jobs.reflection_state import reflection_key, reflection_state

    mem = await MemoryOS.open(db_path, embedder=None, clock=clock)
    await mem.set_state("reflection:org:42:*:*", json.dumps({"last_at": "2026-01-02T00:00:00+00:00", "episodes": 7}))
    state = await reflection_state(mem, Scope("org:42"))
    assert state["episodes"] == 7 and state["last_at"].year == 2026 and reflection_key(Scope("org:42")) == "reflection:org%3A42:*:*"
