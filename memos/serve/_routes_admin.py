"""Tenant management (`/admin`, admin key only): make, list and revoke API keys; the process's queues."""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from memos.batching import Coalescer
from memos.sentence_encoder import THREADS_ENV

from .deps import STORE_THREADS_ENV, AdminDep
from .errors import ApiError
from .schemas import ERRORS, KeysOut, NewKeyOut, Revoked, StatsOut

__all__ = ["router"]

router = APIRouter(prefix="/admin", tags=["admin"], responses=ERRORS)


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(min_length=1, max_length=256, description="The user whose memory the key opens.")
    agent_id: str | None = Field(None, min_length=1, max_length=256, description="Bind the key to one agent of the user.")
    name: str = Field("", max_length=200, description="A label for the key (shown in the audit trail as api:<name>).")
    clearance: Literal["none", "low", "medium", "high"] = Field(
        "none", description="The most sensitive vault level the key may reveal, each time with an operator's approval.")


@router.post("/keys", status_code=201, response_model=NewKeyOut, summary="Make an API key for a user (the token is shown once).")
async def create_key(state: AdminDep, body: NewKey) -> dict[str, Any]:
    assert state.tenants is not None
    token, key = await state.tenants.create(body.user_id, agent_id=body.agent_id, name=body.name, clearance=body.clearance)
    return {"token": token, "key": key.public()}


@router.get("/keys", response_model=KeysOut, summary="The keys (never their tokens), optionally of one user.")
async def list_keys(state: AdminDep, user_id: Annotated[str | None, Query(max_length=256)] = None) -> dict[str, Any]:
    assert state.tenants is not None
    return {"keys": [k.public() for k in await state.tenants.list(user_id)]}


@router.delete("/keys/{key_id}", response_model=Revoked, summary="Revoke a key (every server process stops accepting it within seconds).")
async def revoke_key(state: AdminDep, key_id: str) -> dict[str, Any]:
    assert state.tenants is not None
    if not await state.tenants.revoke(key_id):
        raise ApiError(404, "unknown_key", f"no key {key_id!r}; GET /admin/keys lists them")
    return {"revoked": key_id}


def _queue(queue: Coalescer[Any, Any]) -> dict[str, Any]:
    return {"calls": queue.calls, "batches": queue.batches, "pending": queue.admission.inside(),
            "busy_s": round(queue.busy_s, 3), "waited_s": round(queue.waited_s, 3)}


@router.get("/stats", response_model=StatsOut, summary="This process's add and search queues since it started.")
async def stats(state: AdminDep) -> dict[str, Any]:
    memory, _ = await state.ready()
    group = memory.group
    queries = memory.embedder.query_queue if memory.embedder is not None else None
    return {"pid": os.getpid(), "adds": _queue(group.queue), "adds_embedding_s": round(group.embedded_s, 3),
            "searches_pending": memory.searches.inside(), "query_embeddings": _queue(queries) if queries is not None else None,
            "encoder_threads": os.environ.get(THREADS_ENV), "store_threads": os.environ.get(STORE_THREADS_ENV),
            "store_retries": dataclasses.asdict(retries) if (retries := getattr(memory.storage, "retries", None)) is not None else None}
