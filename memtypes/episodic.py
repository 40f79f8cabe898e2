"""Episodic memory: time-stamped events, including every raw conversation turn (the recall log)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from .base import MemoryRecord, utcnow

__all__ = ["Episode", "TurnLines"]


class TurnLines:
    """How a record said at a time renders: `[day Mon YYYY] who: text`, grouped under its day
    (a turn, and the passages of a long one). The record gives `render_parts()` -> (who, text)."""

    if TYPE_CHECKING:
        occurred_at: datetime

        def render_parts(self) -> tuple[str, str]: ...

    def render(self) -> str:
        return f"[{self.render_group()}] {self.render_line()}"

    def render_group(self) -> str:
        return f"{self.occurred_at.day} {self.occurred_at:%b %Y}"

    def render_line(self) -> str:
        who, said = self.render_parts()
        return f"{who}: {said}" if who else said


class Episode(TurnLines, MemoryRecord):
    """Something that happened at a time: a message, an action, an observation."""

    memory_type: ClassVar[str] = "episodic"
    description: ClassVar[str] = "Time-stamped events and experiences: what happened, when, who was involved."
    time_field: ClassVar[str] = "occurred_at"
    holds_turns: ClassVar[bool] = True
    consolidate: ClassVar[bool] = True
    decays: ClassVar[bool] = True

    occurred_at: datetime = Field(default_factory=utcnow, description="When it happened.")
    actor: str = Field(default="", max_length=256, description="Who did or said it.")
    event_type: str = Field(default="event", max_length=64, description="message, action, observation, ...")
    summary: str = Field(default="", description="The event in one line; for a message, its text.")
    details: str = Field(default="", description="Longer description, attachments' captions.")
    context: str = Field(default="", max_length=2_000,
                         description="The turn this one follows (what a reply answers): found by keyword, not rendered.")

    def index_text(self) -> str:
        head = f"{self.actor}: {self.summary}" if self.actor else self.summary
        return f"{head} {self.details}".strip()

    def context_text(self) -> str:
        return self.context

    def duplicate_key(self) -> tuple[Any, ...]:
        return (self.actor, self.event_time())  # a double-ingested turn, not two moments alike

    def render_parts(self) -> tuple[str, str]:
        extra = f" ({self.details})" if self.details else ""
        return self.actor, f"{self.summary}{extra}"
