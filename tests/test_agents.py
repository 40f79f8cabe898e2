"""The chat agent and the memory manager, driven by scripted FunctionModels (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _scripted import Script, plan
from memos.agents import MemoryManager, memory_capability
from memos.memtypes import Fact
from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from memos import MemoryOS, Scope

SCOPE = Scope("alice", "bot", "s1")


def tool(name, **args):
    return ModelResponse(parts=[ToolCallPart(name, args)])


def last_tool_result(messages) -> str:
    parts = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart | RetryPromptPart)]
    return str(parts[-1].content)


async def test_the_hot_path_is_one_chat_request_per_turn_and_the_manager_one_per_batch(mem):
    chat, manager = Script(*["fine"] * 6), Script(*[plan({"kind": "nothing", "reason": "small talk"})] * 3)
    agent = mem.agent(chat.model, SCOPE, manager_model=manager.model, manage_every=2, budget=2000)
    for i in range(6):
        await agent.chat(f"hello number {i}")
        assert agent.last.requests == 1
    await agent.flush()
    assert len(chat.requests) == 6
    assert len(manager.requests) == 3 and all(r.requests == 1 for r in agent.manager_reports)
    assert sum(r.turns for r in agent.manager_reports) == 12


async def test_the_chat_model_sees_the_compiled_context_and_recent_turns(mem):
    await mem.add(Scope("alice", "bot", "s0"), Fact(subject="Alice", summary="Alice's cat is named Pixel"))
    seen = {}

    def reply(messages, info):
        seen["instructions"], seen["messages"] = info.instructions, messages
        return ModelResponse(parts=[TextPart("Pixel!")])

    agent = mem.agent(Script("first", reply).model, SCOPE, budget=2000)
    await agent.chat("Good morning")
    await agent.chat("What is my cat called?")
    assert "Alice's cat is named Pixel" in seen["instructions"] and "<core_memory>" in seen["instructions"]
    texts = [getattr(p, "content", "") for m in seen["messages"] for p in m.parts]
    assert "Good morning" in texts and "first" in texts and "What is my cat called?" in texts


async def test_manager_writes_land_in_the_right_stores_with_provenance(mem):
    manager = Script(plan(
        {"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": "Alice runs marathons"}},
        {"kind": "insert", "store": "procedural", "fields": {"summary": "Alice's pre-race routine", "steps": ["sleep 8h", "oats"]}},
        {"kind": "insert", "store": "episodic", "fields": {"summary": "Alice ran the Berlin marathon", "actor": "alice"}},
    ))
    agent = mem.agent(Script("great").model, SCOPE, manager_model=manager.model, background=False)
    await agent.chat("I ran the Berlin marathon! Before races I sleep 8h and eat oats.")
    turn_ids = {t.id for t in (await agent.session()).context}
    [report] = agent.manager_reports
    assert [(a, s) for a, s, _ in report.written] == [("insert", "semantic"), ("insert", "procedural"), ("insert", "episodic")]
    fact = (await mem.list(Scope("alice"), "semantic"))[0]
    assert fact.summary == "Alice runs marathons" and set(fact.source_ids) == turn_ids
    proc = (await mem.list(Scope("alice"), "procedural"))[0]
    assert proc.steps == ["sleep 8h", "oats"] and set(proc.source_ids) == turn_ids
    assert {e.actor for e in await mem.history(Scope("alice")) if e.record_id in {fact.id, proc.id}} == {"memory_manager"}


async def test_manager_supersede_and_merge_link_the_old_records(mem):
    old, dup1, dup2 = await mem.add(SCOPE, [Fact(subject="Alice", summary="Alice lives in Porto"),
                                            Fact(subject="Alice", summary="Alice likes jazz"),
                                            Fact(subject="Alice", summary="Alice enjoys jazz music")])
    manager = Script(plan(
        {"kind": "supersede", "store": "semantic", "record_id": old.id, "fields": {"subject": "Alice", "summary": "Alice lives in Lisbon"}},
        {"kind": "merge", "store": "semantic", "record_ids": [dup1.id, dup2.id], "fields": {"subject": "Alice", "summary": "Alice loves jazz"}},
    ))
    agent = mem.agent(Script("ok").model, SCOPE, manager_model=manager.model, background=False)
    await agent.chat("I moved to Lisbon last month.")
    active = {f.summary for f in await mem.list(Scope("alice"), "semantic")}
    assert active == {"Alice lives in Lisbon", "Alice loves jazz"}
    old_now = await mem.get(Scope("alice"), "semantic", old.id)
    assert old_now.status == "superseded" and old_now.valid_to is not None and old_now.superseded_by
    merged = await mem.get(Scope("alice"), "semantic", (await mem.get(Scope("alice"), "semantic", dup1.id)).superseded_by)
    assert {dup1.id, dup2.id} <= set(merged.source_ids)


async def test_a_bad_plan_goes_back_to_the_model_and_writes_nothing_until_fixed(mem, snapshot):
    bad = plan({"kind": "insert", "store": "semantic", "fields": {"subject": "A", "summary": "ok"}},
               {"kind": "update", "store": "semantic", "record_id": "doesnotexist", "changes": {"summary": "x"}},
               {"kind": "insert", "store": "recipes", "fields": {}})
    manager = MemoryManager(mem, SCOPE, Script(bad, bad, bad, bad).model)
    session = await mem.session(SCOPE)
    turn = await session.record_turn("user", "hello")
    before = await snapshot(mem)
    with pytest.raises(UnexpectedModelBehavior):
        await manager.run([turn])
    assert await snapshot(mem) == before
    script = Script(bad, plan({"kind": "nothing"}))
    report = await MemoryManager(mem, SCOPE, script.model).run([turn])
    assert report.requests == 2 and report.written == []
    feedback = str([getattr(p, "content", "") for p in script.requests[1][-1].parts])
    assert "action 1 (update)" in feedback and "doesnotexist" in feedback and "action 2 (insert): unknown store 'recipes'" in feedback
    assert "action 0" not in feedback


MISUSE = [
    ("core_memory_append", {"label": "nope", "text": "x"}, "no core block 'nope'"),
    ("core_memory_append", {"label": "human", "text": "x" * 2500}, "limit is 2,000"),
    ("core_memory_append", {"label": "human", "text": "   "}, "empty"),
    ("core_memory_replace", {"label": "human", "old": "absent text", "new": "y"}, "is not in block"),
    ("core_memory_rethink", {"label": "persona", "new_value": "z" * 3000}, "limit"),
    ("memory_search", {"query": "tea", "stores": ["recipes"]}, "unknown store"),
    ("memory_search", {"query": "tea", "since": "last tuesday"}, "not a date"),
    ("memory_search", {"query": "tea", "k": 500}, "k must be"),
    ("memory_search", {"query": "  "}, "query is empty"),
    ("conversation_search", {"until": "2024-13-45"}, "not a date"),
    ("memory_insert", {"store": "recipes", "fields": {"x": 1}}, "unknown store"),
    ("memory_insert", {"store": "semantic", "fields": {"subject": "A", "colour": "red"}}, "unknown fields"),
    ("memory_insert", {"store": "semantic", "fields": {"subject": "A", "summary": "s", "importance": 7}}, "importance"),
    ("memory_insert", {"store": "core", "fields": {"label": "x"}}, "core_memory_append"),
    ("memory_insert", {"store": "semantic", "fields": {"subject": "A", "user_id": "bob"}}, "unknown fields"),
    ("vault_store", {"caption": "my pin 4321", "secret": "4321"}, "must not contain the secret"),
    ("vault_store", {"caption": "bank pin", "secret": ""}, "secret is empty"),
]


@pytest.mark.parametrize("name, args, message", MISUSE, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISUSE)])
async def test_tool_misuse_is_a_model_retry_and_changes_nothing(mem, snapshot, name, args, message):
    chat = Script("hi", tool(name, **args), lambda messages, info: ModelResponse(parts=[TextPart(last_tool_result(messages))]))
    agent = mem.agent(chat.model, SCOPE)
    await agent.chat("warm up")  # creates the default blocks and the session
    session = await agent.session()
    before = await snapshot(mem)
    reply = await agent.chat("do the thing")
    assert message in reply
    after = await snapshot(mem)
    for store in mem.type_names:
        if store != "episodic":
            assert after[store] == before[store], store
    new_turns = [r for r in after["episodic"] if r["id"] not in {b["id"] for b in before["episodic"]}]
    assert len(new_turns) == 2  # only the user turn and the reply were recorded
    assert session.context[-1].summary == reply


async def test_core_edits_by_tool_survive_a_reopen(db_path, embedder, clock, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    chat = Script(tool("core_memory_append", label="human", text="Prefers to be called Ali"), "noted")
    await mem.agent(chat.model, SCOPE).chat("Call me Ali please")
    again = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    seen = {}

    def reply(messages, info):
        seen["instructions"] = info.instructions
        return ModelResponse(parts=[TextPart("Hi Ali")])

    agent = again.agent(Script(reply).model, SCOPE)
    await agent.chat("Hi, it's me again")
    assert "Prefers to be called Ali" in seen["instructions"]
    assert [t.summary for t in agent.last.context.recent_turns][:2] == ["Call me Ali please", "noted"]  # resumed


async def test_mounting_memory_on_a_plain_user_agent_reads_and_writes(mem):
    await mem.add(Scope("alice", "helper", "s0"), Fact(subject="Alice", summary="Alice's flight to Oslo leaves on 3 March"))
    seen = {}

    def model(messages, info):
        if "flight" in str(messages[-1].parts[-1].content if hasattr(messages[-1].parts[-1], "content") else ""):
            seen["instructions"] = info.instructions
            return tool("memory_insert", store="semantic", fields={"subject": "Alice", "summary": "Alice wants a window seat"})
        return ModelResponse(parts=[TextPart("saved")])

    capability = await memory_capability(mem, Scope("alice", "helper", "s1"), tools="write")
    user_agent = Agent(FunctionModel(model), capabilities=[capability], instructions="You are Alice's travel helper.")
    result = await user_agent.run("When is my flight? Also I want a window seat.")
    assert result.output == "saved"
    assert "flight to Oslo leaves on 3 March" in seen["instructions"]
    assert "You are Alice's travel helper." in seen["instructions"]
    facts = {f.summary for f in await mem.list(Scope("alice"), "semantic")}
    assert "Alice wants a window seat" in facts
    turns = await mem.list(Scope("alice", "helper", "s1"), "episodic")
    assert sorted(t.summary for t in turns) == ["When is my flight? Also I want a window seat.", "saved"]


async def test_vault_reveal_needs_approval_and_never_leaks_otherwise(mem, tmp_path):
    secret = "hunter2-XQ7"
    store = Script(tool("vault_store", caption="Alice's email password", secret=secret, entry_type="credential"), "stored it")
    agent = mem.agent(store.model, SCOPE)
    await agent.chat(f"Please keep my email password safe: {secret}")
    [item] = await mem.list(Scope("alice"), "vault")
    assert item.secret == "" and item.caption == "Alice's email password"

    def ask_reveal(messages, info):
        return tool("vault_reveal", item_id=item.id)

    def answer(messages, info):
        return ModelResponse(parts=[TextPart("result: " + last_tool_result(messages))])

    denied = mem.agent(Script(ask_reveal, answer).model, SCOPE)
    reply = await denied.chat("What is my email password?")
    assert secret not in reply and "did not approve" in reply
    assert secret not in denied.last.context.system_prompt

    asked = []
    approved = mem.agent(Script(ask_reveal, answer).model, SCOPE, approve=lambda call: asked.append(call.args) or True)
    reply = await approved.chat("What is my email password? I approve.")
    assert secret in reply and asked == [{"item_id": item.id}]
    reveals = [e for e in await mem.history(Scope("alice")) if e.op == "reveal"]
    assert len(reveals) == 1 and secret not in str(reveals[0])
    # the turn that said the secret was scrubbed when the vault item was stored... by the tool's provenance
    turns = [t.summary for t in await mem.list(Scope("alice"), "episodic", limit=None)]
    assert not any(secret in t for t in turns if t.startswith("Please keep"))
    files = [p for p in Path(mem.storage.uri).rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret.encode() in p.read_bytes()]
    assert any("[revealed vault secret]" in t for t in turns)  # the reply was shown, not stored


def _sees(script: Script) -> str:
    """Everything a scripted model was sent, as one text."""
    return "\n".join(str(getattr(part, "content", "")) for request in script.requests for m in request for part in m.parts)


async def test_a_secret_vaulted_during_a_turn_never_reaches_the_memory_manager(mem):
    """The chat agent kept the turns it had recorded for the manager as they were before the
    vault took the secret out of them, and the manager's prompt showed them in clear."""
    secret = "kR4-vault-991"
    chat = Script(tool("vault_store", caption="Alice's gym locker code", secret=secret, entry_type="credential"), "stored it")
    manager = Script(plan({"kind": "nothing"}))
    agent = mem.agent(chat.model, SCOPE, manager_model=manager.model, manage_every=1, background=False)
    await agent.chat(f"My gym locker code is {secret}, please keep it")
    assert manager.requests and "gym locker code is [vault item" in _sees(manager)
    assert secret not in _sees(manager)


