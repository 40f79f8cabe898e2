"""The memory API (`/v1`): records per store, search, messages, core blocks, vault, chat, export.

Every route acts in its caller's scope (`Caller`, from the API key) through the `MemoryOS`
facade; a write publishes an event for the live view. Bodies are bounded: `k`, token budgets,
messages per request and text sizes have limits, and a request past one gets a 422 that says
which limit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from memos.context.core_memory import CoreMemory
from memos.context.session import MemorySession
from memos.exceptions import InvalidFilterError, InvalidRecordError
from memos.memory import MemoryOS
from memos.portability import export_scope, forget_user
from memos.retrieval.ranking import Hit
from memos.store.scope import Scope
from memos.validation import check_text

from .deps import Caller, CallerDep
from .errors import ApiError
from .extraction import with_running
from .schemas import (
    ERRORS,
    BlockOut,
    BlocksOut,
    ChatOut,
    Deleted,
    ForgetOut,
    HistoryOut,
    JobsOut,
    MessagesOut,
    RecordList,
    RecordOut,
    Revealed,
    SearchOut,
)
from .tenancy import RECHECK_SECONDS, check_admin

__all__ = ["MAX_BUDGET", "MAX_K", "MAX_LIST", "MAX_MESSAGES", "Strict", "new_record", "record_json", "router"]

MAX_K = 100
MAX_BUDGET = 32_000
MAX_LIST = 1_000
MAX_MESSAGES = 200
_SERVER_FIELDS = {"id", "user_id", "agent_id", "session_id", "text", "created_at", "updated_at", "access_count", "last_accessed"}

router = APIRouter(prefix="/v1", responses=ERRORS)
Store = Annotated[str, "a store name (GET /v1/stores lists them)"]
RecordBody = Annotated[dict[str, Any], Body(description="The record's fields (GET /v1/stores lists each store's fields).",
                                              examples=[{"subject": "alice", "summary": "Alice prefers tea"}])]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def record_json(record: Any) -> dict[str, Any]:
    """A record as the API returns it (vault secrets are already redacted by the facade)."""
    data = record.model_dump(mode="json")
    data["memory_type"] = record.memory_type
    data["rendered"] = record.render()
    return data


def hit_json(hit: Hit, count_tokens: Callable[[str], int]) -> dict[str, Any]:
    """A hit as the API returns it: a top-k search leaves `text` and `tokens` to be filled here
    (a budgeted one has them from packing)."""
    text = hit.text or hit.record.render()
    tokens = hit.tokens or count_tokens(text)
    return {"store": hit.memory_type, "score": round(hit.score, 6), "parts": {k: round(v, 6) for k, v in hit.parts.items()},
            "text": text, "tokens": tokens, "record": record_json(hit.record),
            "attached": [hit_json(a, count_tokens) for a in hit.attached]}  # the turns that complete it (memos.retrieval.replies)


def new_record(memory: MemoryOS, store: str, body: dict[str, Any]) -> Any:
    record_type = memory.record_type(store)
    given = sorted(set(body) & _SERVER_FIELDS)
    if given:
        raise ApiError(422, "invalid_record", f"do not send {given}: the server sets ids, scope, text and times "
                       "(the scope comes from your API key)")
    try:
        return record_type.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:10])
        raise ApiError(422, "invalid_record", f"fix the {store} record: {problems}") from None


# --- records per store --------------------------------------------------------------------------

@router.post("/stores/{store}", tags=["records"], status_code=201, response_model=RecordOut, summary="Add a record to a store.")
async def add_record(caller: CallerDep, store: Store, body: RecordBody,
                     session_id: Annotated[str | None, Query(max_length=256)] = None) -> dict[str, Any]:
    scope = caller.session_scope(session_id) if session_id else caller.scope
    [added] = await caller.memory.add(scope, new_record(caller.memory, store, body), actor=caller.actor)
    caller.state.bus.publish(scope, "add", store=added.memory_type, ids=[added.id])
    return record_json(added)


@router.get("/stores/{store}", tags=["records"], response_model=RecordList, summary="List a store's records (oldest first), filtered by status, tags, time range or text.")
async def list_records(
    caller: CallerDep, store: Store,
    status: Annotated[Literal["active", "superseded", "archived", "all"], Query()] = "active",
    tags: Annotated[list[str] | None, Query(max_length=20)] = None,
    since: datetime | None = None, until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
    contains: Annotated[str | None, Query(max_length=500, description="Only records whose rendered text holds this "
                                                                       "(case-insensitive; a vault secret is never matched).")] = None,
) -> dict[str, Any]:
    statuses = ("active", "superseded", "archived") if status == "all" else status
    needle = _needle(contains)
    records = await caller.memory.list(caller.scope, store, status=statuses, tags=tags, since=since, until=until,
                                       limit=None if needle else limit)
    if needle:
        records = [r for r in records if needle in r.render().casefold()][:limit]
    return {"store": store, "records": [record_json(r) for r in records]}


def _needle(contains: str | None) -> str | None:
    """The text filter, matched in Python (never built into a store filter); bad Unicode is a 400."""
    if not contains:
        return None
    try:
        return check_text(contains, "contains", limit=500).casefold()
    except InvalidRecordError as exc:
        raise InvalidFilterError(str(exc)) from None


@router.get("/stores/{store}/{record_id}", tags=["records"], response_model=RecordOut, summary="One record.")
async def get_record(caller: CallerDep, store: Store, record_id: str) -> dict[str, Any]:
    return record_json(await caller.memory.get(caller.scope, store, record_id))


@router.patch("/stores/{store}/{record_id}", tags=["records"], response_model=RecordOut,
              summary="Change fields of a record (audited). A vault item's secret or sensitivity needs a key whose clearance "
                      "reaches the item's sensitivity; lowering it also needs the admin key in X-Memos-Approval, as a reveal does.")
async def update_record(caller: CallerDep, store: Store, record_id: str, changes: RecordBody,
                        approval: Annotated[str | None, Header(alias="X-Memos-Approval")] = None) -> dict[str, Any]:
    if not changes:
        raise ApiError(422, "invalid_record", "send the fields to change, e.g. {\"importance\": 0.9}")
    approved_by = f"operator for {caller.actor}" if check_admin(approval, caller.state.config.admin_key) else None
    updated = await caller.memory.update(caller.scope, store, record_id, changes, actor=caller.actor,
                                         clearance=caller.key.clearance, approved_by=approved_by)
    caller.state.bus.publish(caller.scope, "update", store=updated.memory_type, ids=[updated.id])
    return record_json(updated)


@router.post("/stores/{store}/{record_id}/supersede", tags=["records"], status_code=201, response_model=RecordOut,
             summary="Replace a record by a new one: the old one closes its validity and links the new.")
async def supersede_record(caller: CallerDep, store: Store, record_id: str, body: RecordBody) -> dict[str, Any]:
    new = await caller.memory.supersede(caller.scope, store, record_id, new_record(caller.memory, store, body), actor=caller.actor)
    caller.state.bus.publish(caller.scope, "supersede", store=new.memory_type, ids=[record_id, new.id])
    return record_json(new)


@router.delete("/stores/{store}/{record_id}", tags=["records"], response_model=Deleted, summary="Delete a record and its history for real.")
async def delete_record(caller: CallerDep, store: Store, record_id: str) -> dict[str, Any]:
    await caller.memory.delete(caller.scope, store, record_id, actor=caller.actor)
    caller.state.bus.publish(caller.scope, "delete", store=store, ids=[record_id])
    return {"deleted": record_id}


@router.get("/stores/{store}/{record_id}/history", tags=["records"], response_model=HistoryOut, summary="The audit trail of one record.")
async def record_history(caller: CallerDep, store: Store, record_id: str) -> dict[str, Any]:
    await caller.memory.get(caller.scope, store, record_id)  # 404 if it is not this caller's
    return {"history": [_entry(e) for e in await caller.memory.history(caller.scope, record_id)]}


@router.get("/history", tags=["records"], response_model=HistoryOut, summary="The newest audit entries of the caller's scope.")
async def scope_history(caller: CallerDep, limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100) -> dict[str, Any]:
    return {"history": [_entry(e) for e in await caller.memory.history(caller.scope, limit=limit)]}


def _entry(entry: Any) -> dict[str, Any]:
    after = entry.after or {}
    return {"id": entry.id, "at": entry.at.isoformat(), "op": entry.op, "store": entry.memory_type, "record_id": entry.record_id,
            "actor": entry.actor, "note": entry.note, "summary": after.get("summary") or after.get("caption") or after.get("label")}


# --- search ------------------------------------------------------------------------------------

class SearchBody(Strict):
    query: str = Field(min_length=1, max_length=4_000, description="What to look for.", examples=["where does the user live"])
    k: int = Field(10, ge=1, le=MAX_K, description=f"How many hits (at most {MAX_K}).")
    budget_tokens: int | None = Field(None, ge=16, le=MAX_BUDGET, description="Instead of k: the best hits that fit this many tokens.")
    types: list[str] | None = Field(None, max_length=20, description="Stores to search (default: all but core).")
    since: datetime | None = None
    until: datetime | None = None
    tags: list[str] | None = Field(None, max_length=20)
    include_inactive: bool = False
    replies: bool = Field(True, description="A question brings the reply it got (see MemoryOS.search).")
    exclude: list[str] = Field([], max_length=MAX_LIST, description="Record ids to leave out of the candidates.")
    now: datetime | None = Field(None, description="When the question is asked (default: now): 'last week' counts from it.")


@router.post("/search", tags=["search"], response_model=SearchOut,
             summary="Hybrid search with score parts (vector, full text, recency, importance).")
async def search_memory(caller: CallerDep, body: SearchBody) -> dict[str, Any]:
    hits = await caller.memory.search(body.query, caller.scope, types=body.types, k=body.k, budget_tokens=body.budget_tokens,
                                      since=body.since, until=body.until, tags=body.tags, include_inactive=body.include_inactive,
                                      replies=body.replies, exclude=body.exclude, now=body.now)
    out = [hit_json(h, caller.memory.tokenizer.count) for h in hits]
    return {"hits": out, "tokens": sum(h["tokens"] for h in out)}


# --- messages and chat -------------------------------------------------------------------------

class TextPart(Strict):
    """One part of an OpenAI-style message's content (only text parts are kept in memory)."""

    type: Literal["text"] = "text"
    text: str = Field(max_length=100_000)


