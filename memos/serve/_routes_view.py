"""What the web view reads (`/v1/stores`, `/v1/sessions`, `/v1/timeline`, `/v1/context`, `/v1/graph`, `/v1/events`), the view itself (`/ui`)
and the API reference (`/docs`, rendered in the browser from `/openapi.json` by the package's own page).

All of it is the caller's scope through the facade, like the rest of the API: the view is
one more client, holding its API key in the browser tab (never in a URL sent to the server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse

from memos.context.session import MemorySession

from ._routes_memory import record_json
from .deps import CallerDep
from .events import sse_lines
from .schemas import ERRORS, ContextOut, GraphOut, SessionsOut, StoresOut, TimelineOut
from .tenancy import RECHECK_SECONDS

__all__ = ["GRAPH_TYPES", "STATIC", "router"]

STATIC = Path(__file__).parent / "static"
GRAPH_TYPES = ("entity", "relation")
"""The stores the graph panel draws, when the store has them (the entity-graph memory types)."""
_TURN_TAG = "turn"

router = APIRouter(responses=ERRORS)


@router.get("/v1/stores", tags=["view"], response_model=StoresOut, summary="Every store with its record count and fields.")
async def stores(caller: CallerDep) -> dict[str, Any]:
    memory = caller.memory
    counts = await memory.counts(caller.scope)
    out = []
    for name, record_type in memory.types.items():
        out.append({"name": name, "count": counts.get(name, 0), "description": record_type.description,
                    "fields": record_type.content_fields(), "secret_fields": list(record_type.secret_fields),
                    "searched_by_default": name in memory.searchable_types})
    return {"user_id": caller.key.user_id, "agent_id": caller.key.agent_id, "stores": out}


@router.get("/v1/sessions", tags=["view"], response_model=SessionsOut,
            summary="The caller's conversation sessions, latest first, with their turn counts and first and last times.")
async def sessions(caller: CallerDep, limit: Annotated[int, Query(ge=1, le=1_000)] = 100) -> dict[str, Any]:
    turns = await caller.memory.list(caller.scope, "episodic", status=("active", "superseded", "archived"), tags=[_TURN_TAG],
                                     limit=None)
    found: dict[str, dict[str, Any]] = {}
    for turn in turns:  # oldest first: the last one seen is a session's latest
        if not turn.session_id:
            continue
        at = turn.event_time()
        entry = found.setdefault(turn.session_id, {"session_id": turn.session_id, "turns": 0, "first_at": at, "last_at": at})
        entry["turns"] += 1
        entry["first_at"], entry["last_at"] = min(entry["first_at"], at), max(entry["last_at"], at)
    latest = sorted(found.values(), key=lambda s: (s["last_at"], s["session_id"]), reverse=True)
    return {"sessions": latest[:limit]}


@router.get("/v1/timeline", tags=["view"], response_model=TimelineOut,
            summary="The newest conversation turns and the records made from them (provenance).")
async def timeline(caller: CallerDep, session_id: Annotated[str | None, Query(max_length=256)] = None,
                   limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    memory = caller.memory
    scope = caller.session_scope(session_id) if session_id else caller.scope
    episodes = await memory.list(scope, "episodic", status=("active", "superseded", "archived"), limit=None)
    turns = [e for e in episodes if _TURN_TAG in e.tags][-limit:]
    ids = {t.id for t in turns}
    produced: dict[str, list[dict[str, Any]]] = {}
    for name in memory.type_names:
        records = episodes if name == "episodic" else await memory.list(caller.scope, name, status=None, limit=None)
        for record in records:
            for source in set(record.source_ids) & ids:
                if record.id != source:
                    produced.setdefault(source, []).append({"store": name, "id": record.id, "rendered": record.render(),
                                                            "status": record.status})
    return {"turns": [{**record_json(t), "produced": produced.get(t.id, [])} for t in turns]}


@router.get("/v1/context", tags=["view"], response_model=ContextOut,
            summary="The compiled context of a session's current step, tokens per section.")
async def context(caller: CallerDep, session_id: Annotated[str, Query(min_length=1, max_length=256)] = "default",
                  budget: Annotated[int, Query(ge=256, le=200_000)] = 4_000) -> dict[str, Any]:
    scope = caller.session_scope(session_id)
    async with caller.state.session_lock(scope):
        session = await MemorySession.open(caller.memory, scope, budget=budget)
        if not session.context:
            return {"session_id": session_id, "sections": {}, "total": 0, "budget": budget, "turns": 0, "system_prompt": ""}
        ctx = await session.compile()
    return {"session_id": session_id, "sections": ctx.sections, "total": ctx.total_tokens, "budget": ctx.budget,
            "turns": len(ctx.recent_turns), "paged_in": [{"store": h.memory_type, "id": h.id, "tokens": h.tokens} for h in ctx.paged_in],
            "system_prompt": ctx.system_prompt}


@router.get("/v1/graph", tags=["view"], response_model=GraphOut,
            summary="The entity graph (entities and relations), when the store has those types.")
async def graph(caller: CallerDep, limit: Annotated[int, Query(ge=1, le=2_000)] = 300) -> dict[str, Any]:
    memory = caller.memory
    if not all(t in memory.types for t in GRAPH_TYPES):
        return {"available": False, "nodes": [], "edges": []}
    entities = await memory.list(caller.scope, "entity", limit=limit)
    relations = await memory.list(caller.scope, "relation", limit=limit)
    nodes = [{"id": e.id, "label": _first(e, "name", "canonical_name", "label") or e.render(), "kind": _first(e, "kind", "entity_type")}
             for e in entities]
    edges = [{"id": r.id, "source": _first(r, "subject_id", "subject"), "target": _first(r, "object_id", "object"),
              "label": _first(r, "predicate", "relation") or "", "rendered": r.render()} for r in relations]
    return {"available": True, "nodes": nodes, "edges": edges}


def _first(record: Any, *fields: str) -> Any:
    for name in fields:
        value = getattr(record, name, None)
        if value:
            return value
    return None


@router.get("/v1/events", tags=["view"], response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": "Change events."}},
            summary="Server-sent events: every write to the caller's scope made through this server or another worker of its store "
            "(a revoked key's stream ends with a 'revoked' event within seconds).")
async def events(caller: CallerDep) -> StreamingResponse:
    changes = caller.state.bus.stream(caller.scope, alive=caller.key_valid, check_every=RECHECK_SECONDS)
    return StreamingResponse(sse_lines(changes), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    return RedirectResponse("/ui")


@router.get("/ui", include_in_schema=False)
async def ui() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


@router.get("/docs", include_in_schema=False)
async def docs() -> FileResponse:
    """The API reference: a page of this package that renders /openapi.json, with a form to try each call."""
    return FileResponse(STATIC / "docs.html", headers={"Cache-Control": "no-store"})


@router.get("/ui/{name}", include_in_schema=False)
async def ui_file(name: str) -> FileResponse:
    files = {p.name: p for p in STATIC.iterdir() if p.suffix in (".js", ".css", ".svg")}
    if name not in files:
        from .errors import ApiError

        raise ApiError(404, "not_found", f"the web view has no file {name!r}")
    return FileResponse(files[name])
