"""A delete is crash-safe: a process killed between its commits leaves nothing of the record for
good; a retried delete, the next open or the maintenance run finishes it (`memos.store.lancedb.deletion`)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from memos.memtypes import Fact

from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.exceptions import RecordNotFoundError
from memos.portability import export_scope

ALICE = Scope("alice", "assistant", "s1")
KILLED = 17


def _delete_and_die(db: str, record_id: str, point: str) -> None:
    """In a spawned process: delete the record and stop dead (`os._exit`, like SIGKILL: nothing
    runs after) at `point`, the commit that follows the row's own: "shared" (the shared search
    row) or "history"."""
    os.environ["LANCE_LOG"] = "error"
    from memos.store.lancedb.search_index import SearchIndex
    from memos.store.lancedb.storage import Storage

    def die(*args: object, **kwargs: object) -> None:
        os._exit(KILLED)

    if point == "shared":
        SearchIndex.synced = die  # type: ignore[method-assign]
    else:
        Storage.delete_history = die  # type: ignore[method-assign]
    MemoryOS.open_sync(db, embedder=None).delete_sync(ALICE, "semantic", record_id)
    os._exit(0)  # the delete ended without reaching the crash point


def _killed_delete(db: Path, record_id: str, point: str) -> None:
    child = multiprocessing.get_context("spawn").Process(target=_delete_and_die, args=(str(db), record_id, point))
    child.start()
    child.join(120)
    assert child.exitcode == KILLED


def _remnants(mem: MemoryOS, record_id: str) -> dict[str, int]:
    """What is left of a record in every table, as this process reads them now."""
    storage = mem.storage
    run_sync(storage.refresh())
    key = f"semantic:{record_id}"
    return {
        "rows": sum(len(run_sync(storage.rows(name, f"id = '{record_id}'"))) for name in storage.tables),
        "history": len(run_sync(storage.raw_history(f"record_id = '{record_id}'"))),
        "shared": run_sync(storage.search.table.count_rows(f"key = '{key}'")),
        "meta": sum(record_id in k or record_id in v for k, v in run_sync(storage.get_meta()).items()),
    }


def _exported(mem: MemoryOS) -> str:
    return "\n".join(run_sync(export_scope(mem, ALICE)))


def _store(db: Path) -> tuple[MemoryOS, str, str]:
    mem = MemoryOS.open_sync(db, embedder=None)
    doomed, kept = mem.add_sync(ALICE, [Fact(subject="door", summary="the door code is 4411"),
                                        Fact(subject="cat", summary="the cat is called Miso")])
    mem.update_sync(ALICE, "semantic", doomed.id, {"summary": "the door code is 4412"})
    return mem, doomed.id, kept.id


@pytest.mark.parametrize(("point", "finisher"), [("history", "retry"), ("shared", "retry"), ("history", "open"),
                                                 ("shared", "open"), ("history", "maintain")])
def test_a_delete_killed_between_its_commits_is_finished(tmp_path: Path, point: str, finisher: str):
    db = tmp_path / "db"
    mem, doomed, kept = _store(db)
    _killed_delete(db, doomed, point)

    crashed = _remnants(mem, doomed)  # the crash state: the row is gone, the rest of the record is not
    assert crashed["rows"] == 0 and crashed["history"] == 2, crashed
    assert crashed["shared"] == (1 if point == "shared" else 0), crashed

    if finisher == "retry":
        mem.delete_sync(ALICE, "semantic", doomed)  # finishes the job: no "not found"
    elif finisher == "open":
        mem = MemoryOS.open_sync(db, embedder=None)
    else:
        assert mem.maintain_sync()["deletes_finished"] == 1

    assert _remnants(mem, doomed) == {"rows": 0, "history": 0, "shared": 0, "meta": 0}
    exported = _exported(mem)
    assert doomed not in exported and "door code" not in exported and kept in exported
    assert [r.id for r in mem.list_sync(ALICE, "semantic")] == [kept]
    assert [e.op for e in mem.history_sync(ALICE, kept)] == ["add"]
    with pytest.raises(RecordNotFoundError):  # nothing is left: a further retry is "not found" again
        mem.delete_sync(ALICE, "semantic", doomed)


def test_a_record_added_again_under_the_id_of_a_killed_delete_survives_it(tmp_path: Path):
    db = tmp_path / "db"
    mem, doomed, _ = _store(db)
    _killed_delete(db, doomed, "history")
    run_sync(mem.storage.refresh())
    mem.add_sync(ALICE, Fact(id=doomed, subject="door", summary="the door code changed to 9090"))
    mem.maintain_sync()
    again = MemoryOS.open_sync(db, embedder=None)
    assert again.get_sync(ALICE, "semantic", doomed).summary == "the door code changed to 9090"
    assert [(e.op, e.after["summary"]) for e in again.history_sync(ALICE, doomed)] == [("add", "the door code changed to 9090")]


def test_a_retried_delete_outside_the_records_scope_is_not_found(tmp_path: Path):
    db = tmp_path / "db"
    mem, doomed, _ = _store(db)
    _killed_delete(db, doomed, "history")
    run_sync(mem.storage.refresh())
    with pytest.raises(RecordNotFoundError):  # bob cannot finish, or learn of, alice's delete
        mem.delete_sync(Scope("bob", "assistant", "s1"), "semantic", doomed)
    assert _remnants(mem, doomed)["history"] == 2
