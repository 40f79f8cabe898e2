"""Purges, jobs and writers of several processes on one store: nothing lost, nothing resurrected,
nothing broken. Each probe runs in fresh processes (`tests/_probes.py`, never forked after LanceDB
is loaded), bounded in time; CI runs one trial of each, `MEMOS_STRESS_TRIALS=20` runs more."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memos.memtypes import Fact, VaultItem

from memos import MemoryOS, Scope
from memos.portability import forget_user

sys.path.insert(0, str(Path(__file__).parent))
from _probes import verify  # noqa: E402

PROBES = Path(__file__).parent / "_probes.py"
TRIALS = int(os.environ.get("MEMOS_STRESS_TRIALS", "1"))
SECRET = "zebra-quartz-4471-purge-me"


def _spawn_writer(db: Path, side: Path, user: str, stop: Path, seed: int) -> subprocess.Popen:
    side.touch()
    with side.with_suffix(".stderr").open("w") as err:  # a file, not a pipe: a pipe nobody reads would block a long run
        return subprocess.Popen([sys.executable, str(PROBES), "writer", str(db), str(side), user, str(stop), str(seed)], stderr=err)


def _wait_ready(proc: subprocess.Popen, side: Path) -> None:
    deadline = time.monotonic() + 60
    while "ready" not in side.read_text():
        assert proc.poll() is None, side.with_suffix(".stderr").read_text()[-2000:]
        assert time.monotonic() < deadline, "writer did not start"
        time.sleep(0.05)


def _start_writer(db: Path, side: Path, user: str, stop: Path, seed: int) -> subprocess.Popen:
    proc = _spawn_writer(db, side, user, stop, seed)
    _wait_ready(proc, side)
    return proc


def _acked_ops(side: Path) -> int:
    return sum(1 for line in side.read_text().splitlines() if line.split(" ", 1)[0] in ("add", "upd", "del"))


def _files_with(root: Path, needle: str) -> list[str]:
    data = needle.encode()
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


async def _purge_while_writing(tmp_path: Path, kind: str, trial: int) -> dict:
    db, key = tmp_path / f"db-{kind}-{trial}", tmp_path / f"k-{kind}-{trial}" / "vault.key"
    mem = await MemoryOS.open(db, embedder=None, vault_key_file=key)
    bob = Scope("bob")
    if kind == "forget":
        await mem.add(bob, [Fact(subject="bob", summary=f"bob's locker code is {SECRET} ({i})") for i in range(20)])
        needle = SECRET
    elif kind == "rotate":
        item, = await mem.add(bob, VaultItem(caption="bob's code", secret=SECRET))
        needle = (await mem.storage.rows("vault", None))[0]["secret"]  # the old ciphertext must leave the disk
    else:
        turns = await mem.ingest(bob, [{"speaker": "bob", "text": f"my pin is {SECRET}"}, {"speaker": "bob", "text": "ok"}])
        needle = SECRET
    side, stop = tmp_path / f"acks-{kind}-{trial}.txt", tmp_path / f"stop-{kind}-{trial}"
    proc = _start_writer(db, side, "w", stop, seed=trial)
    try:
        deadline = time.monotonic() + 30
        while _acked_ops(side) < 20 and time.monotonic() < deadline:  # the writer is in full flow
            time.sleep(0.05)
        if kind == "forget":
            await forget_user(mem, "bob")
        elif kind == "rotate":
            await mem.rotate_vault_key()
        else:
            await mem.add(bob, VaultItem(caption="bob's pin", secret=SECRET, source_ids=[turns[0].id]))
        time.sleep(0.5)  # and keeps writing after the purge
    finally:
        stop.touch()
        proc.wait(timeout=60)
    await mem.storage.finish_deferred_purge()  # a purge deferred by busy writers completes once it is safe
    result = verify(db, {"w": side})
    # rotation: the old ciphertext leaves the vault table (history keeps audit rows as they were written)
    result["secret_files"] = _files_with(db / "vault.lance" if kind == "rotate" else db, needle) + _files_with(db, SECRET)
    assert result["acked"] > 20
    return result


@pytest.mark.parametrize("kind", ["forget", "rotate", "scrub"])
async def test_a_purge_while_another_process_writes_breaks_nothing(tmp_path, kind):
    for trial in range(TRIALS):
        result = await _purge_while_writing(tmp_path, kind, trial)
        print(kind, trial, result)
        assert result["lost"] == result["duplicated"] == result["resurrected"] == result["lost_updates"] == 0, result
        assert result["writer_errors"] == 0, result
        assert result["secret_files"] == [], result


async def test_a_busy_store_defers_the_purge_and_maintenance_finishes_it(tmp_path):
    """A purge that cannot have the store alone drops only old-enough versions now, marks itself
    pending, and the next maintenance run after the margin removes the secret's versions."""
    from datetime import UTC, datetime

    from memos.store.lancedb import purge as storage_mod

    db = tmp_path / "db"
    mem = await MemoryOS.open(db, embedder=None, vault_key_file=tmp_path / "vault.key")
    await mem.add(Scope("bob"), Fact(subject="bob", summary=f"bob said {SECRET}"))
    async with mem.storage.lease.shared():  # another write is in flight the whole time
        await mem.storage.delete_rows("semantic", "user_id = 'bob'")
        await mem.storage.delete_history("user_id = 'bob'")
        assert await mem.storage.purge_old_versions(wait=0.2) is False
    assert storage_mod.PENDING_PURGE in await mem.storage.get_meta()
    assert _files_with(db, SECRET)  # still in an old version: deferred
    later = datetime.now(UTC) + storage_mod.PURGE_MARGIN
    assert await mem.storage.finish_deferred_purge(later) == "purged"
    assert _files_with(db, SECRET) == []
    assert storage_mod.PENDING_PURGE not in await mem.storage.get_meta()


