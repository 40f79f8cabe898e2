"""The memory manager and consolidation speak one merge / supersede vocabulary (`memos.jobs.merging`)
and leave the same records behind: links, status, tags, validity and history ops."""

from __future__ import annotations

from datetime import timedelta

from memos.memtypes import Fact
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from memos import Scope

SCOPE = Scope("alice", "bot", "s1")


def left_behind(record) -> tuple:
    return record.status, bool(record.superseded_by), "merged" in record.tags, record.valid_to is not None


async def last_op(mem, scope, record_id) -> str:
    return (await mem.history(scope, record_id))[-1].op


async def test_manager_and_consolidation_leave_the_same_merged_and_superseded_records(mem, clock):
    a1, a2, old = await mem.add(SCOPE, [Fact(subject="Alice", summary="Alice likes jazz"),
                                        Fact(subject="Alice", summary="Alice enjoys jazz music"),
                                        Fact(subject="Alice", summary="Alice lives in Porto")])
    plan = [{"kind": "merge", "store": "semantic", "record_ids": [a1.id, a2.id], "fields": {"subject": "Alice", "summary": "Alice loves jazz"}},
            {"kind": "supersede", "store": "semantic", "record_id": old.id, "fields": {"subject": "Alice", "summary": "Alice lives in Lisbon"}}]
    manager = FunctionModel(lambda messages, info: ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": plan})]))
    agent = mem.agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")])), SCOPE, manager_model=manager, background=False)
    await agent.chat("I moved to Lisbon, and I love jazz.")
    by_manager = {r.id: r for r in await mem.list(Scope("alice"), "semantic", status=None)}

    b1, b2 = await mem.add(Scope("bob"), [Fact(subject="Bob", summary="Bob likes jazz"), Fact(subject="Bob", summary="Bob likes jazz")])
    clock.advance(days=1)
    [b3] = await mem.add(Scope("bob"), [Fact(subject="Bob", summary="Bob lives in Porto")])
    [b4] = await mem.add(Scope("bob"), [Fact(subject="Bob", summary="Bob lives in Lisbon", valid_from=clock() + timedelta(hours=1))])
    sched = mem.scheduler(mode="manual")
    sched.add("consolidate", Scope("bob"), every=timedelta(days=1))
    clock.advance(days=1)
    [result] = sched.run_due()
    sched.shutdown()
    assert result["merged"] == 1 and result["superseded"] == 1, result
    by_jobs = {r.id: r for r in await mem.list(Scope("bob"), "semantic", status=None)}

    manager_merged = [by_manager[a1.id], by_manager[a2.id]]
    jobs_merged = [r for r in by_jobs.values() if r.status == "archived"]
    assert len(jobs_merged) == 1
    assert {left_behind(r) for r in manager_merged} == {left_behind(r) for r in jobs_merged} == {("archived", True, True, False)}
    assert all(by_manager[r.superseded_by].status == "active" for r in manager_merged)
    assert left_behind(by_manager[old.id]) == left_behind(by_jobs[b3.id]) == ("superseded", True, False, True)
    assert by_jobs[b3.id].superseded_by == b4.id and by_manager[by_manager[old.id].superseded_by].status == "active"
    assert {await last_op(mem, Scope("alice"), a1.id), await last_op(mem, Scope("bob"), jobs_merged[0].id)} == {"merge"}
    assert {await last_op(mem, Scope("alice"), old.id), await last_op(mem, Scope("bob"), b3.id)} == {"supersede"}