async def test_a_secret_vaulted_a_turn_after_it_was_said_is_scrubbed_from_that_turn(mem):
    """The vault took the secret out of the turn the tool was called in only; said one turn
    before, it stayed in that turn's text, its index and the manager's prompt."""
    secret = "tq-5521-0098"
    chat = Script("ok, noted", tool("vault_store", caption="Alice's locker code", secret=secret), "stored it")
    manager = Script(plan({"kind": "nothing"}), plan({"kind": "nothing"}))
    agent = mem.agent(chat.model, SCOPE, manager_model=manager.model, manage_every=2, background=False)
    await agent.chat(f"the locker code is {secret}")
    await agent.chat("please put that code in the vault")
    await mem.storage.flush_queued()
    turns = await mem.list(Scope("alice"), "episodic", limit=None)
    assert len(turns) == 4 and not [t.summary for t in turns if secret in t.summary + t.text]
    hits = await mem.search(secret, Scope("alice"), types=["episodic"])
    assert not [h.record.render() for h in hits if secret in h.record.render() or "text_rank" in h.parts]
    assert not [e for e in await mem.history(Scope("alice")) if secret in str(e)]
    assert secret not in _sees(manager)


async def test_a_plan_is_checked_whole_before_any_of_it_is_applied(mem, snapshot):
    """Only an update's field names were checked: a bad value, a second action on one record, or
    an action on a record superseded already passed, the plan's first actions were applied and
    the bad one failed; the batch's retry then wrote those first actions again."""
    [fact, other] = await mem.add(Scope("alice", "bot"), [Fact(subject="Alice", summary="Alice likes tea"),
                                                           Fact(subject="Alice", summary="Alice has a cat")])
    [gone] = await mem.add(Scope("alice", "bot"), Fact(subject="Alice", summary="Alice lives in Porto"))
    await mem.supersede(Scope("alice", "bot"), "semantic", gone.id, Fact(subject="Alice", summary="Alice lives in Lisbon"))
    session = await mem.session(SCOPE)
    turn = await session.record_turn("user", "I drink green tea now and I got a dog")
    insert = {"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": "Alice has a dog"}}
    bad_plans = {
        "importance": plan(insert, {"kind": "update", "store": "semantic", "record_id": fact.id, "changes": {"importance": 7}}),
        "subject": plan(insert, {"kind": "update", "store": "semantic", "record_id": fact.id, "changes": {"subject": ""}}),
        "valid_to": plan(insert, {"kind": "update", "store": "semantic", "record_id": fact.id,
                                  "changes": {"valid_from": "2026-03-01T00:00:00Z", "valid_to": "2026-01-01T00:00:00Z"}}),
        "more than once": plan(insert, {"kind": "update", "store": "semantic", "record_id": fact.id, "changes": {"summary": "x"}},
                               {"kind": "supersede", "store": "semantic", "record_id": fact.id,
                                "fields": {"subject": "Alice", "summary": "Alice likes green tea"}}),
        "changed by action 1": plan(insert, {"kind": "merge", "store": "semantic", "record_ids": [fact.id, other.id],
                                     "fields": {"subject": "Alice", "summary": "Alice likes tea and cats"}},
                            {"kind": "update", "store": "semantic", "record_id": other.id, "changes": {"summary": "y"}}),
        "superseded": plan(insert, {"kind": "update", "store": "semantic", "record_id": gone.id, "changes": {"summary": "Porto"}}),
        # memory.supersede starts the new record now: an end in the past without a start passed the check and failed on write
        "valid from now": plan(insert, {"kind": "supersede", "store": "semantic", "record_id": fact.id,
                                        "fields": {"subject": "Alice", "summary": "Alice liked tea", "valid_to": "2020-01-01T00:00:00Z"}}),
    }
    before = await snapshot(mem)
    for reason, bad in bad_plans.items():
        with pytest.raises(UnexpectedModelBehavior):  # the model never fixes it: nothing of the plan is stored
            await MemoryManager(mem, SCOPE, Script(bad, bad, bad, bad).model).run([turn])
        assert await snapshot(mem) == before, reason
        script = Script(bad, plan(insert, {"kind": "update", "store": "semantic", "record_id": fact.id,
                                           "changes": {"summary": "Alice likes green tea"}}))
        report = await MemoryManager(mem, SCOPE, script.model).run([turn])
        feedback = str([getattr(p, "content", "") for p in script.requests[1][-1].parts])
        assert report.requests == 2 and reason in feedback, (reason, feedback)
        dogs = [f for f in await mem.list(Scope("alice"), "semantic") if f.summary == "Alice has a dog"]
        assert len(dogs) == 1 and (await mem.get(Scope("alice"), "semantic", fact.id)).summary == "Alice likes green tea"
        for dog in dogs:  # back as it was for the next plan
            await mem.delete(Scope("alice", "bot"), "semantic", dog.id)
        await mem.update(Scope("alice", "bot"), "semantic", fact.id, {"summary": "Alice likes tea"})
        before = await snapshot(mem)


