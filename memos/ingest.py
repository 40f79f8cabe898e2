"""Raw-mode ingestion: conversation messages become episodic records, no model involved.

`Message` is the edge model for a turn from any source (a chat API, a JSONL file, LOCOMO);
`episodes_from_messages` is the pure mapping to `Episode` records with provenance.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from memos.store.scope import Scope

from .exceptions import InvalidRecordError
from .memtypes import Episode

__all__ = ["CONTEXT_CHARS", "MAX_MESSAGE_CHARS", "Message", "episodes_from_messages", "turn_context"]

MAX_MESSAGE_CHARS = 100_000
"""A message longer than this is refused (split it, or store it as a resource)."""


class Message(BaseModel):
    """One conversation turn as it arrives."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str | None = Field(default=None, validation_alias=AliasChoices("id", "message_id", "dia_id"))
    """The message's own id, kept as provenance (`source_ids`)."""
    actor: str = Field(default="user", max_length=256, validation_alias=AliasChoices("actor", "speaker", "role", "name"))
    """Who said it."""
    text: str = Field(validation_alias=AliasChoices("text", "content"))
    """What was said."""
    timestamp: datetime | None = Field(default=None, validation_alias=AliasChoices("timestamp", "occurred_at", "time"))
    """When it was said; defaults to the ingestion time."""
    details: str = Field(default="", validation_alias=AliasChoices("details", "blip_caption", "caption"))
    """Attachments described in words (an image caption, a file name)."""
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    tags: list[str] = Field(default_factory=list)

    @field_validator("text")
    @classmethod
    def _bounded(cls, value: str) -> str:
        if len(value) > MAX_MESSAGE_CHARS:
            raise ValueError(
                f"message is {len(value):,} characters; the limit is {MAX_MESSAGE_CHARS:,}. "
                "Split it into several messages or add it to resource memory."
            )
        return value.replace("\x00", "")


CONTEXT_CHARS = 500
"""How much of the previous turn a turn keeps as its keyword context (`Episode.context`)."""


def turn_context(previous: Episode | Message | None) -> str:
    """The keyword context a turn gets from the turn before it: who said what (bounded)."""
    if previous is None:
        return ""
    text = previous.text if isinstance(previous, Message) else previous.summary
    return f"{previous.actor}: {text}"[:CONTEXT_CHARS]


def episodes_from_messages(
    messages: Iterable[Message | dict[str, Any]], scope: Scope, now: datetime, *, previous: Episode | None = None
) -> list[Episode]:
    """One `Episode` per message, stamped with the scope, its time and its provenance id.

    Each turn keeps the turn before it (in this batch, or `previous` for the first) as its
    keyword `context`: a reply like "Running, every morning!" is then found by the words of
    the question it answers.
    """
    out: list[Episode] = []
    before: Episode | Message | None = previous
    for index, raw in enumerate(messages):
        try:
            msg = raw if isinstance(raw, Message) else Message.model_validate(raw)
        except ValueError as exc:
            raise InvalidRecordError(f"message #{index} is invalid: {exc}") from None
        when = msg.timestamp or now
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when
        out.append(
            Episode(
                **scope.stamp(),
                occurred_at=when,
                actor=msg.actor,
                event_type="message",
                summary=msg.text,
                details=msg.details,
                context=turn_context(before),
                importance=msg.importance,
                tags=msg.tags,
                source_ids=[msg.id] if msg.id else [],
                created_at=now,
                updated_at=now,
            )
        )
        before = msg
    return out
