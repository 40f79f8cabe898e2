"""Passages: the parts of a long conversation turn, each embedded and indexed on its own.

A long turn (an assistant's essay) is one record of the recall log, but a question is usually
about one part of it: a budgeted search that could only pack the whole turn paid for all of it,
and the turn's one vector (its encoder reads the first few hundred words) said little of its tail.
Its passages are derived records: each names its turn (`turn_id`), carries the turn's speaker,
time, scope and provenance (`source_ids`), and renders under the turn's date like the turn.
They are written with the turn (`memos.passages`), rebuilt when it is updated, follow its status,
are deleted with it, and are never written by a model. Opt-in: `MemoryOS.open(..., types=[Passage])`.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from .base import MemoryRecord, utcnow
from .episodic import TurnLines

__all__ = ["ELLIPSIS", "Passage"]

ELLIPSIS = "…"
"""Marks where a passage's text continues in its turn (before it, after it)."""


class Passage(TurnLines, MemoryRecord):
    """One part of a long conversation turn (see the module docstring)."""

    memory_type: ClassVar[str] = "passage"
    description: ClassVar[str] = "Parts of long conversation turns (derived from the recall log; not written directly)."
    time_field: ClassVar[str] = "occurred_at"
    searched_by_default: ClassVar[bool] = False
    """A budgeted search of the turns reaches them (`memos.retrieval.passages`); a top-k search returns whole turns."""
    model_writable: ClassVar[bool] = False

    turn_id: str = Field(default="", max_length=64, description="The id of the turn this passage is part of.")
    position: int = Field(default=0, ge=0, description="Its place among the turn's passages, 0 first.")
    last: bool = Field(default=True, description="Whether the turn ends with this passage.")
    occurred_at: datetime = Field(default_factory=utcnow, description="The turn's time.")
    actor: str = Field(default="", max_length=256, description="Who said the turn.")
    summary: str = Field(default="", description="The passage's text, as the turn said it.")

    def index_text(self) -> str:
        return f"{self.actor}: {self.summary}" if self.actor else self.summary

    def render_parts(self) -> tuple[str, str]:
        before = ELLIPSIS if self.position else ""
        after = "" if self.last else ELLIPSIS
        return self.actor, f"{before}{self.summary}{after}"
