"""The keys of a session's state in the store's meta table, built and read in one place.

A session's running summary and turn ids (`memos.context.session`) and the memory manager's
failed batches kept for a retry (`memos.agents.chat`) are stored under `session:` and `manager:`
keys naming the user, agent and session as JSON. `key_owner` reads the user back: forgetting a
user removes their keys (`memos.portability`), and the vault rewrites their summaries
(`memos.vault`).
"""

from __future__ import annotations

import json

from memos.store.scope import Scope

__all__ = ["MANAGER", "SESSION", "key_owner", "manager_key", "session_key"]

SESSION = "session:"
MANAGER = "manager:"


def session_key(scope: Scope) -> str:
    """Where a session's working state is kept."""
    return SESSION + json.dumps([scope.user_id, scope.agent_id, scope.session_id])


def manager_key(scope: Scope) -> str:
    """Where the memory manager keeps a session's failed batches for a retry."""
    return MANAGER + json.dumps([scope.user_id, scope.agent_id, scope.session_id])


def key_owner(key: str, prefixes: tuple[str, ...] = (SESSION, MANAGER)) -> str | None:
    """The user a `session:` or `manager:` key (of `prefixes`) belongs to; None for another key or a malformed one."""
    if not key.startswith(prefixes):
        return None
    try:
        return str(json.loads(key.split(":", 1)[1])[0])
    except (ValueError, IndexError, KeyError, TypeError):
        return None
