"""What the API answers, as pydantic models: the responses `/openapi.json` describes.

A record's own fields depend on its store (GET /v1/stores lists them), so `RecordOut` names
the fields every record has and lets the store's fields through. Errors have one shape
(`ErrorOut`), declared on every route for the statuses it can answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AuditEntryOut", "AuditOut", "BlockOut", "BlocksOut", "ChatOut", "ContextOut", "ContextSummary", "Deleted", "ERRORS", "ErrorDetail", "ErrorOut",
    "ExtractionRef", "ForgetOut", "GraphEdge", "GraphNode", "GraphOut", "HealthOut", "HistoryEntryOut", "HistoryOut", "HitOut",
    "IngestOut", "JobOut", "JobsOut", "KeyOut", "KeysOut", "MessagesOut", "NewKeyOut", "PagedIn", "Produced", "QueueStatsOut", "RecordList", "RecordOut",
    "RecordsOut", "RetriesOut", "Revealed", "Revoked", "SearchOut", "SessionOut", "SessionsOut", "StatsOut", "StoreInfo", "StoresOut", "TimelineOut", "TurnOut",
]


class ErrorDetail(BaseModel):
    """What failed and how to fix it."""

    type: str = Field(description="A stable error type, e.g. not_found, invalid_request, no_model.")
    message: str = Field(description="What went wrong and what to do about it.")
    fields: list[dict[str, str]] | None = Field(None, description="For invalid_request: each bad field and its problem.")


class ErrorOut(BaseModel):
    """Every error: `{"error": {"type", "message"}}`."""

    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text} for status, text in (
        (401, "No API key, or an unknown or revoked one."), (403, "The key may not do this."),
        (404, "No such record, store or block in the caller's scope."), (409, "A conflict with the server's setup or state."),
        (422, "The request is not valid: the message names each bad field."))
}
"""The error responses every route declares."""


class RecordOut(BaseModel):
    """One record: the fields every record has, then its store's own fields (vault secrets redacted)."""

    model_config = ConfigDict(extra="allow")

    id: str
    memory_type: str = Field(description="The store it is in.")
    rendered: str = Field(description="The record as a prompt shows it.")
    user_id: str
    agent_id: str
    session_id: str
    created_at: datetime
    updated_at: datetime
    importance: float
    status: str = Field(description="active, superseded or archived.")
    source_ids: list[str] = Field(description="Provenance: the turns or records it was made from.")
    tags: list[str]


class RecordList(BaseModel):
    """A store's records, oldest first."""

    store: str
    records: list[RecordOut]


class Deleted(BaseModel):
    """The id of the record deleted (with its history)."""

    deleted: str


class HistoryEntryOut(BaseModel):
    """One audit entry: who did what to which record, when."""

    id: str
    at: str
    op: str = Field(description="add, update, supersede, delete, merge, reveal, job, ...")
    store: str
    record_id: str
    actor: str
    note: str | None = None
    summary: str | None = None


class HistoryOut(BaseModel):
    """Audit entries, oldest first."""

    history: list[HistoryEntryOut]


class HitOut(BaseModel):
    """One search hit, with why it ranked where it did."""

    store: str
    score: float
    parts: dict[str, float] = Field(description="The score's parts: vector, full text, recency, importance, ...")
    text: str = Field(description="The record as it would be put into a prompt.")
    tokens: int = Field(description="Tokens of `text` (with a budget: what adding it cost).")
    record: RecordOut
    attached: list[HitOut] = Field(default_factory=list, description="The turns that complete this hit: the reply it got, "
                                   "the other half of its exchange (they do not count against k).")


class SearchOut(BaseModel):
    """Search hits, best first."""

    hits: list[HitOut]
    tokens: int = Field(description="Tokens of all the hits' text.")


class ExtractionRef(BaseModel):
    """The background job that extracts memories from the posted turns (follow it in /v1/jobs)."""

    job_id: str
    status: str


class MessagesOut(BaseModel):
    """The stored turns, and the extraction job that reads them."""

    session_id: str
    turns: list[RecordOut]
    extraction: ExtractionRef | None = Field(None, description="The extraction job; null when extraction is off.")


class ContextSummary(BaseModel):
    """Tokens per section of the context the chat model was shown."""

    sections: dict[str, int]
    total: int
    budget: int


class ChatOut(BaseModel):
    """The agent's reply, the memory tools it called and the context it used."""

    reply: str
    session_id: str
    tool_calls: list[str]
    context: ContextSummary | None


class BlockOut(BaseModel):
    """A core block with its size."""

    label: str
    description: str
    value: str
    used: int = Field(description="Characters used.")
    limit: int = Field(description="Characters allowed.")
    read_only: bool
    record: RecordOut | None = Field(None, description="The block's whole record (what memos.Client rebuilds).")


class RecordsOut(BaseModel):
    """The records one write stored, in the order given."""

    records: list[RecordOut]


class IngestOut(BaseModel):
    """The turns an ingest stored, as episodic records."""

    episodes: list[RecordOut]


class AuditEntryOut(BaseModel):
    """A whole audit entry: the record's scope and its redacted before/after."""

    id: str
    at: str
    op: str
    memory_type: str
    record_id: str
    actor: str
    user_id: str
    agent_id: str
    session_id: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    note: str | None = None


class AuditOut(BaseModel):
    """Whole audit entries, oldest first."""

    entries: list[AuditEntryOut]


