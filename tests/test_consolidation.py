"""Consolidation: planted duplicates merge (with links, never deleted), contradictions supersede."""

from __future__ import annotations

import re
from datetime import timedelta

from memos.memtypes import Episode, Fact, Procedure
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos.jobs.consolidation import fact_key, normalize_text, plan_consolidation
from memos.jobs.runs import consolidate


async def test_duplicates_merge_and_contradiction_supersedes_with_present_and_past_answers(mem, clock, alice, bob):
    start = clock()
    berlin = Fact(subject="Alice", summary="Alice lives in Berlin", source_ids=["m0"], importance=0.6)
    await mem.add(alice, berlin)
    tea = [
        Fact(subject="Alice", summary="Alice likes green tea", importance=0.4, source_ids=["m1"], tags=["drinks"]),
        Fact(subject="Alice", summary="alice likes green tea!", importance=0.9, source_ids=["m2"]),
        Fact(subject="Alice", summary="Alice really likes green tea.", importance=0.5, source_ids=["m3"]),
    ]
    chess = Fact(subject="Alice", summary="Alice plays chess on Sundays", source_ids=["m4"])
    steps = [Procedure(summary="Brew green tea", steps=["boil water", "wait 2 minutes"], source_ids=[s]) for s in ("m5", "m6")]
    turn = dict(actor="alice", summary="good morning", occurred_at=start)
    episodes = [Episode(**turn), Episode(**turn), Episode(actor="alice", summary="good morning", occurred_at=start + timedelta(days=1))]
    await mem.add(alice, [*tea, chess, *steps, *episodes])
    bob_tea = await mem.add(bob, [Fact(subject="Bob", summary="Bob likes green tea"), Fact(subject="Bob", summary="Bob likes green tea")])
    clock.advance(days=40)
    lisbon = (await mem.add(alice, Fact(subject="Alice", summary="Alice moved to Lisbon", source_ids=["m9"])))[0]
    clock.advance(days=1)

    sched = mem.scheduler(mode="manual")
    sched.add("consolidate", alice, every=timedelta(hours=1))
    clock.advance(hours=1)
    [result] = sched.run_due()
    assert result["errors"] == [] and result["merged"] == 4 and result["superseded"] == 1, result

    # the tea facts: one survivor with the best importance and the union of provenance
    facts = {f.id: f for f in await mem.list(alice, "semantic", status=None, limit=None)}
    survivor = facts[tea[1].id]
    assert survivor.status == "active" and survivor.importance == 0.9
    assert set(survivor.source_ids) == {"m1", "m2", "m3"} and "drinks" in survivor.tags
    for other in (tea[0], tea[2]):
        assert facts[other.id].status == "archived" and facts[other.id].superseded_by == survivor.id  # linked, not deleted
    assert facts[chess.id].status == "active"
    # procedures and double-ingested turns merge too; the same words on another day do not
    procs = await mem.list(alice, "procedural", status=None)
    assert sorted(p.status for p in procs) == ["active", "archived"]
    eps = {e.id: e for e in await mem.list(alice, "episodic", status=None)}
    assert [eps[e.id].status for e in episodes].count("archived") == 1 and eps[episodes[2].id].status == "active"
    # the other user's duplicates are not this job's business
    assert [f.status for f in await mem.list(bob, "semantic", status=None)] == ["active", "active"] and bob_tea

    # the contradiction: Berlin closed when Lisbon began, and linked to it
    old = facts[berlin.id]
    assert old.status == "superseded" and old.superseded_by == lisbon.id and old.valid_to == lisbon.created_at
    assert facts[lisbon.id].valid_from == lisbon.created_at
    present = {h.id for h in await mem.search("where does Alice live?", alice, types=["semantic"], k=10)}
    assert lisbon.id in present and berlin.id not in present
    past = {h.id for h in await mem.search("where does Alice live?", alice, types=["semantic"], k=10, until=start + timedelta(days=10))}
    assert berlin.id in past and lisbon.id not in past
    history_ops = [h.op for h in await mem.history(alice, berlin.id)]
    assert history_ops == ["add", "supersede"]

    # a second run finds nothing more to do
    clock.advance(hours=1)
    [again] = sched.run_due()
    assert again["merged"] == 0 and again["superseded"] == 0
    sched.shutdown()


_PAIR = re.compile(r"old \[([0-9a-f]{32})\].*?\n\s*new \[([0-9a-f]{32})\] \(since [^)]*\) (.*)")


