"""A memory-manager batch whose run fails is kept, retried with backoff, and visible in the job history."""

from __future__ import annotations

from datetime import timedelta

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos import MemoryOS, Scope
from memos.jobs.runs import job_history
from memos.portability import forget_user

SCOPE = Scope("alice", "bot", "s1")


class FlakyManager:
    """Fails its first `failures` requests (a provider outage), then stores one fact per batch."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests = 0

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.requests += 1
        if self.requests <= self.failures:
            raise ConnectionError("provider unavailable")
        text = " ".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
        summary = "Alice plays the cello" if "I play the cello" in text else "Alice said something"
        action = {"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": summary}}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": [action]})])


def reply(messages, info) -> ModelResponse:
    return ModelResponse(parts=[TextPart("nice")])


async def test_a_failing_manager_run_then_a_succeeding_one_stores_the_first_batchs_facts(mem, clock):
    manager = FlakyManager(failures=1)
    agent = mem.agent(FunctionModel(reply), SCOPE, manager_model=FunctionModel(manager), background=False)
    await agent.chat("I play the cello every evening.")  # the manager's run fails: the batch is kept
    assert await mem.list(Scope("alice"), "semantic") == []
    [kept] = agent.manager_batches
    assert kept.attempts == 1 and "provider unavailable" in kept.error and kept.retry_at == clock() + timedelta(seconds=30)

    await agent.chat("How are you?")  # within the backoff: the failed batch waits, the new one is stored
    assert len(agent.manager_batches) == 1
    clock.advance(seconds=31)
    await agent.chat("Thanks!")  # backoff passed: the first batch is offered again and stored
    assert agent.manager_batches == []
    facts = await mem.list(Scope("alice"), "semantic")
    cello = [f for f in facts if f.summary == "Alice plays the cello"]
    assert len(cello) == 1 and set(cello[0].source_ids) == {t.id for t in kept.turns}

    runs = [r for r in await job_history(mem, Scope("alice"), kind="manage")]
    assert [r["note"] for r in runs] == ["failed, will retry", "ok"]
    assert runs[0]["errors"] == ["ConnectionError: provider unavailable"] and runs[0]["turns"] == 2
    assert runs[1]["attempts"] == 2 and runs[1]["written"] == 1


async def test_a_batch_is_given_up_after_bounded_attempts_and_kept_batches_survive_a_restart(db_path, embedder, clock, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    agent = mem.agent(FunctionModel(reply), SCOPE, manager_model=FunctionModel(FlakyManager(failures=99)),
                      background=False, manager_attempts=2)
    await agent.chat("I play the cello every evening.")
    assert agent.manager_batches[0].attempts == 1

    reopened = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    manager = FlakyManager(failures=0)
    again = reopened.agent(FunctionModel(reply), SCOPE, manager_model=FunctionModel(manager), background=False)
    await again.session()
    assert [len(b.turns) for b in again.manager_batches] == [2]  # the failed batch came back with the store
    await again.flush()
    assert [f.summary for f in await reopened.list(Scope("alice"), "semantic")] == ["Alice plays the cello"]

    await agent.manage(retry_now=True)  # the first process's copy fails a second time: given up (bounded)
    assert agent.manager_batches == []
    notes = [r["note"] for r in await job_history(mem, Scope("alice"), kind="manage")]
    assert notes[-1] == "gave up"


async def test_a_kept_batch_of_a_user_forgotten_since_is_dropped_not_stored(mem, clock):
    """Its turns were erased with the user: a retry drawing memories from them afterwards would
    bring the user back (it did: the fact was stored after the forget)."""
    agent = mem.agent(FunctionModel(reply), SCOPE, manager_model=FunctionModel(FlakyManager(failures=1)), background=False)
    await agent.chat("I play the cello every evening.")  # the manager's run fails: the batch is kept
    assert len(agent.manager_batches) == 1
    await forget_user(mem, "alice")
    clock.advance(seconds=31)
    assert await agent.manage(retry_now=True) is None and agent.manager_batches == []
    assert await mem.list(Scope("alice"), "semantic") == [] and await mem.raw_history(Scope("alice")) == []