async def test_a_memory_drawn_from_a_turn_that_said_a_secret_loses_it_when_the_secret_is_vaulted(mem):
    """The manager kept a fact from the turn that said the secret before the user asked to vault
    it; the vault scrubbed the turn but left the fact, which holds the same string, as 'the user's
    other data': the secret came back in search, in the manager's prompt and in the chat's context.
    A record not drawn from those turns that holds the same string is still left alone."""
    secret = "tq-5521-0098"
    [other] = await mem.add(Scope("alice", "bot", "s0"), Fact(subject="Gym", summary=f"The gym's wifi password is {secret}"))
    chat = Script("ok, noted", tool("vault_store", caption="Alice's locker code", secret=secret), "stored it", "it is in the vault")
    kept = {"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": f"Alice's locker code is {secret}"}}
    manager = Script(plan(kept), plan({"kind": "nothing"}), plan({"kind": "nothing"}))
    agent = mem.agent(chat.model, SCOPE, manager_model=manager.model, manage_every=1, background=False)
    await agent.chat(f"the locker code is {secret}")
    await agent.chat("please put that code in the vault")
    chat.requests, manager.requests = [], []
    await agent.chat("what is my locker code?")
    await mem.storage.flush_queued()
    facts = {f.subject: f for f in await mem.list(Scope("alice"), "semantic", limit=None)}
    assert facts["Alice"].summary.startswith("Alice's locker code is [vault item") and facts["Gym"].summary == other.summary
    hits = await mem.search(secret, Scope("alice"))
    assert [h.id for h in hits if secret in h.record.render()] == [other.id]
    assert not [e for e in await mem.history(Scope("alice")) if secret in str(e) and e.record_id != other.id]
    assert manager.requests and f"locker code is {secret}" not in _sees(chat) + _sees(manager)