class MessageIn(Strict):
    """One conversation turn: `{"role", "text"}`, or OpenAI-style `{"role", "content"}`."""

    role: Literal["user", "assistant"] = "user"
    text: str | None = Field(None, min_length=1, max_length=100_000, description="What was said.")
    content: str | list[TextPart] | None = Field(
        None, description="What was said, as OpenAI's chat messages carry it: a string or a list of text parts "
                          "(send `text` or `content`, not both).")
    id: str | None = Field(None, max_length=128, description="The message's own id, kept as provenance.")
    timestamp: datetime | None = None
    importance: float = Field(0.5, ge=0, le=1)

    @model_validator(mode="after")
    def _one_text(self) -> MessageIn:
        if (self.text is None) == (self.content is None):
            raise ValueError("send the message as `text` or as `content` (one of them)")
        if self.content is not None:
            joined = self.content if isinstance(self.content, str) else "\n".join(p.text for p in self.content)
            if not joined.strip() or len(joined) > 100_000:
                raise ValueError("`content` must hold 1 to 100,000 characters of text")
            self.text = joined
        return self

    @property
    def said(self) -> str:
        assert self.text is not None  # the validator sets it
        return self.text


class MessagesBody(Strict):
    session_id: str = Field("default", min_length=1, max_length=256)
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES, examples=[[
        {"role": "user", "content": "I moved to Porto last month"}, {"role": "assistant", "content": "How do you like it?"}]])
    extract: bool | None = Field(None, description="Extract memories from these turns with the memory manager, in the "
                                                   "background (a job in /v1/jobs). Default: the server's setting, on "
                                                   "when it runs with a model.")


