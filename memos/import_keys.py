"""Stable ids for imported conversation turns, so importing the same file twice stores each turn once.

An imported turn's id is derived from what identifies it (`import_ids`): the scope it is stored
in (user, agent, session), who said it, when (as the file gives it; a turn without a time has
none, not the import's), what was said, its own message id, and how many identical turns came
before it in the same import: two "ok"s in one file are two turns, and the same file again
yields the same two ids. `unstored_turns` keeps the turns whose id no record holds yet; `memos
ingest` stores only those and says how many it skipped (`--allow-duplicates` stores every turn
again under fresh ids, as `MemoryOS.ingest` does).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memos.ingest import Message
from memos.memtypes import Episode
from memos.store.scope import Scope

if TYPE_CHECKING:
    from memos.memory import MemoryOS

__all__ = ["import_ids", "unstored_turns"]

PREFIX = "turn-"


def import_ids(scope: Scope, messages: Sequence[Message]) -> list[str]:
    """The stable id of each imported message in `scope` (see the module docstring)."""
    stamp = scope.stamp()
    seen: Counter[str] = Counter()
    ids = []
    for m in messages:
        key = json.dumps([stamp["user_id"], stamp["agent_id"], stamp["session_id"], m.actor,
                          m.timestamp.isoformat() if m.timestamp else "", m.text, m.id or ""], ensure_ascii=False)
        seen[key] += 1
        ids.append(PREFIX + hashlib.sha256(f"{key}\n{seen[key]}".encode()).hexdigest()[:32])
    return ids


async def unstored_turns(memory: MemoryOS, scope: Scope, rows: Sequence[Message | dict[str, Any]]) -> tuple[list[Episode], int]:
    """The episodes of `rows` (checked as `MemoryOS.ingest` checks them) that are not stored yet,
    under their stable ids, and how many were stored before. Nothing is written."""
    episodes = memory.turn_episodes(scope, rows)  # a bad message raises here, before anything is read
    messages = [r if isinstance(r, Message) else Message.model_validate(r) for r in rows]
    ids = import_ids(scope, messages)
    stored = await memory.id_owners(ids)
    fresh = [e.model_copy(update={"id": i}) for e, i in zip(episodes, ids, strict=True) if i not in stored]
    return fresh, len(episodes) - len(fresh)
