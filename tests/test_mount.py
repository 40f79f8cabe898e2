"""Mounting memos on a builder's own agent: the tools it chooses, the vault's approval flow,
the turns a run records and the memory manager run on them."""

from __future__ import annotations

import asyncio

import pytest
from memos.agents import memory_capability
from memos.memtypes import Fact, VaultItem
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memos import Scope
from memos.exceptions import ConfigError
from memos.portability import forget_user

SCOPE = Scope("alice", "helper", "s1")
PROMPT = "When is my flight to Oslo?"
READ_TOOLS = {"memory_search", "conversation_search", "entity_lookup"}
VAULT_TOOLS = {"vault_store", "vault_reveal"}
WRITE_TOOLS = READ_TOOLS | {"core_memory_append", "core_memory_replace", "core_memory_rethink", "memory_insert",
                            "relation_add", "relation_close"}


def answer(text: str) -> FunctionModel:
    return FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(text)]))


async def exposed(mem, **options) -> set[str]:
    """The tool names a model is offered under `memory_capability(**options)`."""
    model = TestModel(call_tools=[])
    await Agent(model, capabilities=[await memory_capability(mem, SCOPE, **options)]).run("hello")
    assert model.last_model_request_parameters is not None
    return {t.name for t in model.last_model_request_parameters.function_tools}


async def test_a_test_model_agent_with_the_default_mount_runs_and_sees_no_vault(mem):
    model = TestModel()  # calls every tool it is offered
    agent = Agent(model, capabilities=[await memory_capability(mem, SCOPE)])
    result = await agent.run(PROMPT)
    assert "memory_search" in result.output
    assert model.last_model_request_parameters is not None
    offered = {t.name for t in model.last_model_request_parameters.function_tools}
    assert offered == READ_TOOLS and not offered & VAULT_TOOLS


async def test_the_builder_chooses_the_tools(mem):
    assert await exposed(mem, tools="read") == READ_TOOLS
    assert await exposed(mem, tools="write") == WRITE_TOOLS
    assert await exposed(mem, tools="all") == WRITE_TOOLS
    assert await exposed(mem, tools="all", vault=True) == WRITE_TOOLS | VAULT_TOOLS
    assert await exposed(mem, tools={"memory_search", "vault_store"}, vault=True) == {"memory_search", "vault_store"}
    with pytest.raises(ConfigError, match="unknown memory tool.*'memory_serch'.*memory_search"):
        await memory_capability(mem, SCOPE, tools={"memory_serch"})
    with pytest.raises(ConfigError, match="unknown tools preset 'everything'.*'read', 'write'"):
        await memory_capability(mem, SCOPE, tools="everything")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="vault=True"):
        await memory_capability(mem, SCOPE, tools={"vault_reveal"})


async def test_a_vault_reveal_is_decided_by_approve_inside_the_run(mem):
    secret = "hunter2-XQ7"
    [item] = await mem.add(Scope("alice", "helper"), VaultItem(caption="Alice's email password", secret=secret, entry_type="credential"))

    def reveal(messages, info: AgentInfo) -> ModelResponse:
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart(f"result: {returned[0].content}")])
        return ModelResponse(parts=[ToolCallPart("vault_reveal", {"item_id": item.id})])

    denied = Agent(FunctionModel(reveal), capabilities=[await memory_capability(mem, SCOPE, vault=True)])
    result = await denied.run("What is my email password?")  # plain str output: no DeferredToolRequests needed
    assert secret not in result.output and "did not approve" in result.output

    approved = Agent(FunctionModel(reveal), capabilities=[
        await memory_capability(mem, SCOPE, vault=True, approve=lambda call: call.tool_name == "vault_reveal")])
    assert secret in (await approved.run("What is my email password?")).output
    stored = " ".join(t.summary for t in await mem.list(SCOPE, "episodic"))
    assert "[revealed vault secret]" in stored and secret not in stored


async def test_a_run_records_the_prompt_and_the_reply(mem):
    agent = Agent(answer("It leaves on 3 March at 07:40."), capabilities=[await memory_capability(mem, SCOPE)])
    await agent.run(PROMPT)
    await agent.run("Thanks!")
    turns = [(t.actor, t.summary) for t in await mem.list(SCOPE, "episodic")]
    assert sorted(turns) == sorted([("user", PROMPT), ("agent", "It leaves on 3 March at 07:40."),
                                    ("user", "Thanks!"), ("agent", "It leaves on 3 March at 07:40.")])


def plan(messages, info: AgentInfo) -> ModelResponse:
    """A scripted memory manager: one fact from the turns it was shown."""
    fact = {"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": "Alice flies to Oslo on 3 March"}}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": [fact]})])


async def test_a_mounted_manager_keeps_what_the_recorded_turns_say(mem):
    capability = await memory_capability(mem, SCOPE, manager=FunctionModel(plan))
    result = await Agent(answer("On 3 March at 07:40."), capabilities=[capability]).run(PROMPT)
    assert result.output == "On 3 March at 07:40."
    turns = await mem.list(SCOPE, "episodic")
    [fact] = await mem.list(Scope("alice"), "semantic")
    assert isinstance(fact, Fact) and fact.summary == "Alice flies to Oslo on 3 March"
    assert sorted(fact.source_ids) == sorted(t.id for t in turns) and len(turns) == 2


async def test_forgetting_the_user_waits_for_a_mounted_managers_run_and_erases_what_it_wrote(mem):
    started, go = asyncio.Event(), asyncio.Event()

    async def slow_plan(messages, info: AgentInfo) -> ModelResponse:
        started.set()
        await go.wait()  # the manager's model is slow: the user is forgotten meanwhile
        return plan(messages, info)

    capability = await memory_capability(mem, SCOPE, manager=FunctionModel(slow_plan))
    run = asyncio.create_task(Agent(answer("On 3 March at 07:40."), capabilities=[capability]).run(PROMPT))
    await asyncio.wait_for(started.wait(), 30)
    forget = asyncio.create_task(forget_user(mem, "alice"))
    await asyncio.sleep(0.3)
    assert not forget.done()  # it waits for the manager's run (the user's job lock)
    go.set()
    await asyncio.wait_for(asyncio.gather(run, forget), 60)
    assert await mem.list(Scope("alice"), "semantic") == [] and await mem.list(SCOPE, "episodic") == []


async def test_a_failing_manager_does_not_break_the_run(mem, caplog):
    def broken(messages, info: AgentInfo) -> ModelResponse:
        raise RuntimeError("manager model is down")

    capability = await memory_capability(mem, SCOPE, manager=FunctionModel(broken))
    result = await Agent(answer("On 3 March."), capabilities=[capability]).run(PROMPT)
    assert result.output == "On 3 March."
    assert await mem.list(Scope("alice"), "semantic") == []
    assert "manager model is down" in caplog.text
    [job] = [e for e in await mem.history(SCOPE) if e.op == "job"]
    assert job.note == "failed" and job.after is not None and "manager model is down" in job.after["errors"][0]
    assert len(await mem.list(SCOPE, "episodic")) == 2
    with pytest.raises(ConfigError, match="record_turns"):
        await memory_capability(mem, SCOPE, manager=FunctionModel(plan), record_turns=False)
