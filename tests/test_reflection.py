"""Reflection: fires when accumulated importance reaches the threshold (not before), writes cited insights."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

from memos.agents.reflection import render_prompt
from memos.memtypes import Episode, Fact, Procedure
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos import MemoryOS, Scope
from memos.jobs.runs import ReflectionPolicy, reflection_state, run_job, should_reflect
from memos.portability import forget_user

_ID = re.compile(r"\[([0-9a-f]{32})\]")


class ScriptedReflector:
    """A FunctionModel function: cites ids it was shown (first attempt cites a bogus one if asked to)."""

    def __init__(self, bogus_first: bool = False) -> None:
        self.calls = 0
        self.prompts: list[str] = []
        self.bogus_first = bogus_first

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        text = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
        self.prompts.append(text)
        ids = _ID.findall(text)
        cite = ["f" * 32] if self.bogus_first and self.calls == 1 else ids[:3]
        insights = [
            {"kind": "fact", "subject": "alice", "summary": "Alice is training for a marathon", "importance": 0.8,
             "source_ids": cite},
            {"kind": "procedure", "summary": "Plan alice's long runs", "steps": ["check weather", "pack gel"],
             "source_ids": ids[-2:]},
        ]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"insights": insights})])


async def _episodes(mem, scope, n, importance=0.5):
    await mem.add(scope, [Episode(actor="alice", summary=f"ran {k + 3} km this morning", importance=importance) for k in range(n)])


async def test_reflection_fires_at_threshold_not_before_and_cites_sources(mem, clock, alice):
    script = ScriptedReflector()
    sched = mem.scheduler(model=FunctionModel(script), mode="manual")
    sched.add("reflect", alice, every=timedelta(minutes=5))  # default threshold 15.0 = GA's 150 on 1-10

    await _episodes(mem, alice, 29)  # 29 x 0.5 = 14.5 < 15
    clock.advance(minutes=5)
    [below] = sched.run_due()
    assert below["importance"] == 14.5 and "below threshold" in below["skipped"]
    assert script.calls == 0 and (await mem.counts(alice))["semantic"] == 0

    await _episodes(mem, alice, 1)  # 15.0: reaches the threshold
    clock.advance(minutes=5)
    [fired] = sched.run_due()
    assert fired["insights"] == 2 and fired["facts"] == 1 and fired["procedures"] == 1, fired
    assert script.calls == 1
    episode_ids = {e.id for e in await mem.list(alice, "episodic", limit=None)}
    [fact] = await mem.list(alice, "semantic")
    [proc] = await mem.list(alice, "procedural")
    assert isinstance(fact, Fact) and fact.summary == "Alice is training for a marathon" and "reflection" in fact.tags
    assert isinstance(proc, Procedure) and proc.steps == ["check weather", "pack gel"]
    for record in (fact, proc):
        assert record.source_ids and set(record.source_ids) <= episode_ids
    assert len(_ID.findall(script.prompts[0])) == 30  # the model saw the 30 new episodes
    history = await mem.history(alice, fact.id)
    assert history[0].actor == "reflection"
    assert (await reflection_state(mem, alice))["last_at"] == clock()

    # the counter restarts after a reflection: a few new episodes do not fire it again
    clock.advance(minutes=1)
    await _episodes(mem, alice, 4, importance=1.0)
    clock.advance(minutes=5)
    [after] = sched.run_due()
    assert after["importance"] == 4.0 and "skipped" in after and script.calls == 1
    sched.shutdown()


async def test_raw_mode_skips_reflection_and_says_so(mem, clock, alice):
    sched = mem.scheduler(mode="manual")  # no model
    sched.add("reflect", alice, every=timedelta(minutes=5))
    await _episodes(mem, alice, 40, importance=1.0)
    clock.advance(minutes=5)
    [result] = sched.run_due()
    assert result["skipped"].startswith("raw mode") and result["errors"] == []
    assert (await mem.counts(alice))["semantic"] == 0
    sched.shutdown()


async def test_uncited_insight_goes_back_to_the_model(mem, clock, alice):
    from memos.jobs.runs import reflect

    script = ScriptedReflector(bogus_first=True)
    await _episodes(mem, alice, 3)
    clock.advance(minutes=1)
    result = await reflect(mem, alice, model=FunctionModel(script), force=True)
    assert script.calls == 2 and "were not shown" in script.prompts[1]
    [fact] = await mem.list(alice, "semantic")
    assert "f" * 32 not in fact.source_ids and result["insights"] == 2


def test_trigger_is_debounced_and_has_an_interval(clock):
    policy = ReflectionPolicy(threshold=15.0, interval=timedelta(hours=24), debounce=timedelta(minutes=10))
    now = clock()
    assert should_reflect(20.0, 5, now - timedelta(minutes=3), now, policy)[0] is False  # debounced
    assert should_reflect(20.0, 5, now - timedelta(minutes=30), now, policy)[0] is True
    assert should_reflect(1.0, 2, now - timedelta(hours=25), now, policy)[0] is True  # interval
    assert should_reflect(1.0, 2, now - timedelta(hours=2), now, policy)[0] is False
    assert should_reflect(99.0, 0, None, now, policy)[0] is False  # nothing new


def test_prompt_templates_take_exactly_what_the_code_passes(clock):
    import jinja2.meta

    from memos import prompts

    _env = prompts.environment

    passed = {"reflection.j2": {"now", "max_insights"}, "reflection_episodes.j2": {"episodes"},
              "consolidation.j2": {"now"}, "consolidation_pairs.j2": {"pairs"}}
    for name, variables in passed.items():
        source = _env().loader.get_source(_env(), name)[0]
        assert jinja2.meta.find_undeclared_variables(_env().parse(source)) == variables, name
    episode = Episode(actor="alice", summary="hi")
    text = render_prompt("reflection_episodes.j2", episodes=[episode])
    assert episode.id in text and "hi" in text
    assert "2026" in render_prompt("reflection.j2", now="2026-01-15", max_insights=3)


async def test_a_failing_job_records_its_error_in_history(mem, clock, alice):
    from memos.jobs.runs import job_history

    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"insights": [{"kind": "poem"}]})])

    sched = mem.scheduler(model=FunctionModel(broken), mode="manual")
    sched.add("reflect", alice, every=timedelta(minutes=5), options={"force": True})
    await _episodes(mem, alice, 2)
    clock.advance(minutes=5)
    [result] = sched.run_due()
    assert result["errors"] and "UnexpectedModelBehavior" in result["errors"][0]
    [run] = await job_history(mem, alice, kind="reflect")
    assert run["note"] == "failed" and run["errors"] == result["errors"]
    assert (await mem.counts(alice))["semantic"] == 0
    sched.shutdown()


async def test_two_reflections_at_once_through_two_opens_write_the_insights_once(mem, db_path, embedder, clock, vault_key, alice):
    """The scheduler in one process and `memos worker` (or a run by hand) in another: each run of
    a kind for a scope waits for the one under way, then starts from what it wrote."""
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    await _episodes(mem, alice, 30)
    first, second = ScriptedReflector(), ScriptedReflector()
    outcomes = await asyncio.gather(run_job(mem, "reflect", alice, model=FunctionModel(first)),
                                    run_job(other, "reflect", alice, model=FunctionModel(second)))
    assert sorted(o.get("insights", 0) for o in outcomes) == [0, 2] and first.calls + second.calls == 1, outcomes
    assert len(await mem.list(alice, "semantic")) == 1 and len(await other.list(alice, "procedural")) == 1


async def test_a_reflection_waiting_for_its_model_while_the_user_is_forgotten_leaves_nothing(mem, db_path, embedder, clock, vault_key,
                                                                                            alice):
    """Its insights are drawn from the user's episodes: written after the forget, they outlived it."""
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    await _episodes(mem, alice, 30)
    script, asked = ScriptedReflector(), asyncio.Event()

    async def slow_model(messages, info):
        asked.set()
        await asyncio.sleep(0.5)  # the forget comes in while the model thinks
        return script(messages, info)

    async def forget() -> dict[str, int]:
        await asked.wait()
        return await forget_user(other, alice.user_id)

    outcome, _ = await asyncio.gather(run_job(mem, "reflect", alice, model=FunctionModel(slow_model)), forget())
    assert outcome["insights"] == 2  # written before the forget, then forgotten with the rest
    for memory in (mem, other):
        assert set((await memory.counts(Scope(alice.user_id))).values()) == {0}
    assert await mem.raw_history(Scope(alice.user_id)) == []