class BlocksOut(BaseModel):
    """The core blocks of the caller's agent."""

    blocks: list[BlockOut]


class Revealed(BaseModel):
    """A vault secret, shown once (never cached)."""

    id: str
    secret: str


class ForgetOut(BaseModel):
    """What forgetting a user removed."""

    forgotten: str
    removed: dict[str, int] = Field(description="Records removed per store.")


class JobOut(BaseModel):
    """One job outcome; each kind adds its own counts (extraction: job_id, status, turn_ids, written)."""

    model_config = ConfigDict(extra="allow")

    job: str = Field(description="extract, reflect, consolidate, decay, maintain, manage.")
    errors: list[str] = Field(default_factory=list)
    at: str | None = Field(None, description="When the outcome was recorded (absent while it runs).")
    note: str | None = None


class JobsOut(BaseModel):
    """Job outcomes, oldest first, then the extractions still running."""

    jobs: list[JobOut]


class StoreInfo(BaseModel):
    """One store: its record count and fields."""

    name: str
    count: int
    description: str
    fields: list[str]
    secret_fields: list[str]
    searched_by_default: bool


class StoresOut(BaseModel):
    """The caller and every store of the memory."""

    user_id: str
    agent_id: str | None
    stores: list[StoreInfo]


class Produced(BaseModel):
    """A record made from a turn."""

    store: str
    id: str
    rendered: str
    status: str


class TurnOut(RecordOut):
    produced: list[Produced] = Field(description="The records made from this turn (provenance).")


class TimelineOut(BaseModel):
    """The newest turns, each with the records made from it."""

    turns: list[TurnOut]


class SessionOut(BaseModel):
    """One conversation session: how many turns it holds and when the first and last were said."""

    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime


class SessionsOut(BaseModel):
    """The caller's sessions, the latest (by its last turn) first."""

    sessions: list[SessionOut]


class PagedIn(BaseModel):
    """A memory paged into the context."""

    store: str
    id: str
    tokens: int


class ContextOut(BaseModel):
    """The compiled context of a session's current step."""

    session_id: str
    sections: dict[str, int]
    total: int
    budget: int
    turns: int
    paged_in: list[PagedIn] = Field(default_factory=list)
    system_prompt: str


class GraphNode(BaseModel):
    """An entity."""

    id: str
    label: str
    kind: str | None = None


class GraphEdge(BaseModel):
    """A relation between two entities."""

    id: str
    source: str | None
    target: str | None
    label: str
    rendered: str


class GraphOut(BaseModel):
    """The entity graph (available: the store has entity and relation types)."""

    available: bool
    nodes: list[GraphNode]
    edges: list[GraphEdge]


class KeyOut(BaseModel):
    """What an API key grants (never the key itself)."""

    key_id: str
    user_id: str
    agent_id: str | None = None
    name: str = ""
    clearance: str = "none"
    created_at: str = ""


class NewKeyOut(BaseModel):
    """A new API key and what it grants."""

    token: str = Field(description="The API key itself: shown this once, stored only hashed.")
    key: KeyOut


class KeysOut(BaseModel):
    """API keys, oldest first."""

    keys: list[KeyOut]


class Revoked(BaseModel):
    """The id of the key revoked."""

    revoked: str


class QueueStatsOut(BaseModel):
    """One coalescing queue of this process since it started (`memos.batching.Coalescer`)."""

    calls: int = Field(description="Calls submitted.")
    batches: int = Field(description="Batches run: calls / batches is the mean batch's callers.")
    pending: int = Field(description="Calls waiting or running now.")
    busy_s: float = Field(description="Seconds its batches have run, summed.")
    waited_s: float = Field(description="Seconds batches waited for more callers, summed.")


class RetriesOut(BaseModel):
    """LanceDB calls tried again: what several processes writing one store cost each other."""

    conflicts: int = Field(description="Commits that met another writer's and were tried again.")
    purged: int = Field(description="Reads of a table version a purge had removed, read again at the latest.")
    slept_s: float = Field(description="Seconds slept before those tries.")
    journal_waits: int = Field(0, description="Reads that waited for rows another process had acknowledged from its journal and not yet written.")
    journal_wait_s: float = Field(0.0, description="Seconds those reads waited.")


class StatsOut(BaseModel):
    """This server process's queues (each worker of `--workers N` answers for itself)."""

    pid: int
    adds: QueueStatsOut = Field(description="Adds: embedded and committed together (`memos.group_commit`).")
    adds_embedding_s: float = Field(description="Of the adds' `busy_s`, the seconds spent embedding; the rest is writing.")
    searches_pending: int = Field(description="Searches in progress now.")
    query_embeddings: QueueStatsOut | None = Field(description="Searches' queries embedded together; null before the first or without an embedder.")
    encoder_threads: str | None = Field(description="BLAS threads an encode call (`--encoder-threads`); null: the encoder's own choice.")
    store_threads: str | None = Field(description="LanceDB's worker threads in this process (`--store-threads`, as "
                                                  "`TOKIO_WORKER_THREADS`); null: LanceDB's default, one per core.")
    store_retries: RetriesOut | None = Field(description="LanceDB calls of this process tried again since the store opened; null: a store that does not count them.")


class HealthOut(BaseModel):
    """The server is up and its store answers."""

    ok: bool
    stores: list[str]
