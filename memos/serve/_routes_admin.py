"""Tenant management (`/admin`, admin key only): make, list and revoke API keys."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from .deps import AdminDep
from .errors import ApiError
from .schemas import ERRORS, KeysOut, NewKeyOut, Revoked

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
