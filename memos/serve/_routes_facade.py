"""The routes that give `memos.client` the facade's own calls: a batch add, raw ingest, full history.

`POST /v1/records` adds records of any stores in one facade `add` (all stored or none),
`POST /v1/ingest` stores conversation turns as `MemoryOS.ingest` does (raw mode, no session
context), `GET /v1/audit` returns whole history entries (before/after included, redacted as the
facade keeps them). Like every `/v1` route they act in the caller's scope (`Caller.scope`:
the key's, or the narrower one the request names in `X-Memos-Scope`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from memos.memtypes import Episode
from memos.store.history import HistoryEntry

from ._routes_memory import MAX_LIST, MAX_MESSAGES, Strict, new_record, record_json
from .deps import CallerDep
from .schemas import ERRORS, AuditOut, IngestOut, RecordsOut

__all__ = ["MAX_RECORDS", "history_json", "router"]

MAX_RECORDS = 1_000
"""The most records one `POST /v1/records` takes (the body limit applies too)."""

router = APIRouter(prefix="/v1", responses=ERRORS)


class RecordIn(Strict):
    store: str = Field(min_length=1, max_length=40, description="The store (memory type) of the record.")
    fields: dict[str, Any] = Field(description="The record's fields; the server sets ids, scope, text and times.")


class RecordsBody(Strict):
    records: list[RecordIn] = Field(min_length=1, max_length=MAX_RECORDS)


@router.post("/records", tags=["records"], status_code=201, response_model=RecordsOut,
             summary="Add records of one or several stores in one write (all are stored, or none).")
async def add_records(caller: CallerDep, body: RecordsBody) -> dict[str, Any]:
    records = [new_record(caller.memory, item.store, item.fields) for item in body.records]
    added = await caller.memory.add(caller.scope, records, actor=caller.actor)
    for store in dict.fromkeys(r.memory_type for r in added):
        caller.state.bus.publish(caller.scope, "add", store=store, ids=[r.id for r in added if r.memory_type == store])
    return {"records": [record_json(r) for r in added]}


class IngestBody(Strict):
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_MESSAGES,
                                           description="Turns as `memos.Message` takes them: speaker, text, timestamp, id, ...")
    previous_id: str | None = Field(None, max_length=128, description="The turn before the first (its words help find it).")


@router.post("/ingest", tags=["conversation"], status_code=201, response_model=IngestOut,
             summary="Store conversation turns as episodic records (raw mode, as MemoryOS.ingest; no session context).")
async def ingest(caller: CallerDep, body: IngestBody) -> dict[str, Any]:
    memory = caller.memory
    previous = await memory.get(caller.scope, Episode, body.previous_id) if body.previous_id else None
    turns = await memory.ingest(caller.scope, body.messages, actor=caller.actor, previous=previous)
    caller.state.bus.publish(caller.scope, "turn", store=memory.turn_type, ids=[t.id for t in turns])
    return {"episodes": [record_json(t) for t in turns]}


def history_json(entry: HistoryEntry) -> dict[str, Any]:
    """A whole audit entry (its before/after are redacted when written)."""
    return {"id": entry.id, "at": entry.at.isoformat(), "op": entry.op, "memory_type": entry.memory_type,
            "record_id": entry.record_id, "actor": entry.actor, "user_id": entry.user_id, "agent_id": entry.agent_id,
            "session_id": entry.session_id, "before": entry.before, "after": entry.after, "note": entry.note}


@router.get("/audit", tags=["records"], response_model=AuditOut, summary="Whole audit entries of the caller's scope (or of one record in it), oldest first.")
async def audit(caller: CallerDep, record_id: Annotated[str | None, Query(max_length=128)] = None,
                limit: Annotated[int | None, Query(ge=1, le=100 * MAX_LIST)] = None) -> dict[str, Any]:
    entries = await caller.memory.history(caller.scope, record_id, limit=limit)
    return {"entries": [history_json(e) for e in entries]}