async def test_model_decides_supersede_where_the_heuristic_cannot(mem, clock, alice):
    shown: list[str] = []
    target: dict[str, str] = {}

    def decide(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
        shown.append(text)
        decisions = [{"old_id": o, "new_id": n, "action": "supersede" if (o, n) == (target["old"], target["new"]) else "add",
                      "reason": "job changed"} for o, n, _ in _PAIR.findall(text)]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"decisions": decisions})])

    acme = (await mem.add(alice, Fact(subject="Alice", summary="Alice is an engineer at Acme")))[0]
    hobby = (await mem.add(alice, Fact(subject="Alice", summary="Alice paints watercolours")))[0]
    clock.advance(days=3)
    freelance = (await mem.add(alice, Fact(subject="Alice", summary="Alice quit and became a freelancer")))[0]
    target.update(old=acme.id, new=freelance.id)
    assert fact_key(acme) is None or fact_key(acme)[:2] != fact_key(freelance)[:2]  # invisible to the heuristic

    result = await consolidate(mem, alice, types=["semantic"])
    assert result["superseded"] == 0
    result = await consolidate(mem, alice, model=FunctionModel(decide), types=["semantic"])
    assert result["mode"] == "model" and result["superseded"] == 1 and result["merged"] == 0, result
    assert acme.id in shown[0] and freelance.id in shown[0]
    facts = {f.id: f for f in await mem.list(alice, "semantic", status=None)}
    assert facts[acme.id].superseded_by == freelance.id and facts[acme.id].status == "superseded"
    assert facts[hobby.id].status == "active" and facts[hobby.id].superseded_by is None  # "add": both stay
    assert len(_PAIR.findall(shown[0])) == 3  # every pair of facts about Alice was shown
    assert facts[freelance.id].status == "active"


def test_planning_is_pure_and_conservative():
    a = Fact(subject="Alice", summary="Alice lives in Berlin")
    b = Fact(subject="Alice", summary="Alice lives in Berlin.")
    c = Fact(subject="Alice", summary="Alice's favourite colour is blue")
    d = Fact(subject="Alice", summary="Alice is tall")
    assert normalize_text("Alice's  TEA!") == "alice's tea"
    assert fact_key(c) == ("alice", "favourite colour", "blue") and fact_key(d) is None
    plan = plan_consolidation("semantic", [a, b, c, d])
    assert [m.merged_ids for m in plan.merges] and plan.supersedes == []
    assert plan.counts() == {"merged": 1, "superseded": 0}


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["tea", "Tea!", "coffee", "chess", "lives in Rome", "lives in Oslo"]),
                          st.floats(0, 1)), min_size=0, max_size=25))
def test_merge_plans_never_lose_or_double_a_record(items):
    records = [Fact(subject="alice", summary=text, importance=imp, source_ids=[f"m{i}"]) for i, (text, imp) in enumerate(items)]
    plan = plan_consolidation("semantic", records)
    touched = [m.survivor_id for m in plan.merges] + [i for m in plan.merges for i in m.merged_ids]
    assert len(touched) == len(set(touched))  # each record in at most one group, once
    by_id = {r.id: r for r in records}
    for merge in plan.merges:
        group = [by_id[merge.survivor_id], *(by_id[i] for i in merge.merged_ids)]
        assert len({normalize_text(r.summary) for r in group}) == 1
        assert merge.importance == max(r.importance for r in group) == by_id[merge.survivor_id].importance
        assert set(merge.source_ids) == {s for r in group for s in r.source_ids}
    # every distinct text keeps exactly one active record; contradictions chain old -> new
    survivors = {normalize_text(r.summary) for r in records if r.id not in {i for m in plan.merges for i in m.merged_ids}}
    assert survivors == {normalize_text(r.summary) for r in records}
    for sup in plan.supersedes:
        assert fact_key(by_id[sup.old_id])[:2] == fact_key(by_id[sup.new_id])[:2] == ("alice", "lives in")


def test_a_fact_restated_later_wins_over_what_it_was_merged_with(clock):
    t0 = clock()
    rome1 = Fact(subject="alice", summary="lives in Rome", importance=0.9, created_at=t0)
    oslo = Fact(subject="alice", summary="lives in Oslo", created_at=t0 + timedelta(days=1))
    rome2 = Fact(subject="alice", summary="lives in Rome", importance=0.1, created_at=t0 + timedelta(days=2))
    plan = plan_consolidation("semantic", [rome1, oslo, rome2])
    assert [(m.survivor_id, m.merged_ids) for m in plan.merges] == [(rome1.id, (rome2.id,))]
    [sup] = plan.supersedes
    assert (sup.old_id, sup.new_id, sup.valid_to) == (oslo.id, rome1.id, t0 + timedelta(days=2))
