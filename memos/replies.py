"""A question and the reply it got: what a top-k search returns for a conversation turn that asks.

A turn that asks (`房租贵吗？`, "How is the new job?") ranks high for a query about its
subject, for it holds the subject's words, but what a caller of a `k=3` search wants is the
answer, which is the next turn (`每个月六千五`) and often shares none of those words. So each
of the k hits that is a question brings the reply it got right behind it, as one more hit
marked `reply_to` (a hit's turn is a question when it ends with a question mark; the reply is
the next turn of the same session, said by someone else, within the neighbour window). A
budgeted search already brings the turns around its best hits (`memos.retrieval`), so this
is for top-k searches only. Measured on the Chinese set, full-text only: top-3 0.667 -> 0.737
(half a 17 -> 19 of 29, half b 21 -> 23 of 28), 0.56 more records a question; on LOCOMO dev
with the default embedder top-3 0.462 -> 0.507 (README "Languages").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from .ranking import Hit
from .scope import Scope, Where
from .storage import Storage

__all__ = ["asks", "session_turns", "with_replies"]

_ASKS = re.compile(r"[?？]\W*$")


def asks(text: str) -> bool:
    """Whether a turn ends with a question (`?` or the full-width `？`, before any closing
    quotes, brackets or emoji)."""
    return _ASKS.search(text.rstrip()) is not None


async def session_turns(storage: Storage, scope: Scope, statuses: Sequence[str], turns_store: str,
                        windows: list[tuple[Any, Any]]) -> dict[tuple[str, str, str], list[Any]]:
    """The turns of `scope` inside any of `windows` (one query), as records grouped by session
    (user, agent, session) in the order they were said."""
    table = storage.type_table(turns_store)
    where = Where(scope).status_in(statuses).any_time_window(table.record_type.time_field, windows).build()
    rows = await storage.rows(turns_store, where, limit=60 * len(windows), columns=None)
    by_session: dict[tuple[str, str, str], list[Any]] = {}
    for record in sorted((table.to_record(r) for r in rows), key=lambda r: (r.event_time(), r.id)):
        by_session.setdefault((record.user_id, record.agent_id, record.session_id), []).append(record)
    return by_session


async def with_replies(storage: Storage, scope: Scope, statuses: Sequence[str], window_minutes: float,
                       hits: list[Hit], turns_store: str) -> list[Hit]:
    """`hits` with the reply to each hit that asks a question right behind it (one query, only
    when a hit asks); a reply already among the hits is not repeated."""
    anchors = [h for h in hits if h.memory_type == turns_store and getattr(h.record, "event_type", "") == "message"
               and asks(getattr(h.record, "summary", ""))]
    if not anchors:
        return hits
    reach = timedelta(minutes=window_minutes)
    turns = await session_turns(storage, scope, statuses, turns_store,
                                [(a.record.event_time(), a.record.event_time() + reach) for a in anchors])
    replies: dict[str, Hit] = {}
    for anchor in anchors:
        session = turns.get((anchor.record.user_id, anchor.record.agent_id, anchor.record.session_id), [])
        ids = [t.id for t in session]
        if anchor.id in ids and ids.index(anchor.id) + 1 < len(ids):
            reply = session[ids.index(anchor.id) + 1]
            if reply.actor != anchor.record.actor:
                replies[anchor.id] = Hit(turns_store, reply, anchor.score, {"reply_to": 1.0})
    out: list[Hit] = []
    seen = {h.id for h in hits}
    for hit in hits:
        out.append(hit)
        reply = replies.get(hit.id)
        if reply is not None and reply.id not in seen:
            out.append(reply)
            seen.add(reply.id)
    return out
