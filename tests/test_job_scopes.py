"""Background jobs act within one exact scope: the user, agent and session a record was stored with.

A job run for a whole user (`memos consolidate --user alice`) reads all of the user's agents and
sessions, but it merges, supersedes, archives, links and reflects only among records whose three
ids are equal: another agent's copy of a fact, or the same words in another session, is never a
duplicate, a contradiction or evidence.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memos.memtypes import Episode, Fact
from memos.memtypes.entity import Entity
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.cli import app
from memos.exceptions import InvalidRecordError
from memos.jobs.consolidation import plan_consolidation
from memos.jobs.decay import DecayPolicy, plan_decay
from memos.jobs.runs import run_job

runner = CliRunner()


def test_consolidating_a_user_keeps_each_agents_own_copy(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db = str(tmp_path / "db")

    def cli(*args: str) -> Any:
        out = runner.invoke(app, [*args, "--db", db])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout) if "--json" in args else out

    def hits(agent: str) -> list[str]:
        return [h["text"] for h in cli("search", "peanuts", "--user", "alice", "--agent", agent, "--json")]

    for agent in ("travel", "chef"):
        cli("add", "Alice is allergic to peanuts", "--user", "alice", "--agent", agent)
    assert cli("consolidate", "--user", "alice", "--json")["merged"] == 0
    for agent in ("travel", "chef"):
        [text] = hits(agent)
        assert text.endswith("Alice is allergic to peanuts")
    # a real duplicate inside one agent's scope still merges, and only there
    cli("add", "Alice is allergic to peanuts", "--user", "alice", "--agent", "chef")
    assert cli("consolidate", "--user", "alice", "--json")["merged"] == 1
    assert len(hits("chef")) == 1 and len(hits("travel")) == 1


def test_the_plan_relates_records_of_one_exact_scope_only():
    def fact(agent: str, session: str, summary: str) -> Fact:
        return Fact(subject="Alice", summary=summary, user_id="alice", agent_id=agent, session_id=session)

    copies = [fact("travel", "", "Alice is allergic to peanuts"), fact("chef", "", "Alice is allergic to peanuts"),
              fact("chef", "s1", "Alice is allergic to peanuts"), fact("", "", "Alice is allergic to peanuts")]
    homes = [fact("travel", "", "Alice lives in Lisbon"), fact("chef", "", "Alice lives in Porto")]
    assert plan_consolidation("semantic", [*copies, *homes]).empty
    twice = fact("chef", "s1", "alice is allergic to peanuts!")
    moved = fact("chef", "", "Alice moved to Faro").model_copy(update={"created_at": homes[1].created_at + timedelta(days=1)})
    plan = plan_consolidation("semantic", [*copies, *homes, twice, moved])
    [merge] = plan.merges
    assert {merge.survivor_id, *merge.merged_ids} == {copies[2].id, twice.id}
    [sup] = plan.supersedes
    assert (sup.old_id, sup.new_id) == (homes[1].id, moved.id)


async def test_entities_of_two_agents_do_not_merge(mem, clock):
    travel, chef = Scope("alice", "travel", ""), Scope("alice", "chef", "")
    [a] = await mem.add(travel, Entity(name="Alice", kind="person"))
    [b] = await mem.add(chef, Entity(name="Alice", kind="person"))
    before = await mem.history(Scope("alice"))
    with pytest.raises(InvalidRecordError, match="only entities of one user, agent and session merge"):
        await mem.graph.merge_entities(Scope("alice"), a.id, [b.id])
    assert await mem.history(Scope("alice")) == before
    assert (await mem.graph.consolidate(Scope("alice")))["entities_merged"] == 0


# --- the property: random multi-agent, multi-session stores, every job --------------------------

USERS = ("alice", "bob")
AGENTS = ("travel", "chef", "")
SESSIONS = ("", "s1")
SCOPES = [Scope(u, a, s) for u in USERS for a in AGENTS for s in SESSIONS]
BASE = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

# (store, family) -> variants. Two records of one family in one scope are duplicates or
# contradict each other (or, in the graph, a duplicate entity or a closed relation); records of
# different families never are. The same family in two scopes must change nothing.
KINDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("fact", "peanuts"): ("Alice is allergic to peanuts", "Alice is allergic to peanuts!"),
    ("fact", "lives in"): ("Alice lives in Lisbon", "Alice lives in Porto"),
    ("fact", "car"): ("Alice drives a red car", "alice drives a red car."),
    ("fact", "bakery"): ("Alice works at the bakery",),
    ("episode", "run"): ("ran 5 km along the river",),
    ("episode", "risotto"): ("cooked a mushroom risotto",),
    ("graph", "relation"): ("Lisbon", "Porto"),
    ("graph", "entity"): ("Alice",),
}
KIND_KEYS = sorted(KINDS)
FAMILY_WORDS = {"peanuts": "peanuts", "lives in": "lives in", "car": "red car", "bakery": "bakery"}
_ID = re.compile(r"\[([0-9a-f]{32})\]")
_PAIR = re.compile(r"old \[(\w{32})\]([^\n]*)\n\s*new \[(\w{32})\]([^\n]*)")


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Both background agents: reflection cites every episode it was shown; conflict judgement
    supersedes a pair of facts of one family and keeps any other pair."""
    prompt = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
    tool = info.output_tools[0]
    if "decisions" in tool.parameters_json_schema.get("properties", {}):
        decisions = []
        for old_id, old, new_id, new in _PAIR.findall(prompt):
            same = any(word in old.lower() and word in new.lower() for word in FAMILY_WORDS.values())
            decisions.append({"old_id": old_id, "new_id": new_id, "action": "supersede" if same else "add", "reason": "scripted"})
        return ModelResponse(parts=[ToolCallPart(tool.name, {"decisions": decisions})])
    ids = list(dict.fromkeys(_ID.findall(prompt)))
    insights = [{"kind": "fact", "subject": "Alice", "summary": "Alice keeps active", "importance": 0.7, "source_ids": ids},
                {"kind": "procedure", "summary": "Plan Alice's week", "steps": ["run", "cook"], "source_ids": ids[:1]}]
    return ModelResponse(parts=[ToolCallPart(tool.name, {"insights": insights})])


