"""History repair (`memos.jobs.audit`) touches only writes that are provably abandoned: a record's row
without its history row is repaired once it is older than `REPAIR_GRACE`, never while its writer
may still be between its two commits."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from memos.memtypes import Fact

from memos import MemoryOS, Scope
from memos.jobs.audit import REPAIR_GRACE, history_gaps
from memos.store.history import history_row

ALICE = Scope("alice", "assistant", "s1")


async def _row_without_history(mem: MemoryOS, record: Fact) -> Fact:
    """What another process between its two commits leaves: the record's row, stamped now by its
    clock, and no history row yet. Returns the record as written."""
    now = mem.clock()
    stamped = record.model_copy(update={**ALICE.stamp(), "created_at": now, "updated_at": now, "text": record.search_text()})
    await mem.storage.add_rows("semantic", [mem.storage.type_table("semantic").to_row(stamped, None)])
    return stamped


async def _history_follows(mem: MemoryOS, record: Fact, op: str = "add", before: Fact | None = None) -> None:
    """The writer's second commit: the history row of its change."""
    await mem.storage.append_history([history_row(op, record, "user", before and before.model_dump(mode="json"),
                                                  record.model_dump(mode="json"), record.updated_at)])


async def test_a_write_in_flight_is_not_repaired_and_its_own_history_row_follows(tmp_path: Path, clock):
    mem = await MemoryOS.open(tmp_path / "db", embedder=None, clock=clock)
    record = await _row_without_history(mem, Fact(subject="door", summary="the door code is 4411"))
    assert [(g["id"], g["kind"]) for g in (await history_gaps(mem.storage))["semantic"]] == [(record.id, "add")]

    clock.advance(seconds=30)  # the writer is slow (a purge held the lease), not gone
    report = await mem.maintain()
    assert "history_repaired" not in report
    assert await mem.history(ALICE, record.id) == []

    await _history_follows(mem, record)
    [entry] = await mem.history(ALICE, record.id)
    assert (entry.op, entry.actor, entry.note) == ("add", "user", None)
    clock.advance(seconds=REPAIR_GRACE.total_seconds() * 2)
    await mem.maintain()  # nothing is missing any more: nothing is written later either
    assert [(e.op, e.actor) for e in await mem.history(ALICE, record.id)] == [("add", "user")]


async def test_an_update_in_flight_is_not_repaired(tmp_path: Path, clock):
    mem = await MemoryOS.open(tmp_path / "db", embedder=None, clock=clock)
    [old] = await mem.add(ALICE, Fact(subject="door", summary="the door code is 4411"))
    clock.advance(minutes=1)
    new = old.model_copy(update={"summary": "the door code is 4412", "updated_at": clock()})
    row = mem.storage.type_table("semantic").to_row(new.model_copy(update={"text": new.search_text()}), None)
    await mem.storage.update_rows("semantic", [row], {old.id: old.updated_at})
    assert [g["kind"] for g in (await history_gaps(mem.storage))["semantic"]] == ["update"]

    assert "history_repaired" not in await mem.maintain()
    await _history_follows(mem, new, "update", old)
    assert [(e.op, e.actor) for e in await mem.history(ALICE, old.id)] == [("add", "user"), ("update", "user")]


async def test_a_write_abandoned_for_longer_than_the_grace_period_is_repaired(tmp_path: Path, clock):
    mem = await MemoryOS.open(tmp_path / "db", embedder=None, clock=clock)
    record = await _row_without_history(mem, Fact(subject="door", summary="the door code is 4411"))

    clock.advance(seconds=REPAIR_GRACE.total_seconds() - 1)
    assert "history_repaired" not in await mem.maintain()  # just inside the grace period: left alone
    clock.advance(seconds=2)
    assert (await mem.maintain())["history_repaired"] == {"semantic": 1}
    [entry] = await mem.history(ALICE, record.id)
    assert (entry.op, entry.actor, entry.after["summary"]) == ("add", "repair", "the door code is 4411")
    assert entry.note is not None and entry.note.startswith("repaired")
    assert await history_gaps(mem.storage) == {}
    assert REPAIR_GRACE >= timedelta(minutes=1)  # seconds of a writer's retries and waits fit well inside it