ROUND_SECONDS = float(os.environ.get("MEMOS_STRESS_SECONDS", "8"))


def _worker_round(tmp_path: Path, round_no: int, seconds: float) -> dict:
    """A `memos worker` consolidating, decaying and maintaining while three writers add, update and
    delete and a reader searches; then every acknowledgement is checked against the store."""
    from datetime import timedelta

    from memos.jobs.runs import job_history
    from memos.jobs.scheduler import MemoryScheduler

    db = tmp_path / f"db-{round_no}"
    MemoryOS.open_sync(db, embedder=None)
    users = ["w0", "w1", "w2"]
    with MemoryScheduler(db, mode="manual") as scheduler:
        for user in users:
            scheduler.add("consolidate", Scope(user), every=timedelta(seconds=1), options={"embedder": None})
            scheduler.add("decay", Scope(user), every=timedelta(seconds=1),
                          options={"embedder": None, "min_age_days": 0, "threshold": 0.64})
        scheduler.add("maintain", Scope("w0"), every=timedelta(seconds=2), options={"embedder": None})
    stop, log_file, reader_out = tmp_path / f"stop-{round_no}", tmp_path / f"worker-{round_no}.log", tmp_path / f"reader-{round_no}.txt"
    stderr_file = tmp_path / f"worker-{round_no}.stderr"
    with stderr_file.open("w") as err:
        worker = subprocess.Popen([sys.executable, str(PROBES), "worker", str(db), str(seconds + 30), str(log_file)], stderr=err)
    sides = {u: tmp_path / f"acks-{round_no}-{u}.txt" for u in users}
    # all start at once (a process start costs seconds on a busy machine); the round begins when every writer is ready
    writers = [_spawn_writer(db, sides[u], u, stop, seed=round_no * 10 + i) for i, u in enumerate(users)]
    reader = subprocess.Popen([sys.executable, str(PROBES), "reader", str(db), str(stop), str(reader_out)])
    try:
        for proc, user in zip(writers, users):
            _wait_ready(proc, sides[user])
        time.sleep(seconds)
    finally:
        stop.touch()
        for proc in [*writers, reader]:
            proc.wait(timeout=120)
        worker.terminate()  # SIGTERM: the worker finishes its running jobs and exits
        worker.wait(timeout=120)
    worker_stderr = stderr_file.read_text()
    result = verify(db, sides)
    log_text = log_file.read_text() if log_file.exists() else ""
    result["job_tracebacks"] = log_text.count("Traceback") + worker_stderr.count("Traceback")
    check = MemoryOS.open_sync(db, embedder=None)
    from memos._sync import run_sync

    runs = [r for u in users for r in run_sync(job_history(check, Scope(u), limit=None))]
    result["job_runs"] = len(runs)
    result["job_errors"] = sum(len(r.get("errors", [])) for r in runs)
    result["job_skipped"] = sum(int(r.get("skipped", 0) or 0) for r in runs if isinstance(r.get("skipped", 0), int))
    result["merged"] = sum(int(r.get("merged", 0)) for r in runs)
    result["archived"] = sum(int(r.get("archived", 0)) for r in runs)
    lines = reader_out.read_text().splitlines() if reader_out.exists() else ["0"]
    result["reads"] = int(lines[0])
    result["reader_errors"] = sum(int(line.split(" ", 1)[0]) for line in lines[1:] if line.strip())
    return result


