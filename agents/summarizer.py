"""A model-backed summarizer for paging: folds evicted turns into the running summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memos.memtypes import Episode
from pydantic_ai import Agent
from pydantic_ai.usage import UsageLimits

from memos import prompts

__all__ = ["ModelSummarizer"]


class ModelSummarizer:
    """`Summarizer` (see `memos.context.paging`) that asks a model; the summary stays under `max_words`."""

    def __init__(self, model: Any, *, max_words: int = 250) -> None:
        self.max_words = max_words
        self.agent: Agent[None, str] = Agent(model, output_type=str, name="summarizer")

    async def __call__(self, previous: str, evicted: Sequence[Episode]) -> str:
        result = await self.agent.run(
            prompts.render("summary_input.j2", previous=previous, turns=[t.render() for t in evicted]),
            instructions=prompts.render("summary.j2", max_words=self.max_words),
            usage_limits=UsageLimits(request_limit=2),
        )
        words = result.output.split()
        return " ".join(words[: self.max_words * 2])  # a runaway model cannot flood the context