async def test_a_reply_that_repeats_a_secret_it_just_vaulted_is_recorded_without_it(mem):
    """The vault scrubs the turns stored when its tool runs; the reply is recorded after that, so
    one that repeated the secret kept it in clear: in the recall log, its index and history, and
    the next turn's keyword context."""
    secret = "kR4-zq-7781"
    chat = Script(tool("vault_store", caption="Alice's gym locker code", secret=secret), f"Stored {secret} in your vault.", "welcome")
    agent = mem.agent(chat.model, SCOPE)
    assert secret in await agent.chat(f"My gym locker code is {secret}, please keep it")  # shown to the user, as a reveal is
    await agent.chat("thanks")
    await mem.storage.flush_queued()
    [item] = await mem.list(Scope("alice"), "vault")
    turns = [t.model_dump_json() for t in await mem.list(Scope("alice"), "episodic", limit=None)]
    assert len(turns) == 4 and not [t for t in turns if secret in t] and f"Stored [vault item {item.id}] in your vault." in "".join(turns)
    hits = await mem.search(secret, Scope("alice"), types=["episodic"])
    assert not [h.record.render() for h in hits if secret in h.record.render() or "text_rank" in h.parts]
    assert not [e for e in await mem.history(Scope("alice")) if secret in str(e)]
    files = [p for p in Path(mem.storage.uri).rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret.encode() in p.read_bytes()]
