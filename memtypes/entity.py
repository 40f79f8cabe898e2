"""The entity graph: entities (people, places, titles, things) and the relations between them.

An `Entity` is one thing the conversations talk about, under a canonical name with aliases,
and the records that mention it. A `Relation` links a subject entity to an object entity or a
plain value by a predicate ("Peter - is - Spider-Man"), valid from one time until another:
a relation a newer one contradicts is closed (`valid_to`, `superseded_by`), never deleted, so
the graph answers both "what is true now" and "what was true then".

Both are ordinary memory types (LanceDB tables in the same database, under the same scopes,
history and deletion rules). Entities are not searched directly: retrieval reaches records
through them (`memos.graph.entities`). Relations are searched and render in one short line.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from pydantic import Field, model_validator

from .base import MemoryRecord, utcnow

__all__ = ["Entity", "GraphRecord", "Relation", "normal_name"]


def normal_name(name: str) -> str:
    """How names are compared: case-folded, inner whitespace collapsed, quotes and edge punctuation dropped."""
    return " ".join(name.replace("\u2019", "'").strip(" \t\n\"'“”‘’«»《》「」『』.,;:!?()[]").casefold().split())


class GraphRecord(MemoryRecord):
    """A record of the entity graph: written through the graph's own operations
    (`memos.graph.entities`, the manager's plan, the graph tools), not as a free-form memory."""

    graph_store: ClassVar[bool] = True
    model_writable: ClassVar[bool] = False  # not through memory_insert or a plan's actions: relation_add / the plan's graph part


class Entity(GraphRecord):
    """A person, place, work, organisation or thing, with the records that mention it."""

    memory_type: ClassVar[str] = "entity"
    description: ClassVar[str] = "People, places, works and things the conversations mention, with their aliases."
    time_field: ClassVar[str] = "last_seen"
    searched_by_default: ClassVar[bool] = False  # reached through links, not by its own text

    name: str = Field(min_length=1, max_length=256, description="Canonical name.")
    aliases: list[str] = Field(default_factory=list, description="Other names it goes by.")
    kind: str = Field(default="thing", max_length=64, description="person, place, title, org, date, thing, ...")
    summary: str = Field(default="", max_length=2_000, description="Who or what it is, in a sentence.")
    mentions: list[str] = Field(default_factory=list, description="Ids of the records that mention it.")
    first_seen: datetime = Field(default_factory=utcnow, description="When it was first mentioned.")
    last_seen: datetime = Field(default_factory=utcnow, description="When it was last mentioned.")

    def names(self) -> list[str]:
        """Canonical name and aliases, normalised (what a mention is matched against)."""
        return list(dict.fromkeys(n for n in (normal_name(x) for x in (self.name, *self.aliases)) if n))

    def index_text(self) -> str:
        aka = f" (also {', '.join(self.aliases)})" if self.aliases else ""
        return f"{self.name}{aka}, {self.kind}. {self.summary}".strip()

    def render(self) -> str:
        aka = f" (aka {', '.join(self.aliases)})" if self.aliases else ""
        about = f": {self.summary}" if self.summary else ""
        return f"{self.name}{aka} [{self.kind}]{about}"


class Relation(GraphRecord):
    """Subject - predicate - object, valid from `valid_from` until `valid_to` (open: still true)."""

    memory_type: ClassVar[str] = "relation"
    description: ClassVar[str] = "Relations between entities (subject - predicate - object), with when they held."
    time_field: ClassVar[str] = "valid_from"
    bitemporal: ClassVar[bool] = True
    """A search up to a time sees the relations that held then (closed after it), not those closed before."""

    subject: str = Field(min_length=1, max_length=256, description="Subject entity's name.")
    predicate: str = Field(min_length=1, max_length=128, description="The relation, e.g. 'is', 'has dog', 'likes'.")
    object: str = Field(min_length=1, max_length=512, description="Object entity's name, or a value.")
    subject_id: str = Field(default="", max_length=64, description="Subject entity's id.")
    object_id: str = Field(default="", max_length=64, description="Object entity's id ('' when a plain value).")

    @model_validator(mode="before")
    @classmethod
    def _starts(cls, data: Any) -> Any:
        """A relation always has a start (its time field): by default when it was written."""
        if isinstance(data, dict) and data.get("valid_from") is None:
            data = {**data, "valid_from": data.get("created_at") or utcnow()}
        return data

    def index_text(self) -> str:
        return f"{self.subject} {self.predicate} {self.object}"

    def render(self) -> str:
        return f"{self.subject} — {self.predicate} — {self.object}{self.period()}"

    def period(self) -> str:
        """' (since 2024-05)', ' (2024-05 to 2024-09)' or ''."""
        start = f"{self.valid_from:%Y-%m}" if self.valid_from else ""
        if self.valid_to is not None:
            return f" ({start or '?'} to {self.valid_to:%Y-%m})"
        return f" (since {start})" if start else ""

    def holds_at(self, when: datetime | None) -> bool:
        """True now (when=None: not closed) or at `when` (started by then, not yet ended)."""
        if when is None:
            return self.valid_to is None and self.status == "active"
        started = self.valid_from is None or self.valid_from <= when
        return started and (self.valid_to is None or self.valid_to > when)
