"""Where reflection keeps its state: the meta key `reflection:<user>:<agent>:<session>` of a scope.

Written by the reflection job (`memos.jobs.runs.reflect`), read there and by a session (which shows
when memory last reflected); its own module so that the session reads it without the jobs.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from memos.store.scope import Scope

__all__ = ["StateReader", "key_user", "reflection_key", "reflection_state", "scope_key"]


class StateReader(Protocol):
    """A memory whose small key/value state can be read (`memos.memory.MemoryOS.state`)."""

    async def state(self, *, cached: bool = ...) -> dict[str, str]: ...


def scope_key(scope: Scope) -> str:
    """`user:agent:session` ('*' for an id the scope leaves open), one key per scope: an id's own
    '%', ':' and '*' are written %25, %3A and %2A (user 'a:b' with agent 'c' and user 'a' with
    agent 'b:c' were one key, and so were agent '*' and no agent); other ids are as they are."""
    return ":".join([_key_part(scope.user_id), _key_part(scope.agent_id), _key_part(scope.session_id)])


def _key_part(value: str | None) -> str:
    """An id as one part of a ':'-joined key ('*' for None; see `scope_key`)."""
    if value is None:
        return "*"
    return value.replace("%", "%25").replace(":", "%3A").replace("*", "%2A") if any(c in value for c in "%:*") else value


def key_user(key: str) -> str:
    """The user id of a `reflection_key` (what `memos forget` matches its state by)."""
    user = key.removeprefix("reflection:").rsplit(":", 2)[0]
    return user.replace("%3A", ":").replace("%2A", "*").replace("%25", "%") if "%" in user else user


def reflection_key(scope: Scope) -> str:
    """The meta key of `scope`'s reflection state."""
    return f"reflection:{scope_key(scope)}"


async def reflection_state(memory: StateReader, scope: Scope, meta: dict[str, str] | None = None) -> dict[str, Any]:
    """{"last_at": datetime | None, ...} of the scope's last reflection (meta key `reflection:<scope>`).

    Pass `meta` (from `MemoryOS.state()`) to look up several scopes with one read."""
    meta = meta if meta is not None else await memory.state()
    raw = meta.get(reflection_key(scope))
    if raw is None:  # kept by a version before ids were escaped ('org:42' is 'org%3A42' now): read until it is written again
        raw = meta.get("reflection:" + ":".join([scope.user_id, scope.agent_id or "*", scope.session_id or "*"]))
    state = json.loads(raw) if raw else {}
    state["last_at"] = datetime.fromisoformat(state["last_at"]) if state.get("last_at") else None
    return state