item = st.tuples(
    st.integers(0, len(KIND_KEYS) - 1),                               # store and family
    st.integers(0, 1),                                                 # variant
    st.lists(st.integers(0, len(SCOPES) - 1), min_size=1, max_size=3),  # the scopes it is stored in (repeats: in-scope copies)
    st.sampled_from([0, 60, 400]),                                     # age in days
    st.sampled_from([0.05, 0.9]),                                      # importance
)


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["user_id"], row["agent_id"], row["session_id"]


def _rows(mem: MemoryOS) -> dict[tuple[str, str], dict[str, Any]]:
    return {(name, r["id"]): r for name in mem.type_names for r in run_sync(mem.storage.rows(name, None))}


def _store(mem: MemoryOS, clock: Any, items: list[tuple[int, int, list[int], int, float]]) -> dict[tuple[str, str, str], list[str]]:
    """Write the items; returns the families each exact scope holds (one entry per record)."""
    families: dict[tuple[str, str, str], list[str]] = {}
    for n, (kind, variant, scopes, age, importance) in enumerate(items):
        store, family = KIND_KEYS[kind]
        text = KINDS[store, family][variant % len(KINDS[store, family])]
        for scope in (SCOPES[i] for i in scopes):
            clock.now = BASE - timedelta(days=age)
            stamp = scope.stamp()
            families.setdefault((stamp["user_id"], stamp["agent_id"], stamp["session_id"]), []).append(
                "graph" if store == "graph" else f"{store}:{family}")
            marks = {"importance": importance, "source_ids": [f"src-{n}-{scope}"], "tags": [f"from:{scope}"]}
            if store == "fact":
                mem.add_sync(scope, Fact(subject="Alice", summary=text, **marks))
            elif store == "episode":
                mem.add_sync(scope, Episode(actor="alice", summary=text, occurred_at=BASE - timedelta(days=1000), **marks))
            elif family == "relation":
                run_sync(mem.graph.add_relation(scope, "Alice", "lives in", text, source_ids=marks["source_ids"]))
            else:
                mem.add_sync(scope, Entity(name=text, kind="person", first_seen=clock.now, last_seen=clock.now, **marks))
    clock.now = BASE
    return families


