"""Procedural memory: how to do things (workflows, guides, scripts)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import MemoryRecord

__all__ = ["Procedure"]


class Procedure(MemoryRecord):
    """A how-to: the steps of a workflow, a guide or a script."""

    memory_type: ClassVar[str] = "procedural"
    description: ClassVar[str] = "How-to knowledge: workflows, step-by-step guides, scripts."
    consolidate: ClassVar[bool] = True
    merge_near_duplicates: ClassVar[bool] = True
    decays: ClassVar[bool] = True

    entry_type: Literal["workflow", "guide", "script"] = Field(default="workflow", description="Kind of procedure.")
    summary: str = Field(min_length=1, description="What the procedure achieves.")
    steps: list[str] = Field(default_factory=list, description="The steps in order.")

    def index_text(self) -> str:
        return f"{self.summary} " + " ".join(self.steps)

    def render(self) -> str:
        steps = "; ".join(f"{i}. {s}" for i, s in enumerate(self.steps, 1))
        return f"{self.entry_type} '{self.summary}': {steps}" if steps else f"{self.entry_type} '{self.summary}'"
