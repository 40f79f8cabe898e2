"""What completes a conversation turn in a top-k search: the reply to a question, the other
half of an exchange.

A turn that asks (`房租贵吗？`, "How is the new job?") ranks high for a query about its
subject, for it holds the subject's words, but what a caller of a `k=3` search wants is the
answer, which is the next turn (`每个月六千五`) and often shares none of those words. So each
of the k hits that is a question carries the reply it got inside it (`Hit.attached`, marked
`reply_to`): a k-search still returns k hits, each whole. A hit's turn is a question when it
ends with a question mark; the reply is the next turn of the same session, said by someone
else, within the neighbour window.

Conversations also run statement, follow-up question, answer: `我跟周婷求婚了` / `什么时候的事？`
/ `上个星期六，在外滩的一家法餐厅`. The answer holds what the statement left out and none of
its words; alone, it does not say what it is about. So a statement among the hits brings the
answer its speaker gave to the question it drew, and such an answer brings the statement,
attached to it and marked `exchange` (`exchange_partners`).

A budgeted search already brings the turns around its best hits (`memos.retrieval.search`), so this
is for top-k searches only. What the replies and exchanges add to a top-3 search, on the
Chinese set and on LOCOMO dev, is in docs/languages.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from memos.store.protocol import Store
from memos.store.scope import Scope, Where
from memos.time_bounds import shift

from .ranking import Hit

__all__ = ["antecedent", "asks", "exchange_partners", "own_window", "refers_back", "reply_at", "session_turns", "with_replies"]

_ASKS = re.compile(r"[?？]\W*$")


def asks(text: str) -> bool:
    """Whether a turn ends with a question (`?` or the full-width `？`, before any closing
    quotes, brackets or emoji)."""
    return _ASKS.search(text.rstrip()) is not None


async def session_turns(storage: Store, scope: Scope, statuses: tuple[str, ...], turns_store: str,
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


async def with_replies(storage: Store, scope: Scope, statuses: tuple[str, ...], window_minutes: float,
                       hits: list[Hit], turns_store: str) -> list[Hit]:
    """`hits`, each conversation turn among them with what completes it attached (`Hit.attached`;
    one query, only when a hit is a turn): the reply to a turn that asks, and the other half of
    an exchange (`exchange_partners`). Still `len(hits)` hits: what is attached belongs to its
    hit. A turn already among the hits (or attached to one before) is not repeated."""
    anchors = [h for h in hits if h.memory_type == turns_store and getattr(h.record, "event_type", "") == "message"]
    if not anchors:
        return hits
    reach = timedelta(minutes=window_minutes)
    turns = await session_turns(storage, scope, statuses, turns_store,
                                [(shift(a.record.event_time(), -reach), shift(a.record.event_time(), reach)) for a in anchors])
    brought: dict[str, list[Hit]] = {}
    for anchor in anchors:
        session = own_window(turns, anchor.record, reach)
        ids = [t.id for t in session]
        if anchor.id not in ids:
            continue
        at = ids.index(anchor.id)
        reply = reply_at(session, at)
        if reply is not None:
            brought.setdefault(anchor.id, []).append(Hit(turns_store, reply, anchor.score, {"reply_to": 1.0}))
        for partner in exchange_partners(session, at):
            brought.setdefault(anchor.id, []).append(Hit(turns_store, partner, anchor.score, {"exchange": 1.0}))
        if (before := antecedent(session, at)) is not None:
            brought.setdefault(anchor.id, []).append(Hit(turns_store, before, anchor.score, {"refers_to": 1.0}))
    seen = {h.id for h in hits}
    for hit in hits:
        for extra in brought.get(hit.id, []):
            if extra.id not in seen:
                hit.attached.append(extra)
                seen.add(extra.id)
    return hits


def own_window(by_session: Mapping[tuple[str, str, str], Sequence[Any]], record: Any, reach: timedelta) -> list[Any]:
    """The turns of `record`'s session within `reach` of it, of those `session_turns` read for windows
    of that reach: all of them were read, so turns next to each other here are next to each other
    in the conversation (another record's window may add turns beyond a gap in it)."""
    when = record.event_time()
    return [t for t in by_session.get((record.user_id, record.agent_id, record.session_id), []) if abs(t.event_time() - when) <= reach]


def reply_at(session: Sequence[Any], at: int) -> Any | None:
    """The reply the turn `session[at]` got, if it asks: the next turn, said by someone else."""
    turn = session[at]
    if not asks(turn.summary) or at + 1 >= len(session) or session[at + 1].actor == turn.actor:
        return None
    return session[at + 1]


_REFERS_BACK = re.compile(
    r"^(?:(?:哈哈+|嗯+|对|是的|没错|好|哦|啊)[，,！!。 ]*)*(?:她们|他们|它们|她|他|它|这个人|那个人)"
    r"|^(?:(?:haha|yes|yeah|oh|ah|well|right)[,!. ]+)*(?:she|he|they)\b", re.IGNORECASE)


def refers_back(text: str) -> bool:
    """Whether a turn opens on a third person it does not name (`她已经是我们的第一个 beta tester 了`,
    "He loved it!"): who it is about was said before."""
    return _REFERS_BACK.search(text.lstrip()) is not None


def antecedent(session: Sequence[Any], at: int) -> Any | None:
    """The turn `session[at]` refers back to when it opens on a person it does not name: the
    turn before it, said by someone else (`可以让她当测试用户` before `她已经是...beta tester 了`)."""
    turn = session[at]
    if at < 1 or not refers_back(turn.summary) or session[at - 1].actor == turn.actor:
        return None
    return session[at - 1]


def exchange_partners(session: Sequence[Any], at: int) -> list[Any]:
    """The other halves of the exchanges the turn `session[at]` is part of (none, one or two).

    An exchange is a statement, a question it drew from someone else, and its speaker's answer
    (`我跟周婷求婚了` / `什么时候的事？` / `上个星期六，在外滩的一家法餐厅`): the answer holds what
    the statement left out and often none of its words, and the answer alone does not say what
    it is about. So a statement brings the answer, and an answer brings the statement (the
    question in between is left out: it adds a record and rarely a fact). A turn can be both:
    the answer to one question and the statement that draws the next."""
    turn = session[at]
    if asks(turn.summary):
        return []
    out = []
    if at >= 2:  # an answer to a follow-up question: the statement that drew it
        statement, question = session[at - 2], session[at - 1]
        if question.actor != turn.actor and asks(question.summary) and statement.actor == turn.actor and not asks(statement.summary):
            out.append(statement)
    if at + 2 < len(session):  # a statement: the answer to the question it drew
        question, answer = session[at + 1], session[at + 2]
        if question.actor != turn.actor and asks(question.summary) and answer.actor == turn.actor:
            out.append(answer)
    return out
