"""What a request depends on: the server's state (one open memory, its tenants, the event bus,
session locks), the caller an API key stands for, and the admin check (FastAPI dependencies
`CallerDep`, `AdminDep`). The routes and the app both import this; it imports neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from memos.batching import QueueLimits
from memos.embeddings import served_embedder
from memos.exceptions import InvalidFilterError, ScopeError
from memos.keyed_locks import KeyedLocks
from memos.memory import MemoryOS
from memos.store.scope import Scope

from .errors import ApiError
from .events import EventBus
from .extraction import Extractions
from .tenancy import RECHECK_SECONDS, ApiKey, Tenants, check_admin, hash_token

__all__ = ["AdminDep", "Caller", "CallerDep", "MAX_BODY_BYTES", "MAX_PENDING", "SCOPE_HEADER", "STORE_THREADS_ENV", "ServeConfig", "ServerState", "get_caller",
           "get_state", "narrowed_scope", "require_admin"]


MAX_PENDING = 256
"""Adds, and searches, a server process lets wait at once before it answers 503: a few batches'
worth, so a caller waits at most a few commits instead of ever longer."""
MAX_BODY_BYTES = 1_000_000
"""Largest request body accepted (413 past it): bigger documents go in several resource records."""
STORE_THREADS_ENV = "TOKIO_WORKER_THREADS"
"""The variable LanceDB's Python binding sizes its runtime's worker threads by
(`ServeConfig.store_threads`, set by `memos.serve.app.cap_store_threads`)."""


@dataclass
class ServeConfig:
    """How `memos serve` runs: which store, which embedder, which keys and model."""

    uri: str | Path = "memos-data"
    embedder: Any = "local"
    admin_key: str | None = None
    """Key for `/admin` (tenant management) and for approving vault reveals; None: both disabled."""
    model: Any = None
    """The chat model (pydantic-ai model or model string) for `/v1/chat`; None: chat is off."""
    manager_model: Any = None
    """The memory manager's model, which extracts memories from posted messages; None: `model`."""
    extract: bool = True
    """Whether `POST /v1/messages` extracts memories from its turns when a request does not say
    (`memos.serve.extraction`); there is nothing to extract with when the server has no model."""
    extract_attempts: int = 3
    extract_backoff: float = 1.0
    """Seconds before an extraction that failed is tried again (doubling each time)."""
    storage_options: dict[str, str] | None = None
    vault_key_file: Path | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    memory: MemoryOS | None = None
    """An already open memory (tests, embedding the app in a program): must live on the server's loop."""
    max_pending: int = MAX_PENDING
    """Adds, and searches, that may wait at once; a request past that is answered 503 with a
    Retry-After header, nothing of it taken (`memos.batching.QueueLimits`)."""
    encoder_threads: int | None = None
    """BLAS threads of one call of the local encoder while the app runs (its lifespan sets
    `MEMOS_ENCODER_THREADS` and restores it after): None, `MEMOS_ENCODER_THREADS` if set, else 1
    (a server's parallelism is its concurrent requests, each encoding apart); 0, the encoder's own
    per-call choice (the cores other processes leave idle)."""
    store_threads: int = 4
    """LanceDB's worker threads in this process, at most the cores (`memos.serve.app.cap_store_threads`,
    applied when the app is made for a store it opens itself); 0: LanceDB's default, one per core."""


@dataclass
class ServerState:
    """What one server process holds: the open memory, its keys, the event bus, session locks."""

    config: ServeConfig
    memory: MemoryOS | None = None
    tenants: Tenants | None = None
    bus: EventBus = field(default_factory=EventBus)
    extractions: Extractions = field(init=False)
    _opening: asyncio.Lock | None = None
    _sessions: KeyedLocks[Scope] = field(default_factory=KeyedLocks)

    def __post_init__(self) -> None:
        self.extractions = Extractions(attempts=self.config.extract_attempts, backoff=self.config.extract_backoff)

    @property
    def extraction_model(self) -> Any:
        """The model that extracts memories from posted messages (None: extraction is off)."""
        return self.config.manager_model if self.config.manager_model is not None else self.config.model

    async def ready(self) -> tuple[MemoryOS, Tenants]:
        """The open memory and tenants (the store is opened by the first request that needs it)."""
        if self.memory is None or self.tenants is None:
            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if self.memory is None:
                    c = self.config
                    self.memory = c.memory or await MemoryOS.open(c.uri, embedder=served_embedder(c.embedder),
                                                                  storage_options=c.storage_options, vault_key_file=c.vault_key_file)
                    self.memory.limits = QueueLimits(max_pending=c.max_pending, when_full="raise")
                    embedder = self.memory.embedder
                    if embedder is not None and embedder.name.startswith("local:"):  # its weights load now, not in a request
                        await embedder.embed_query("warm up")
                    self.tenants = Tenants(self.memory)
                    self.bus.attach(self.memory.storage.notices)  # events of the store's other processes too
        assert self.tenants is not None
        return self.memory, self.tenants

    @contextlib.asynccontextmanager
    async def session_lock(self, scope: Scope) -> AsyncIterator[None]:
        """One lock per conversation: its turns are recorded and its context compiled one at a time,
        in this process (held only while in use: the server keeps no lock per session it has ever
        seen) and then in every process of the store (`MemoryOS.exclusive`: workers of `--workers N`)."""
        memory, _ = await self.ready()
        async with self._sessions.hold(scope), memory.exclusive(f"session\x1f{scope.user_id}\x1f{scope.agent_id}\x1f{scope.session_id}"):
            yield


