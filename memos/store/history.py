"""The audit trail's rows: one per change to a record, whatever store holds them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from memos.memtypes import MemoryRecord, new_id

__all__ = ["HISTORY_SCHEMA", "HistoryEntry", "history_entry", "history_row", "micros"]

HISTORY_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("op", pa.string()),
        pa.field("memory_type", pa.string()),
        pa.field("record_id", pa.string()),
        pa.field("actor", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("agent_id", pa.string()),
        pa.field("session_id", pa.string()),
        pa.field("before", pa.string(), nullable=True),
        pa.field("after", pa.string(), nullable=True),
        pa.field("note", pa.string(), nullable=True),
    ]
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class HistoryEntry:
    """One audit row: what happened to a record, by whom and when (before/after as JSON)."""

    id: str
    at: datetime
    op: str
    memory_type: str
    record_id: str
    actor: str
    user_id: str
    agent_id: str
    session_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    note: str | None


def history_row(
    op: str, record: MemoryRecord, actor: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
    at: datetime, note: str | None = None,
) -> dict[str, Any]:
    """A history row for an operation on `record` (before/after must already be redacted)."""
    return {
        "id": new_id(), "at": at.astimezone(UTC), "op": op, "memory_type": record.memory_type, "record_id": record.id,
        "actor": actor, "user_id": record.user_id, "agent_id": record.agent_id, "session_id": record.session_id,
        "before": json.dumps(before, default=str) if before is not None else None,
        "after": json.dumps(after, default=str) if after is not None else None, "note": note,
    }


def history_entry(row: dict[str, Any]) -> HistoryEntry:
    """A stored history row (before/after as JSON text) as a `HistoryEntry`."""
    return HistoryEntry(**{**row, "before": _loads(row["before"]), "after": _loads(row["after"])})


def micros(at: datetime) -> int:
    """A stored timestamp as LanceDB compares it (microseconds since the epoch, UTC)."""
    delta = at.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _loads(value: str | None) -> dict[str, Any] | None:
    return json.loads(value) if value else None
