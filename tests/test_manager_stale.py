"""A memory-manager plan whose records changed while the model answered is not applied at all."""

from __future__ import annotations

import pytest
from memos.agents.manager import MemoryManager
from memos.memtypes import Episode, Fact
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos import Scope
from memos.exceptions import RecordChangedError

SCOPE = Scope("alice", "bot", "s1")
OWNER = Scope("alice", "bot")


async def test_a_plan_whose_record_was_superseded_after_its_check_writes_nothing(mem):
    [oslo] = await mem.add(OWNER, Fact(subject="Alice", summary="Alice lives in Oslo"))
    [turn] = await mem.add(SCOPE, Episode(actor="alice", event_type="message", summary="I moved to Bergen and I love fjords."))

    def plan(messages, info: AgentInfo) -> ModelResponse:
        actions = [{"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": "Alice loves fjords"}},
                   {"kind": "supersede", "store": "semantic", "record_id": oslo.id,
                    "fields": {"subject": "Alice", "summary": "Alice lives in Bergen"}}]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": actions})])

    manager = MemoryManager(mem, SCOPE, FunctionModel(plan))

    @manager.agent.output_validator
    async def meanwhile(output):  # after the plan's check: the user's own agent supersedes the same record
        await mem.supersede(OWNER, "semantic", oslo.id, Fact(subject="Alice", summary="Alice lives in Stavanger"))
        return output

    with pytest.raises(RecordChangedError):
        await manager.run([turn])
    facts = await mem.list(Scope("alice"), "semantic", status=None)
    assert sorted(f.summary for f in facts) == ["Alice lives in Oslo", "Alice lives in Stavanger"]  # not the fjords, nor Bergen
    [current] = [f for f in facts if f.status == "active"]
    assert current.summary == "Alice lives in Stavanger" and (await mem.get(OWNER, "semantic", oslo.id)).superseded_by == current.id