BEARER = HTTPBearer(scheme_name="bearer", auto_error=False, bearerFormat="API key",
                    description="An API key (`memos keys create`, POST /admin/keys); the admin key for /admin routes.")
"""The security scheme the schema declares; the key is read by `_token` (which also takes X-API-Key)."""
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]


def get_state(request: Request) -> ServerState:
    return request.app.state.memos


def _token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or None


@dataclass(frozen=True)
class Caller:
    """The memory and scope a request acts on, decided by its API key (which a request may only narrow)."""

    memory: MemoryOS
    key: ApiKey
    state: ServerState
    digest: str
    """The key's hash (how `Tenants` finds it again while a long request runs)."""
    narrowed: Scope | None = None
    """The scope the request named in `X-Memos-Scope` (`narrowed_scope`), within the key's; None: the key's."""

    @property
    def scope(self) -> Scope:
        return self.narrowed or self.key.scope

    @property
    def actor(self) -> str:
        return f"api:{self.key.name or self.key.key_id}"

    def session_scope(self, session_id: str) -> Scope:
        return Scope(self.key.user_id, self.scope.agent_id or "", session_id)

    async def key_valid(self) -> bool:
        """Whether the key is still there (read at most `RECHECK_SECONDS` ago): what an open
        stream or a running request asks every `RECHECK_SECONDS`, so a revocation ends it."""
        assert self.state.tenants is not None
        return await self.state.tenants.lookup(self.digest, max_age=RECHECK_SECONDS) is not None


async def get_caller(request: Request, _: Credentials = None) -> Caller:
    state = get_state(request)
    token = _token(request)
    if token is None:
        raise ApiError(401, "unauthorized", "send your API key as 'Authorization: Bearer <key>'; an admin makes keys "
                       "with POST /admin/keys or `memos keys create`")
    memory, tenants = await state.ready()
    digest = hash_token(token)
    key = await tenants.lookup(digest)
    if key is None:
        raise ApiError(401, "unauthorized", "this API key is unknown or revoked; ask the admin for a new one")
    return Caller(memory, key, state, digest, narrowed_scope(key, request.headers.get(SCOPE_HEADER)))


SCOPE_HEADER = "X-Memos-Scope"
"""A request may narrow its key's scope: `{"user_id", "agent_id", "session_id"}` as ASCII JSON
(`memos.client` sends it with every call). The user must be the key's; an agent-bound key's agent
must be its own; a user-wide key may name any of the user's agents; any key may name a session."""


def narrowed_scope(key: ApiKey, header: str | None) -> Scope | None:
    """The scope `header` names, checked against what `key` may act for (`ScopeError` if it may not)."""
    if header is None:
        return None
    try:
        data = json.loads(header)
    except ValueError:
        data = None
    if not isinstance(data, dict) or set(data) - {"user_id", "agent_id", "session_id"} or "user_id" not in data:
        raise InvalidFilterError(f'{SCOPE_HEADER} must be JSON like {{"user_id": "alice", "agent_id": null, "session_id": null}}')
    scope = Scope(data["user_id"], data.get("agent_id"), data.get("session_id"))  # InvalidFilterError for a bad id
    if scope.user_id != key.user_id:
        raise ScopeError(f"this API key acts for user {key.user_id!r}, not {scope.user_id!r}; use that user's key")
    if key.agent_id is not None and scope.agent_id != key.agent_id:
        raise ScopeError(f"this API key is bound to agent {key.agent_id!r} of user {key.user_id!r}; it cannot act for "
                         f"agent {scope.agent_id!r} (None: all agents). Use a user-wide key or that agent's key")
    return scope


async def require_admin(request: Request, _: Credentials = None) -> ServerState:
    state = get_state(request)
    if not state.config.admin_key:
        raise ApiError(403, "admin_disabled", "this server has no admin key; start it with --admin-key or MEMOS_ADMIN_KEY")
    if not check_admin(_token(request), state.config.admin_key):
        raise ApiError(401, "unauthorized", "admin routes need the admin key as 'Authorization: Bearer <admin key>'")
    await state.ready()
    return state


CallerDep = Annotated[Caller, Depends(get_caller)]
AdminDep = Annotated[ServerState, Depends(require_admin)]
