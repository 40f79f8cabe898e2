"""API keys and the scope each one grants: who a request is, decided by its key alone.

A key is a random token shown once when it is made; the store keeps only its SHA-256 (a
token of 256 random bits needs no slow hash: nothing guessable is being protected). Each key
is bound to a user and optionally one agent, so a request's scope comes from its key and never
from its body or URL; a request may only narrow it (`X-Memos-Scope`, `memos.serve.deps.narrowed_scope`). A key can also carry a vault clearance (the most sensitive level it may
reveal, and then only with an operator's approval; see `memos.serve._routes_memory`).

Keys live in the store's state (its meta table, through `MemoryOS.state`) (`apikey:<hash>` entries), not in a sidecar file: several
server processes on one store, on a disk or on object storage, then share the keys with no
state but the store. Each process caches the keys it read. On a local store it reads them again
as soon as another process has made or revoked one (`MemoryOS.state_epoch`: a counter beside the
tables, one 8-byte read a request), so a key made or revoked through one worker of `memos serve
--workers N` is known to every other worker by its next request. Where a store cannot tell
(object storage) a process trusts what it read for `CACHE_SECONDS`, so a revoked key stops
working everywhere within that time plus the store's 1 s read-consistency interval, and a new
key works in the other processes within about 1.5 s (that interval plus `MISS_SECONDS`); the
same times bound a local store's, should a process die between writing a key and counting it.
In the process that made or revoked a key it is at once, everywhere. A request that is still
running (an open event stream, a chat turn) re-checks its key every `RECHECK_SECONDS` against
keys read at most that long ago, and ends once it is revoked.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from memos.store.scope import Scope, validate_value

if TYPE_CHECKING:
    from memos.memory import MemoryOS

__all__ = ["ApiKey", "CACHE_SECONDS", "KEY_PREFIX", "MISS_SECONDS", "RECHECK_SECONDS", "Tenants", "check_admin", "hash_token"]

KEY_PREFIX = "apikey:"
FAMILY = KEY_PREFIX.rstrip(":")
"""The keys' family of state entries (`MemoryOS.state_epoch`)."""
CACHE_SECONDS = 3.0
"""How long a process trusts the keys it read: with the store's 1 s read consistency, a key
revoked in another process is refused within 4 s (the promise is 5 s)."""
MISS_SECONDS = 0.5
RECHECK_SECONDS = 1.0
"""How often an open stream or a running request re-checks its key, each time against keys read
at most this long ago (one read of the keys per interval in a process, however many streams)."""
Clearance = Literal["none", "low", "medium", "high"]


def hash_token(token: str) -> str:
    """The stored form of a key (hex SHA-256)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_admin(given: str | None, admin_key: str | None) -> bool:
    """True when `given` is the admin key (constant-time compare; no admin key configured: never)."""
    if not admin_key or not given:
        return False
    return hmac.compare_digest(hash_token(given), hash_token(admin_key))


@dataclass(frozen=True)
class ApiKey:
    """What one key grants: a user's scope (optionally one agent's) and a vault clearance."""

    key_id: str
    """The first 12 hex digits of the key's hash: how an admin names it (never the token)."""
    user_id: str
    agent_id: str | None = None
    """None: every agent of the user (its writes are shared); a name: that agent's records and core
    blocks and the user's shared ones (stored without an agent; `memos.store.scope`)."""
    name: str = ""
    clearance: Clearance = "none"
    """The most sensitive vault level this key may reveal (with approval) and whose items' secret or
    sensitivity it may change (lowering one with approval); "none": neither."""
    created_at: str = ""

    @property
    def scope(self) -> Scope:
        """The scope every request made with this key acts in."""
        return Scope(self.user_id, self.agent_id)

    def public(self) -> dict[str, object]:
        return asdict(self)