@router.post("/messages", tags=["conversation"], status_code=201, response_model=MessagesOut,
             summary="Record conversation turns (stored in episodic memory and in the session's working context); "
                     "with extraction on, the memory manager then extracts memories from them in the background.")
async def post_messages(caller: CallerDep, body: MessagesBody) -> dict[str, Any]:
    state = caller.state
    model = state.extraction_model
    extract = body.extract if body.extract is not None else state.config.extract and model is not None
    if extract and model is None:
        raise ApiError(409, "no_model", "this server has no model to extract memories with; start it with "
                       "`memos serve --model provider:model`, or send \"extract\": false to record the turns only")
    scope = caller.session_scope(body.session_id)
    async with state.session_lock(scope):
        session = await MemorySession.open(caller.memory, scope)
        turns = [await session.record_turn(m.role, m.said, message_id=m.id, occurred_at=m.timestamp, importance=m.importance,
                                           actor=m.role)
                 for m in body.messages]
    state.bus.publish(scope, "turn", store="episodic", ids=[t.id for t in turns], session_id=body.session_id)
    job = state.extractions.start(caller.memory, scope, model, turns) if extract else None
    return {"session_id": body.session_id, "turns": [record_json(t) for t in turns],
            "extraction": {"job_id": job.job_id, "status": job.status} if job else None}


