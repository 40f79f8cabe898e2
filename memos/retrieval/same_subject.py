"""The second round of a budgeted search: what the best turns' subjects were, on other dates.

Memories about one subject change over time ("my best 5k is 27:30" in March, "new PB: 25:50!" in
June), and a question about it ("what is my best 5k time now?", "how many marathons have I run?")
needs them all, the newest recognised as current. The first round finds the turn that matches the
question best; the turns about the same subject said on other days often match the question less
(another wording, the value only) but match that turn well. So each of the best few turns
(`anchors`) is searched with its own stored vector among the turns of the other sessions
(`memos.retrieval.aggregation.session_of`), and the close ones (cosine at least a floor) join it:
the anchor and its same-subject turns sit together in the hit list, newest first, each of the
others marked `same_subject` (its similarity). One read of the anchors' vectors and one vector
query per anchor, run concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from memos.store.protocol import Store
from memos.store.scope import Where

from .aggregation import session_of
from .ranking import Hit

__all__ = ["with_same_subject"]


async def with_same_subject(storage: Store, where: str | None, turns_store: str, hits: list[Hit], anchors: int,
                            per_anchor: int, min_similarity: float, exclude: frozenset[str] = frozenset()) -> list[Hit]:
    """`hits` with the same-subject turns of other sessions (within `where`, the search's
    conditions on the turns; none of `exclude`) behind each of the first `anchors` turns (at
    most `per_anchor` each, cosine >= `min_similarity`), every such group newest first; a turn
    found for an earlier anchor, or ranked above its anchor already, stays where it is."""
    chosen = _anchors(hits, turns_store, anchors)
    if not chosen:
        return hits
    table = storage.type_table(turns_store)
    time_field = table.record_type.time_field
    found = await storage.columns(turns_store, _within(where).id_in([a.id for a in chosen]).build(), ["id", "vector"])
    vectors = dict(zip(found["id"].to_pylist(), found["vector"].to_pylist(), strict=True))
    chosen = [a for a in chosen if vectors.get(a.id) is not None]
    lists = await asyncio.gather(*(
        storage.vector_search(turns_store, vectors[a.id], _elsewhere(where, time_field, a), per_anchor) for a in chosen))
    place = {hit.id: at for at, hit in enumerate(hits)}
    out = list(hits)
    taken = {a.id for a in chosen}
    for anchor, rows in zip(chosen, lists, strict=True):
        for row in rows:
            similarity = 1.0 - float(row.get("_distance", 1.0))
            score = anchor.score * similarity
            ids = [h.id for h in out]
            at = ids.index(anchor.id)
            if similarity < min_similarity or row["id"] in taken or row["id"] in exclude or place.get(row["id"], len(hits)) < place[anchor.id]:
                continue
            if row["id"] in place and out[ids.index(row["id"])].score >= score:
                continue  # ranked as high already on its own
            taken.add(row["id"])
            if row["id"] in place:
                out.pop(ids.index(row["id"]))
            match = Hit(turns_store, table.to_record(row), score, {"same_subject": similarity})
            slot = next((i for i in range(at + 1, len(out)) if out[i].score < score), len(out))
            out.insert(slot, match)
            if match.record.event_time() > anchor.record.event_time():  # the newer value first: it is the current one
                out[at], out[slot] = out[slot], out[at]
    return out


def _anchors(hits: Sequence[Hit], turns_store: str, count: int) -> list[Hit]:
    """The first `count` conversation turns among `hits`, one per session."""
    out: list[Hit] = []
    sessions: set[Any] = set()
    for hit in hits:
        if len(out) >= count:
            break
        if hit.memory_type != turns_store or getattr(hit.record, "event_type", "") != "message":
            continue
        session = session_of(hit.record)
        if session not in sessions:
            sessions.add(session)
            out.append(hit)
    return out


def _within(where: str | None) -> Where:
    return Where().raw(where) if where else Where()


def _elsewhere(where: str | None, time_field: str, anchor: Hit) -> str | None:
    """The turns in `where` outside the anchor's session (its session id on its day)."""
    when = anchor.record.event_time()
    day = datetime(when.year, when.month, when.day, tzinfo=when.tzinfo)
    own = Where().eq("session_id", anchor.record.session_id).time_range(time_field, day, day + timedelta(days=1)).build()
    return _within(where).raw(f"NOT ({own})").build()
