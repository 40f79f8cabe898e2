"""A record added (or given as a successor) already superseded pointed at a successor that never
replaced it: only supersede and merge_into make a record superseded."""

from __future__ import annotations

import pytest
from memos.memtypes import Fact

from memos import Scope
from memos.exceptions import InvalidRecordError

ALICE = Scope("alice", "bot")


@pytest.mark.parametrize("fields", [{"status": "superseded"}, {"superseded_by": "f" * 32}])
async def test_a_record_cannot_be_added_or_supersede_as_superseded(mem, snapshot, fields):
    [old] = await mem.add(ALICE, Fact(subject="Alice", summary="Alice lives in Porto"))
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match="superseded"):
        await mem.add(ALICE, [Fact(subject="Alice", summary="Alice has a cat"), Fact(subject="Alice", summary="x", **fields)])
    with pytest.raises(InvalidRecordError, match="superseded"):
        await mem.add(ALICE, (f for f in [Fact(subject="Alice", summary="x", **fields)]))
    with pytest.raises(InvalidRecordError, match="superseded"):  # any iterable of records, not only a list
        await mem.add(ALICE, {"x": Fact(subject="Alice", summary="x", **fields)}.values())
    with pytest.raises(InvalidRecordError, match="superseded"):
        await mem.supersede(ALICE, "semantic", old.id, Fact(subject="Alice", summary="Alice lives in Lisbon", **fields))
    assert await snapshot(mem) == before
    new = await mem.supersede(ALICE, "semantic", old.id, Fact(subject="Alice", summary="Alice lives in Lisbon"))
    assert (await mem.get(ALICE, "semantic", old.id)).superseded_by == new.id
    [archived] = await mem.add(ALICE, Fact(subject="Alice", summary="Alice had a bike", status="archived"))
    assert archived.status == "archived"