class ChatBody(Strict):
    message: str = Field(min_length=1, max_length=100_000)
    session_id: str = Field("default", min_length=1, max_length=256)
    stream: bool = Field(False, description="Answer as server-sent events (started, heartbeats, reply, done).")


@router.post("/chat", tags=["conversation"], response_model=ChatOut,
             responses={200: {"content": {"text/event-stream": {}}, "description": "The reply; with `stream`, server-sent events."}},
             summary="One chat turn through the memory agent (needs a model on the server).")
async def chat(caller: CallerDep, body: ChatBody) -> Any:
    model = caller.state.config.model
    if model is None:
        raise ApiError(409, "no_model", "this server has no chat model; start it with `memos serve --model provider:model` "
                       "(or record turns with POST /v1/messages, which needs none)")
    scope = caller.session_scope(body.session_id)
    turn = _chat_turn(caller, scope, model, body.message)
    if not body.stream:
        return await _while_key_valid(caller, turn)
    return StreamingResponse(_chat_events(caller, turn), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


_KEY_REVOKED = ("key_revoked", "this API key was revoked while the request ran; the turn was stopped")


async def _while_key_valid(caller: Caller, work: Any) -> Any:
    """Run `work`, re-checking the caller's key every `RECHECK_SECONDS`: a revocation stops it (401)."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=RECHECK_SECONDS)
            if not task.done() and not await caller.key_valid():
                task.cancel()
                raise ApiError(401, *_KEY_REVOKED)
        return task.result()
    finally:
        if not task.done():
            task.cancel()


async def _chat_turn(caller: Caller, scope: Scope, model: Any, message: str) -> dict[str, Any]:
    async with caller.state.session_lock(scope):
        agent = caller.memory.agent(model, scope, background=False)
        reply = await agent.chat(message)
    report = agent.last
    caller.state.bus.publish(scope, "turn", store="episodic", ids=[], session_id=scope.session_id)
    return {"reply": reply, "session_id": scope.session_id, "tool_calls": report.tool_calls if report else [],
            "context": {"sections": report.context.sections, "total": report.context.total_tokens,
                        "budget": report.context.budget} if report else None}


async def _chat_events(caller: Caller, turn: Any) -> AsyncIterator[str]:
    task = asyncio.ensure_future(turn)
    yield "event: started\ndata: {}\n\n"
    while not task.done():
        await asyncio.wait({task}, timeout=RECHECK_SECONDS)
        if task.done():
            break
        if not await caller.key_valid():
            task.cancel()
            kind, message = _KEY_REVOKED
            yield f"event: error\ndata: {json.dumps({'type': kind, 'message': message})}\n\n"
            return
        yield ": working\n\n"
    try:
        result = task.result()
    except ApiError as exc:
        yield f"event: error\ndata: {json.dumps({'type': exc.kind, 'message': exc.message})}\n\n"
        return
    except Exception as exc:  # the stream has begun: the error goes out as an event, logged in full here
        from memos.exceptions import MemosError

        from .errors import log, status_of

        kind, message = ("internal", "the chat turn failed; it is logged on the server")
        if isinstance(exc, MemosError):
            kind, message = status_of(exc)[1], str(exc)
        else:
            log.exception("chat turn failed")
        yield f"event: error\ndata: {json.dumps({'type': kind, 'message': message})}\n\n"
        return
    yield f"event: reply\ndata: {json.dumps(result, default=str)}\n\n"
    yield "event: done\ndata: {}\n\n"


# --- core blocks ---------------------------------------------------------------------------------

def _block_json(block: Any) -> dict[str, Any]:
    return {"label": block.label, "description": block.description, "value": block.value, "used": len(block.value),
            "limit": block.limit, "read_only": block.read_only, "record": record_json(block)}


@router.get("/core", tags=["core"], response_model=BlocksOut, summary="The core blocks of the caller's agent, with used/limit characters.")
async def core_blocks(caller: CallerDep) -> dict[str, Any]:
    return {"blocks": [_block_json(b) for b in await CoreMemory(caller.memory, caller.scope).blocks()]}


class CoreWrite(Strict):
    value: str = Field(max_length=100_000, description="The block's whole new value.")


class CoreAppend(Strict):
    text: str = Field(min_length=1, max_length=100_000)


class CoreReplace(Strict):
    old: str = Field(min_length=1, max_length=100_000)
    new: str = Field(max_length=100_000)


@router.put("/core/{label}", tags=["core"], response_model=BlockOut, summary="Rewrite a core block.")
async def core_rewrite(caller: CallerDep, label: str, body: CoreWrite) -> dict[str, Any]:
    block = await CoreMemory(caller.memory, caller.scope).rethink(label, body.value, actor=caller.actor)
    caller.state.bus.publish(caller.scope, "core", store="core", ids=[block.id])
    return _block_json(block)


@router.post("/core/{label}/append", tags=["core"], response_model=BlockOut, summary="Append text to a core block.")
async def core_append(caller: CallerDep, label: str, body: CoreAppend) -> dict[str, Any]:
    block = await CoreMemory(caller.memory, caller.scope).append(label, body.text, actor=caller.actor)
    caller.state.bus.publish(caller.scope, "core", store="core", ids=[block.id])
    return _block_json(block)


@router.post("/core/{label}/replace", tags=["core"], response_model=BlockOut, summary="Replace text inside a core block.")
async def core_replace(caller: CallerDep, label: str, body: CoreReplace) -> dict[str, Any]:
    block = await CoreMemory(caller.memory, caller.scope).replace(label, body.old, body.new, actor=caller.actor)
    caller.state.bus.publish(caller.scope, "core", store="core", ids=[block.id])
    return _block_json(block)


# --- vault ---------------------------------------------------------------------------------------

@router.post("/vault/{record_id}/reveal", tags=["vault"], response_model=Revealed,
             summary="Reveal a vault secret: needs a key with a clearance and an operator's approval (the admin key "
                     "in X-Memos-Approval); audited.")
async def vault_reveal(caller: CallerDep, record_id: str,
                       approval: Annotated[str | None, Header(alias="X-Memos-Approval")] = None) -> Any:
    if caller.key.clearance == "none":
        raise ApiError(403, "no_clearance", "this API key may not reveal vault secrets; an admin can make a key with "
                       "a clearance (POST /admin/keys {\"clearance\": \"medium\"})")
    if not check_admin(approval, caller.state.config.admin_key):
        raise ApiError(403, "approval_required", "a reveal needs an operator's approval: send the admin key in the "
                       "X-Memos-Approval header")
    secret = await caller.memory.reveal(caller.scope, record_id, approved_by=f"operator for {caller.actor}",
                                        clearance=caller.key.clearance)
    from fastapi.responses import JSONResponse

    return JSONResponse({"id": record_id, "secret": secret}, headers={"Cache-Control": "no-store"})


# --- export, forget, jobs ------------------------------------------------------------------------

@router.get("/export", tags=["portability"], response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}, "description": "memos-export/1 JSON lines."}},
            summary="The caller's scope as memos-export/1 JSON lines (vault secrets stay ciphertext).")
async def export(caller: CallerDep) -> StreamingResponse:
    lines = await export_scope(caller.memory, caller.scope)

    async def body() -> AsyncIterator[str]:
        for line in lines:
            yield line + "\n"

    return StreamingResponse(body(), media_type="application/x-ndjson",
                             headers={"Content-Disposition": f'attachment; filename="{caller.key.user_id}.memos.jsonl"'})


@router.delete("/memory", tags=["portability"], response_model=ForgetOut,
               summary="Forget the caller's user: every record, its history and session state.")
async def forget(caller: CallerDep, confirm: Annotated[str, Query(description="The user id again, to confirm.")]) -> dict[str, Any]:
    if caller.key.agent_id is not None:
        raise ApiError(403, "agent_key", "this key is bound to one agent; forgetting a whole user needs a user-wide key")
    if confirm != caller.key.user_id:
        raise ApiError(422, "confirm", f"to forget everything of this user, pass ?confirm={caller.key.user_id}")
    removed = await forget_user(caller.memory, caller.key.user_id)
    caller.state.bus.publish(caller.scope, "forget", store="*", ids=[])
    return {"forgotten": caller.key.user_id, "removed": removed}


@router.get("/jobs", tags=["jobs"], response_model=JobsOut,
            summary="The newest background job outcomes of this scope (extraction, reflection, consolidation, decay), "
                    "then the extractions still running in this server process.")
async def jobs(caller: CallerDep, limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 20) -> dict[str, Any]:
    from memos.jobs.runs import job_history

    history = await job_history(caller.memory, caller.scope, limit=limit)
    return {"jobs": with_running(history, caller.state.extractions.running(caller.scope))}
