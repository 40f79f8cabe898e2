"""A record's lifecycle is its operations', not an update's.

`status`, `superseded_by`, `source_ids` and `valid_to` (and `valid_from` of a superseded record)
change through supersede, merge_into, archive, delete and the kernel's own jobs (`revise`).
`update` set them freely: a superseded record reactivated and superseded again left two active
successors of one fact; a `superseded_by` pointed anywhere. Now the facade, the server, the
client and the memory manager refuse them, name the operation to use, and store nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx2 as httpx
import pytest
from _scripted import Script, plan
from memos.agents import MemoryManager
from memos.memtypes import Fact
from pydantic_ai.exceptions import UnexpectedModelBehavior

from memos import Scope
from memos.exceptions import InvalidRecordError, RecordSupersededError
from memos.serve import ServeConfig, create_app

SCOPE = Scope("alice", "bot", "s1")
ADMIN = "admin-key-for-lifecycle-tests-0123456789"
LIFECYCLE_CHANGES = {
    "reactivate": ("status", {"status": "active"}),
    "archive": ("status", {"status": "archived"}),
    "unknown-status": ("status", {"status": "forgotten"}),
    "successor": ("superseded_by", {"superseded_by": "0" * 32}),
    "no-successor": ("superseded_by", {"superseded_by": None}),
    "provenance": ("source_ids", {"source_ids": ["forged-source"]}),
    "end": ("valid_to", {"valid_to": datetime(2026, 1, 1, tzinfo=UTC)}),
    "with-content": ("status", {"summary": "Alice lives in Faro", "status": "active"}),
}


async def superseded_pair(mem) -> tuple[Fact, Fact]:
    [lisbon] = await mem.add(SCOPE, Fact(subject="Alice", summary="Alice lives in Lisbon"))
    porto = await mem.supersede(SCOPE, Fact, lisbon.id, Fact(subject="Alice", summary="Alice lives in Porto"))
    return await mem.get(SCOPE, Fact, lisbon.id), porto


@pytest.mark.parametrize(("field", "changes"), list(LIFECYCLE_CHANGES.values()), ids=list(LIFECYCLE_CHANGES))
async def test_an_update_of_a_lifecycle_field_is_refused_naming_the_operation_and_changes_nothing(mem, snapshot, field, changes):
    old, new = await superseded_pair(mem)
    before = await snapshot(mem)
    for record in (old, new):
        with pytest.raises(InvalidRecordError, match=rf"cannot change \['{field}'\].*supersede.*merge_into.*archive.*delete"):
            await mem.update(SCOPE, "semantic", record.id, changes)
        with pytest.raises(InvalidRecordError, match=rf"cannot change \['{field}'\]"):  # a scoped view is the same facade
            await mem.scoped(SCOPE).update("semantic", record.id, changes)
    assert await snapshot(mem) == before


async def test_a_superseded_fact_cannot_be_reactivated_to_gain_a_second_successor(mem):
    old, porto = await superseded_pair(mem)
    with pytest.raises(InvalidRecordError, match=r"cannot change \['status'\]"):
        await mem.update(SCOPE, Fact, old.id, {"status": "active"})
    with pytest.raises(RecordSupersededError, match=porto.id):
        await mem.supersede(SCOPE, Fact, old.id, Fact(subject="Alice", summary="Alice lives in Faro"))
    active = await mem.list(SCOPE, Fact)
    assert [f.id for f in active] == [porto.id]
    assert (await mem.get(SCOPE, Fact, old.id)).superseded_by == porto.id


async def test_the_period_of_a_superseded_record_is_history_its_successors_is_not(mem, snapshot):
    old, porto = await superseded_pair(mem)
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match=f"superseded by {porto.id}.*change valid_from of its successor"):
        await mem.update(SCOPE, Fact, old.id, {"valid_from": datetime(2020, 1, 1, tzinfo=UTC)})
    assert await snapshot(mem) == before
    moved = await mem.update(SCOPE, Fact, porto.id, {"valid_from": datetime(2025, 6, 1, tzinfo=UTC)})
    assert moved.valid_from == datetime(2025, 6, 1, tzinfo=UTC) and moved.status == "active"
    assert (await mem.update(SCOPE, Fact, old.id, {"importance": 0.2})).importance == 0.2  # its other fields stay the user's


async def test_a_patch_of_a_lifecycle_field_is_a_422_naming_the_operation_and_changes_nothing(mem, snapshot):
    app = create_app(ServeConfig(memory=mem, admin_key=ADMIN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://memos") as http:
        r = await http.post("/admin/keys", json={"user_id": "alice"}, headers={"Authorization": f"Bearer {ADMIN}"})
        alice = {"Authorization": f"Bearer {r.json()['token']}"}
        [old, new] = [(await http.post("/v1/stores/semantic", json={"subject": "alice", "summary": s}, headers=alice)).json()
                      for s in ("Alice lives in Lisbon", "Alice lives in Porto")]
        before = await snapshot(mem)
        for changes in ({"status": "active"}, {"superseded_by": new["id"]}, {"source_ids": [new["id"]]},
                        {"valid_to": "2026-01-01T00:00:00Z"}):
            r = await http.patch(f"/v1/stores/semantic/{old['id']}", json=changes, headers=alice)
            assert r.status_code == 422, r.text
            error = r.json()["error"]
            assert error["type"] == "invalid_record" and f"cannot change {sorted(changes)}" in error["message"]
            assert "supersede" in error["message"], error
        assert await snapshot(mem) == before
        assert (await http.get(f"/v1/stores/semantic/{old['id']}", headers=alice)).json()["status"] == "active"


@pytest.mark.parametrize("changes", [{"valid_to": "2026-01-01T00:00:00Z"}, {"status": "superseded"},
                                     {"superseded_by": "0" * 32}, {"source_ids": ["forged-source"]}],
                         ids=["valid_to", "status", "superseded_by", "source_ids"])
async def test_a_models_update_of_a_lifecycle_field_is_sent_back_to_use_supersede_and_writes_nothing(mem, snapshot, changes):
    [lisbon, tea] = await mem.add(Scope("alice", "bot"), [Fact(subject="Alice", summary="Alice lives in Lisbon"),
                                                          Fact(subject="Alice", summary="Alice likes tea")])
    session = await mem.session(SCOPE)
    turn = await session.record_turn("user", "I moved to Porto, and I drink green tea now")
    ending = {"kind": "update", "store": "semantic", "record_id": lisbon.id, "changes": changes}
    detail = {"kind": "update", "store": "semantic", "record_id": tea.id, "changes": {"summary": "Alice likes green tea"}}
    before = await snapshot(mem)
    with pytest.raises(UnexpectedModelBehavior):  # a model that never fixes it: nothing of the plan is stored
        await MemoryManager(mem, SCOPE, Script(*[plan(ending, detail)] * 4).model).run([turn])
    assert await snapshot(mem) == before

    fixed = plan({"kind": "supersede", "store": "semantic", "record_id": lisbon.id,
                  "fields": {"subject": "Alice", "summary": "Alice lives in Porto"}}, detail)
    script = Script(plan(ending, detail), fixed)
    report = await MemoryManager(mem, SCOPE, script.model).run([turn])
    feedback = str([getattr(p, "content", "") for p in script.requests[1][-1].parts])
    assert f"action 0 (update): an update cannot change {sorted(changes)}" in feedback and "use a supersede action" in feedback
    assert "action 1" not in feedback and report.requests == 2
    old = await mem.get(Scope("alice", "bot"), Fact, lisbon.id)
    [porto] = [f for f in await mem.list(Scope("alice"), Fact) if f.summary == "Alice lives in Porto"]
    assert old.status == "superseded" and old.superseded_by == porto.id and old.valid_to == porto.valid_from
    assert "forged-source" not in old.source_ids and [e.op for e in await mem.history(Scope("alice", "bot"), lisbon.id)] == [
        "add", "supersede"]
    green = await mem.get(Scope("alice", "bot"), Fact, tea.id)  # the manager's own update still adds the turn as provenance
    assert green.summary == "Alice likes green tea" and green.source_ids == [turn.id]
