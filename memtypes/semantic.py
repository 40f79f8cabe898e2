"""Semantic memory: facts and concepts about entities, with validity over time."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from .base import MemoryRecord

__all__ = ["Fact"]


class Fact(MemoryRecord):
    """A fact or concept about an entity. Contradictions supersede it rather than delete it."""

    memory_type: ClassVar[str] = "semantic"
    description: ClassVar[str] = "Facts and knowledge about people, things and concepts, independent of when learned."
    time_field: ClassVar[str] = "created_at"
    consolidate: ClassVar[bool] = True
    merge_near_duplicates: ClassVar[bool] = True
    supersede_contradictions: ClassVar[bool] = True
    decays: ClassVar[bool] = True

    subject: str = Field(min_length=1, max_length=256, description="The entity the fact is about.")
    summary: str = Field(min_length=1, description="The fact in one sentence.")
    details: str = Field(default="", description="Supporting detail.")
    source: str = Field(default="", max_length=256, description="Where the fact came from.")

    def index_text(self) -> str:
        return f"{self.subject}: {self.summary} {self.details}".strip()

    def render(self) -> str:
        until = f" (until {self.valid_to.day} {self.valid_to:%b %Y})" if self.valid_to else ""
        return f"{self.subject}: {self.summary}{until}"
