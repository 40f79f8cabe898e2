"""API keys and the scope each one grants: who a request is, decided by its key alone.

A key is a random token shown once when it is made; the store keeps only its SHA-256 (a
token of 256 random bits needs no slow hash: nothing guessable is being protected). Each key
is bound to a user and optionally one agent, so a request's scope comes from its key and never
from its body or URL. A key can also carry a vault clearance (the most sensitive level it may
reveal, and then only with an operator's approval; see `memos.serve._routes_memory`).

Keys live in the store's state (its meta table, through `MemoryOS.state`) (`apikey:<hash>` entries), not in a sidecar file: several
server processes on one store, on a disk or on object storage, then share the keys with no
state but the store. Each process caches what it read for `CACHE_SECONDS`, so a revoked key
stops working everywhere within that time (at once in the process that revoked it); a new key
works at once in the process that made it and in the others within about 1.5 s (the store's
read-consistency interval plus `MISS_SECONDS`).
"""

from __future__ import annotations

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

__all__ = ["ApiKey", "CACHE_SECONDS", "KEY_PREFIX", "MISS_SECONDS", "Tenants", "check_admin", "hash_token"]

KEY_PREFIX = "apikey:"
CACHE_SECONDS = 5.0
MISS_SECONDS = 0.5
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
    """None: every agent of the user; a name: only that agent's records and core blocks."""
    name: str = ""
    clearance: Clearance = "none"
    """The most sensitive vault level this key may reveal (with approval); "none": no reveals."""
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

    async def create(self, user_id: str, *, agent_id: str | None = None, name: str = "",
                     clearance: Clearance = "none") -> tuple[str, ApiKey]:
        """Make a key for a user (and agent); returns the token (shown once) and what it grants."""
        validate_value(user_id, "user_id")
        if agent_id is not None:
            validate_value(agent_id, "agent_id")
        token = "mk_" + secrets.token_urlsafe(32)
        digest = hash_token(token)
        key = ApiKey(digest[:12], user_id, agent_id, name[:200], clearance, datetime.now(UTC).isoformat(timespec="seconds"))
        await self.memory.set_state(KEY_PREFIX + digest, json.dumps(key.public()))
        self._keys[digest] = key
        return token, key

    async def list(self, user_id: str | None = None) -> list[ApiKey]:
        """Every key (or a user's), oldest first."""
        await self._reload()
        keys = [k for k in self._keys.values() if user_id in (None, k.user_id)]
        return sorted(keys, key=lambda k: (k.created_at, k.key_id))

    async def revoke(self, key_id: str) -> bool:
        """Delete the key whose id is `key_id`; False if there is none."""
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
        digest = hash_token(token)
        age = time.monotonic() - self._read_at
        # a key made by another process is seen within MISS_SECONDS (unknown tokens cannot force more reads)
        if age > self.cache_seconds or (digest not in self._keys and age > MISS_SECONDS):
            await self._reload()
        return self._keys.get(digest)

    async def _reload(self) -> None:
        meta = await self.memory.state()
        keys = {}
        for entry, value in meta.items():
            if entry.startswith(KEY_PREFIX):
                data = json.loads(value)
                keys[entry[len(KEY_PREFIX):]] = ApiKey(**data)
        self._keys = keys
        self._read_at = time.monotonic()