def test_worker_three_writers_and_a_reader_lose_nothing(tmp_path):
    rounds = int(os.environ.get("MEMOS_STRESS_ROUNDS", "1"))
    for round_no in range(rounds):
        result = _worker_round(tmp_path, round_no, ROUND_SECONDS)
        print(result)
        bad = {k: result[k] for k in ("lost", "duplicated", "lost_updates", "resurrected", "without_history",
                                      "job_tracebacks", "job_errors", "writer_errors", "reader_errors") if result[k]}
        assert not bad, result
        assert result["acked"] > 50 and result["job_runs"] > 3, result


def test_kills_during_consolidation_leave_no_record_without_history(tmp_path):
    """SIGKILL a process that adds duplicates and consolidates them; the maintenance run's repair
    pass leaves every record with its creation row and every change with its row."""
    import random
    import signal
    from datetime import UTC, datetime

    from memos._sync import run_sync
    from memos.jobs.audit import REPAIR_GRACE, history_gaps
    from memos.store.lancedb.maintenance import maintain

    db = tmp_path / "db"
    rng = random.Random(5)
    for _ in range(2 * TRIALS):
        proc = subprocess.Popen([sys.executable, str(PROBES), "churn", str(db)], stdout=subprocess.PIPE, start_new_session=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.5, 2.5))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    mem = MemoryOS.open_sync(db, embedder=None)
    rows = run_sync(mem.storage.rows("semantic", None))
    assert rows, "the churn process wrote nothing"
    # the killed writes are too recent to be told from writes in flight; past the grace period they are repaired
    run_sync(maintain(mem.storage, now=datetime.now(UTC) + REPAIR_GRACE))
    assert run_sync(history_gaps(mem.storage)) == {}
    created = {h["record_id"] for h in run_sync(mem.storage.raw_history("op = 'add'"))}
    assert all(r["id"] in created for r in rows)


async def test_a_supersede_that_loses_a_race_with_a_delete_leaves_no_successor(tmp_path):
    """The successor was added before the old record was closed; when a delete took the old record
    in between, supersede raised RecordNotFoundError with its successor stored, and the caller's
    retry stored a second one."""
    import asyncio

    from memos import RecordNotFoundError

    mem = await MemoryOS.open(tmp_path / "db", embedder=None)
    alice = Scope("alice")
    for round_ in range(3):
        [old] = await mem.add(alice, Fact(subject=f"s{round_}", summary="orig"))
        done = await asyncio.gather(mem.supersede(alice, "semantic", old.id, Fact(subject=f"s{round_}", summary="succ")),
                                    mem.delete(alice, "semantic", old.id), return_exceptions=True)
        kept = [r.summary for r in await mem.list(alice, "semantic", status=None) if r.subject == f"s{round_}"]
        if isinstance(done[0], RecordNotFoundError):
            assert kept == [], kept  # refused: nothing of it stays
        else:
            assert not isinstance(done[0], BaseException) and kept in (["succ"], ["succ", "orig"], ["orig", "succ"]), (done, kept)


async def test_a_successor_keeps_the_scope_of_the_record_it_replaces(tmp_path):
    """Agent a1 superseding a fact the user's agents share stamped the successor with a1: agent a2
    then saw the old fact superseded and could not read its successor."""
    mem = await MemoryOS.open(tmp_path / "db", embedder=None)
    [paris] = await mem.add(Scope("alice"), Fact(subject="Alice", summary="Alice lives in Paris"))
    rome = await mem.supersede(Scope("alice", "a1"), "semantic", paris.id, Fact(subject="Alice", summary="Alice lives in Rome"))
    assert not rome.agent_id and not rome.session_id  # the user's, as Paris was
    assert [f.summary for f in await mem.list(Scope("alice", "a2"), "semantic")] == ["Alice lives in Rome"]
    assert (await mem.get(Scope("alice", "a2"), "semantic", rome.id)).summary == "Alice lives in Rome"