class Tenants:
    """Creates, lists, revokes and resolves API keys in one store's meta table."""

    def __init__(self, memory: MemoryOS, *, cache_seconds: float = CACHE_SECONDS) -> None:
        self.memory = memory
        self.cache_seconds = cache_seconds
        self._keys: dict[str, ApiKey] = {}
        self._read_at = float("-inf")
        self._epoch: object = None  # the keys' epoch (`MemoryOS.state_epoch`) when they were last read
        self._reading = asyncio.Lock()
        """Held while the keys are read or changed: a read that began before a revocation never
        puts the revoked key back, and concurrent checks share one read."""

    async def create(self, user_id: str, *, agent_id: str | None = None, name: str = "",
                     clearance: Clearance = "none") -> tuple[str, ApiKey]:
        """Make a key for a user (and agent); returns the token (shown once) and what it grants."""
        validate_value(user_id, "user_id")
        if agent_id is not None:
            validate_value(agent_id, "agent_id")
        token = "mk_" + secrets.token_urlsafe(32)
        digest = hash_token(token)
        key = ApiKey(digest[:12], user_id, agent_id, name[:200], clearance, datetime.now(UTC).isoformat(timespec="seconds"))
        async with self._reading:
            await self.memory.set_state(KEY_PREFIX + digest, json.dumps(key.public()))
            self._keys[digest] = key
        return token, key

    async def list(self, user_id: str | None = None) -> list[ApiKey]:
        """Every key (or a user's), oldest first."""
        await self._refresh()
        keys = [k for k in self._keys.values() if user_id in (None, k.user_id)]
        return sorted(keys, key=lambda k: (k.created_at, k.key_id))

    async def revoke(self, key_id: str) -> bool:
        """Delete the key whose id is `key_id`; False if there is none."""
        async with self._reading:
            await self._reload()
            digests = [d for d, k in self._keys.items() if k.key_id == key_id]
            if not digests:
                return False
            await self.memory.delete_state([KEY_PREFIX + d for d in digests])
            for digest in digests:
                self._keys.pop(digest, None)
        return True

    async def resolve(self, token: str) -> ApiKey | None:
        """The key a request presented, or None if it is unknown or revoked."""
        return await self.lookup(hash_token(token))

    async def lookup(self, digest: str, *, max_age: float | None = None) -> ApiKey | None:
        """The key whose hash is `digest`, or None if it is unknown or revoked, checked against keys
        read at most `max_age` seconds ago (default `CACHE_SECONDS`)."""
        limit = self.cache_seconds if max_age is None else min(max_age, self.cache_seconds)
        epoch = self.memory.state_epoch(FAMILY)
        if epoch is None and digest not in self._keys:  # a key made by another process is seen within
            limit = min(limit, MISS_SECONDS)  # MISS_SECONDS (unknown tokens cannot force more reads than that)
        if (epoch is not None and epoch != self._epoch) or time.monotonic() - self._read_at > limit:
            await self._refresh(limit)
        return self._keys.get(digest)

    async def _refresh(self, older_than: float | None = None) -> None:
        """Read the keys again, unless `older_than` is given and a read that began less than that
        many seconds ago (perhaps one this call waited for) already did, and no process has made or
        revoked a key since it began (concurrent requests after a change share one read)."""
        async with self._reading:
            epoch = self.memory.state_epoch(FAMILY)
            if older_than is None or (epoch is not None and epoch != self._epoch) or time.monotonic() - self._read_at > older_than:
                await self._reload()

    async def _reload(self) -> None:
        started = time.monotonic()
        epoch = self.memory.state_epoch(FAMILY)  # before the read: a key written meanwhile moves it again
        meta = await self.memory.state()
        keys = {}
        for entry, value in meta.items():
            if entry.startswith(KEY_PREFIX):
                data = json.loads(value)
                keys[entry[len(KEY_PREFIX):]] = ApiKey(**data)
        self._keys = keys
        self._read_at = started
        self._epoch = epoch
