"""The reflection agent: reads recent episodes, writes cited insights (facts and procedures).

Structured output (`Reflection`); an insight that cites an id it was not shown, or a fact
without a subject, goes back to the model as a `ModelRetry` naming the valid ids. The job that
calls it (`memos.jobs.runs.reflect`) decides when to reflect and stores what comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, Literal

from memos.memtypes import MemoryRecord
from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRetry, RunContext

from memos import prompts

__all__ = ["Insight", "Reflection", "build_reflection_agent", "reflect_on", "render_prompt"]

def render_prompt(name: str, **values: Any) -> str:
    """Render `prompts/<name>` through the one prompt environment (user overrides honoured)."""
    return prompts.render(name, **values)


class Insight(BaseModel):
    """One thing learned from several episodes."""

    kind: Literal["fact", "procedure"] = Field(description="fact: durable knowledge; procedure: how to do something.")
    subject: str = Field(default="", description="Who or what a fact is about (required for facts).")
    summary: str = Field(min_length=1, description="The insight in one sentence.")
    steps: list[str] = Field(default_factory=list, description="A procedure's steps, in order.")
    importance: float = Field(default=0.6, ge=0.0, le=1.0, description="How much it matters, 0-1.")
    source_ids: list[str] = Field(min_length=1, description="Ids of the episodes this insight is based on.")


class Reflection(BaseModel):
    """What one reflection produced."""

    insights: list[Insight] = Field(default_factory=list)


class _Deps(BaseModel):
    shown_ids: frozenset[str]


@cache
def build_reflection_agent() -> Agent[_Deps, Reflection]:
    """The reflection agent (model given per run)."""
    agent: Agent[_Deps, Reflection] = Agent(output_type=Reflection, deps_type=_Deps, retries=2)

    @agent.output_validator
    def _cited(ctx: RunContext[_Deps], output: Reflection) -> Reflection:
        for n, insight in enumerate(output.insights, 1):
            unknown = [i for i in insight.source_ids if i not in ctx.deps.shown_ids]
            if unknown:
                raise ModelRetry(f"insight {n} cites ids that were not shown: {unknown}; "
                                 f"cite only these: {sorted(ctx.deps.shown_ids)}")
            if insight.kind == "fact" and not insight.subject.strip():
                raise ModelRetry(f"insight {n} is a fact without a subject; say who or what it is about")
            if insight.kind == "procedure" and not insight.steps:
                raise ModelRetry(f"insight {n} is a procedure without steps; list them in order")
        return output

    return agent


async def reflect_on(model: Any, episodes: Sequence[MemoryRecord], *, now: datetime, max_insights: int = 5) -> list[Insight]:
    """Run the reflection agent over `episodes`; returns its validated, cited insights."""
    if not episodes:
        return []
    agent = build_reflection_agent()
    result = await agent.run(
        render_prompt("reflection_episodes.j2", episodes=list(episodes)),
        model=model,
        instructions=render_prompt("reflection.j2", now=now.strftime("%Y-%m-%d %H:%M %Z"), max_insights=max_insights),
        deps=_Deps(shown_ids=frozenset(e.id for e in episodes)),
    )
    return list(result.output.insights[:max_insights])