def _decays_alone(mem: MemoryOS, name: str, row: dict[str, Any]) -> bool:
    record = mem.storage.type_table(name).to_record(row)
    return bool(plan_decay([record], BASE, DecayPolicy()))


def _run(mem: MemoryOS, kind: str, scopes: list[Scope], **kw: Any) -> None:
    for scope in scopes:
        outcome = run_sync(run_job(mem, kind, scope, **kw))
        assert outcome["errors"] == [], outcome


@settings(max_examples=18, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(items=st.lists(item, min_size=2, max_size=7), width=st.sampled_from(["user", "agent"]), with_model=st.booleans())
def test_no_job_changes_a_record_because_of_another_scope(tmp_path_factory, embedder, clock, items, width, with_model):
    mem = MemoryOS.open_sync(tmp_path_factory.mktemp("jobs"), embedder=embedder, clock=clock)
    families = _store(mem, clock, items)
    clean = {scope for scope, found in families.items() if len(found) == len(set(found))}
    jobs = [Scope(u) for u in USERS] if width == "user" else [Scope(u, a) for u in USERS for a in AGENTS]
    model = FunctionModel(scripted) if with_model else None

    before, history_before = _rows(mem), {e.id for e in mem.history_sync(Scope("alice")) + mem.history_sync(Scope("bob"))}
    _run(mem, "consolidate", jobs, model=model)
    _run(mem, "decay", jobs)
    _run(mem, "maintain", jobs[:1])
    after = _rows(mem)
    assert after.keys() == before.keys()

    in_scope: dict[tuple[str, tuple[str, str, str]], dict[str, set[str]]] = {}
    for (name, _), row in before.items():
        pool = in_scope.setdefault((name, _key(row)), {"source_ids": set(), "tags": {"merged"}, "mentions": set(), "ids": set()})
        for field in ("source_ids", "tags", "mentions"):
            pool[field].update(row.get(field) or [])
        pool["ids"].add(row["id"])
    for (name, record_id), row in after.items():
        old = before[name, record_id]
        if row.get("superseded_by"):  # a survivor or successor: always of the record's own scope
            assert _key(after[name, row["superseded_by"]]) == _key(row), (name, row)
        for end in ("subject_id", "object_id"):  # a relation points at entities of its own scope
            if row.get(end):
                assert _key(after["entity", row[end]]) == _key(row), (name, row)
        if row == old:
            continue
        pool = in_scope[name, _key(row)]
        for field in ("source_ids", "tags", "mentions"):  # what a survivor gained came from its own scope
            assert set(row.get(field) or []) <= pool[field], (name, field, row)
        if _key(row) in clean:  # nothing to merge or supersede in its scope: only its own decay changed it
            assert _decays_alone(mem, name, old) and row["status"] == "archived", (name, old, row)
            assert {k: v for k, v in row.items() if k not in ("status", "updated_at")} == \
                   {k: v for k, v in old.items() if k not in ("status", "updated_at")}
    new_history = [e for e in mem.history_sync(Scope("alice")) + mem.history_sync(Scope("bob"))
                   if e.id not in history_before and e.op != "job"]
    for entry in new_history:  # each change is written down in the scope of the record it changed
        [row] = [r for (name, i), r in after.items() if i == entry.record_id]
        assert (entry.user_id, entry.agent_id, entry.session_id) == _key(row)
        if (entry.user_id, entry.agent_id, entry.session_id) in clean:
            assert entry.op == "archive", entry

    # reflection: one per exact scope, each insight written in (and citing only) its episodes' scope
    _run(mem, "reflect", jobs, model=FunctionModel(scripted), options={"force": True})
    reflected = _rows(mem)
    assert {k: reflected[k] for k in after} == after  # reflection only adds
    insights = [r for k, r in reflected.items() if k not in after]
    for insight in insights:
        cited = [after["episodic", i] for i in insight["source_ids"]]
        assert cited and all(_key(e) == _key(insight) for e in cited), insight
    with_episodes = {_key(r) for (name, _), r in after.items() if name == "episodic" and r["status"] == "active"}
    assert {_key(r) for r in insights} == with_episodes
