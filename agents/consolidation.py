"""The consolidation agent: decides add / update / supersede / nothing for pairs of facts.

Used by `memos.jobs.runs.consolidate` when a model is configured; without one the kernel's
conservative heuristic (`memos.jobs.consolidation.plan_contradictions`) decides instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Literal

from memos.memtypes import MemoryRecord
from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.models import Model

from .reflection import render_prompt

__all__ = ["ConsolidationDecisions", "FactDecision", "build_consolidation_agent", "decide_conflicts"]


class FactDecision(BaseModel):
    """What to do with one pair of facts about the same subject."""

    old_id: str = Field(description="The older fact's id, as shown.")
    new_id: str = Field(description="The newer fact's id, as shown.")
    action: Literal["add", "update", "supersede", "nothing"]
    reason: str = Field(default="", description="One short sentence why.")


class ConsolidationDecisions(BaseModel):
    """One decision per pair shown."""

    decisions: list[FactDecision] = Field(default_factory=list)


class _Deps(BaseModel):
    pairs: frozenset[tuple[str, str]]


@cache
def build_consolidation_agent() -> Agent[_Deps, ConsolidationDecisions]:
    """The consolidation agent (model given per run)."""
    agent: Agent[_Deps, ConsolidationDecisions] = Agent(output_type=ConsolidationDecisions, deps_type=_Deps, retries=2)

    @agent.output_validator
    def _known_pairs(ctx: RunContext[_Deps], output: ConsolidationDecisions) -> ConsolidationDecisions:
        bad = [(d.old_id, d.new_id) for d in output.decisions if (d.old_id, d.new_id) not in ctx.deps.pairs]
        if bad:
            raise ModelRetry(f"these (old_id, new_id) pairs were not shown: {bad}; use the ids of the pairs exactly as shown")
        return output

    return agent


async def decide_conflicts(model: Model | str, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], *, now: datetime) -> list[FactDecision]:
    """Ask the model about each (older, newer) pair of facts; returns its decisions."""
    if not pairs:
        return []
    result = await build_consolidation_agent().run(
        render_prompt("consolidation_pairs.j2", pairs=list(pairs)),
        model=model,
        instructions=render_prompt("consolidation.j2", now=now.strftime("%Y-%m-%d")),
        deps=_Deps(pairs=frozenset((a.id, b.id) for a, b in pairs)),
    )
    return list(result.output.decisions)
