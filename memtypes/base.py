"""The base class of every memory type.

A memory type is a pydantic model: its fields are the record schema (the kernel derives the
LanceDB table from them), `index_text()` says what is embedded and full-text indexed
(`context_text()` may add keywords from the record's surroundings to the full-text index), and
`render()` says how a record reads in a prompt. Everything else has a default.

    class Recipe(MemoryRecord):
        memory_type: ClassVar[str] = "recipe"
        title: str
        ingredients: list[str] = []

        def index_text(self) -> str:
            return f"{self.title}: {', '.join(self.ingredients)}"

        def render(self) -> str:
            return f"Recipe {self.title} ({len(self.ingredients)} ingredients)"

A class is concrete when it sets `memory_type`; its contract is checked when the class is
defined, not when it first fails at run time.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["BASE_FIELDS", "MemoryRecord", "RecordStatus", "new_id", "utcnow"]

RecordStatus = Literal["active", "superseded", "archived"]

_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_RESERVED = {"meta", "history", "jobs"}


def new_id() -> str:
    """A fresh record id (32 hex characters)."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def _as_utc(value: datetime) -> datetime:
    """A naive datetime is taken as UTC (as the store takes it), so naive and aware ones compare."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class MemoryRecord(BaseModel):
    """One record of a memory store. Subclass it to define a memory type."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, str_max_length=1_000_000)

    memory_type: ClassVar[str]
    """The store's name (lowercase identifier); setting it makes a subclass concrete."""
    description: ClassVar[str] = ""
    """What the store is for, shown to the memory-manager agent when it routes writes."""
    time_field: ClassVar[str] = "created_at"
    """The datetime field that `since` / `until` filters and recency scoring use."""
    secret_fields: ClassVar[tuple[str, ...]] = ()
    """Fields encrypted at rest and never embedded, indexed, rendered or logged in clear; a type
    with any is a secret store (its sources are scrubbed, its key rotated, its records redacted)."""

    # What the store does. The kernel and the agents read these declarations; nothing compares
    # store names. A user's own type gets the defaults and opts in to the rest.
    searched_by_default: ClassVar[bool] = True
    """Active retrieval, a search without `types` and the `memory_search` tool cover this store."""
    model_writable: ClassVar[bool] = True
    """The model may write records here (`memory_insert`, the memory manager)."""
    consolidate: ClassVar[bool] = False
    """Consolidation merges this store's duplicates (exact text, see `duplicate_key`)."""
    merge_near_duplicates: ClassVar[bool] = False
    """Consolidation also merges records whose vectors are nearly equal, not only equal text."""
    supersede_contradictions: ClassVar[bool] = False
    """Consolidation supersedes a record contradicted by a newer one (facts: same subject and attribute)."""
    decays: ClassVar[bool] = False
    """Decay archives this store's stale, low-value records."""
    holds_turns: ClassVar[bool] = False
    """The store is the conversation's recall log: raw turns live here (one such store)."""
    always_in_prompt: ClassVar[bool] = False
    """Every record of the scope is rendered into each prompt (edited with the core-memory tools)."""

    id: str = Field(default_factory=new_id, description="Record id, unique within the database.")
    user_id: str = Field(default="", description="Owner user (scope).")
    agent_id: str = Field(default="", description="Owning agent (scope); '' when user-wide.")
    session_id: str = Field(default="", description="Session (scope); '' when not session-bound.")
    text: str = Field(default="", description="What is full-text indexed; set from search_text().")
    created_at: datetime = Field(default_factory=utcnow, description="When the record was written.")
    updated_at: datetime = Field(default_factory=utcnow, description="When the record last changed.")
    importance: float = Field(default=0.5, ge=0.0, le=1.0, description="How much the record matters, 0-1.")
    access_count: int = Field(default=0, ge=0, description="How often retrieval returned it.")
    last_accessed: datetime | None = Field(default=None, description="When retrieval last returned it.")
    source_ids: list[str] = Field(default_factory=list, description="Provenance: message or record ids.")
    tags: list[str] = Field(default_factory=list, description="Free labels for filtering.")
    status: RecordStatus = Field(default="active", description="active, superseded or archived.")
    valid_from: datetime | None = Field(default=None, description="Start of validity (facts).")
    valid_to: datetime | None = Field(default=None, description="End of validity; set when superseded.")
    superseded_by: str | None = Field(default=None, description="Id of the record that replaced this one.")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "memory_type" not in cls.__dict__:
            return  # an abstract intermediate class
        name = cls.memory_type
        if not isinstance(name, str) or not _TYPE_NAME.match(name) or name in _RESERVED:
            raise TypeError(
                f"{cls.__name__}.memory_type must be a lowercase identifier (a-z, 0-9, _; max 40) "
                f"and not one of {sorted(_RESERVED)}; got {name!r}"
            )
        for method in ("index_text", "render"):
            if getattr(cls, method) is getattr(MemoryRecord, method):
                raise TypeError(f"memory type {cls.__name__} must define {method}()")
        if cls.time_field not in cls.model_fields:
            raise TypeError(f"{cls.__name__}.time_field {cls.time_field!r} is not a field")
        for secret in cls.secret_fields:
            if secret not in cls.model_fields:
                raise TypeError(f"{cls.__name__}.secret_fields names unknown field {secret!r}")

    @field_validator("source_ids", "tags")
    @classmethod
    def _no_blank_items(cls, value: list[str]) -> list[str]:
        return [v for v in value if v]

    @model_validator(mode="after")
    def _dates_in_range(self) -> Self:
        """Every date is stored in UTC: one whose offset takes it before year 1 or past 9999
        (0001-01-01 01:00+14:00) names no storable instant and is refused here, not on write."""
        for name, value in self.__dict__.items():
            if isinstance(value, datetime) and value.utcoffset():
                try:
                    value.astimezone(UTC)
                except OverflowError:
                    raise ValueError(f"{name} {value.isoformat()} is outside the years 1 to 9999 once taken to UTC") from None
        return self

    @model_validator(mode="after")
    def _validity_in_order(self) -> Self:
        """An active record's validity ends after it starts: `valid_to` before `valid_from` is a
        fact never true. A superseded or archived one may (valid from next year, superseded today).
        Stored rows are read with `model_construct`, so a row written before this check still loads."""
        start, end = self.valid_from, self.valid_to
        if self.status == "active" and start is not None and end is not None and _as_utc(end) < _as_utc(start):
            raise ValueError(f"valid_to {end.isoformat()} is before valid_from {start.isoformat()}; a validity ends after it starts "
                             "(give a later valid_to, an earlier valid_from, or leave valid_to out)")
        return self

    def index_text(self) -> str:
        """The text to embed and full-text index. Must not include secret fields."""
        raise NotImplementedError

    def context_text(self) -> str:
        """Words from the record's surroundings that help find it by keyword (e.g. the turn a
        reply answers). Full-text indexed only: never embedded, never rendered. Default: none."""
        return ""

    def search_text(self) -> str:
        """What the full-text index holds: `index_text()` plus `context_text()`."""
        context = self.context_text()
        return f"{self.index_text()} {context}" if context else self.index_text()

    def render(self) -> str:
        """How this record reads in a prompt. Must not include secret fields."""
        raise NotImplementedError

    def render_group(self) -> str | None:
        """A heading several records can share when rendered together (e.g. a date), or None.

        Packed search results are grouped under their heading, so it is paid for once."""
        return None

    def render_line(self) -> str:
        """The record under its group heading (default: the full `render()`)."""
        return self.render()

    def render_parts(self) -> tuple[str, str]:
        """`render_line()` as (who said it, what was said). Under one heading, a speaker's lines
        that follow each other are joined and name the speaker once (`memos.retrieval.packing`).
        Default: nobody; the whole line."""
        return "", self.render_line()

    def duplicate_key(self) -> tuple[Any, ...]:
        """What, besides equal normalized text, two records must share to be exact duplicates
        (default: nothing; two moments that said the same words are not duplicates of each other)."""
        return ()

    def event_time(self) -> datetime:
        """The time this record is about (its `time_field`)."""
        value = getattr(self, self.time_field)
        return value if value is not None else self.created_at

    @classmethod
    def content_fields(cls) -> list[str]:
        """The fields a subclass adds to the base (what a user or model writes)."""
        return [name for name in cls.model_fields if name not in BASE_FIELDS]


BASE_FIELDS: frozenset[str] = frozenset(MemoryRecord.model_fields)
