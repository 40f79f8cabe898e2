"""Hybrid retrieval across the typed stores: the one search every caller uses.

For each chosen store it runs a vector query and a native full-text query inside the scope
(and time / tag / status filters), concurrently, then fuses all lists by rank
(`memos.ranking.fuse`) and, given a budget, packs the best hits into it
(`memos.packing.pack`). Agents' active retrieval, the memory tools, the CLI and the
benchmarks all come through `search`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .embeddings import TextEmbedder
from .packing import pack
from .ranking import Candidate, Hit, RankingPolicy, fuse, rank_rows
from .scope import Scope, Where
from .storage import Storage

__all__ = ["SearchRequest", "fts_query", "search"]

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_CHARS = 4_000


def fts_query(text: str) -> str:
    """The query as plain words for the full-text index (no operators, quotes or field syntax)."""
    return " ".join(_WORD.findall(text[:MAX_QUERY_CHARS]))


@dataclass(frozen=True)
class SearchRequest:
    """What to look for and where."""

    query: str
    scope: Scope
    types: Sequence[str]
    k: int = 10
    budget_tokens: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    tags: list[str] | None = None
    statuses: tuple[str, ...] = ("active",)
    policy: RankingPolicy = field(default_factory=RankingPolicy)


async def search(
    storage: Storage,
    embedder: TextEmbedder | None,
    request: SearchRequest,
    now: datetime,
    count_tokens: Callable[[str], int],
) -> list[Hit]:
    """Ranked hits for `request`; with a budget, only those that fit it."""
    text = fts_query(request.query)
    vector = await embedder.embed_query(request.query[:MAX_QUERY_CHARS]) if embedder and request.query.strip() else None
    per_list = max(2 * request.k, 20, (request.budget_tokens or 0) // 15)  # enough candidates to fill the budget
    jobs = []
    present = await asyncio.gather(*(storage.has_rows(name) for name in request.types))
    for name in [n for n, has in zip(request.types, present, strict=True) if has]:
        table = storage.type_table(name)
        where = (
            Where(request.scope)
            .status_in(request.statuses)
            .time_range(table.record_type.time_field, request.since, request.until)
            .tags_any(request.tags)
            .build()
        )
        if vector is not None:
            jobs.append(_run(storage.vector_search(name, vector, where, per_list), name, "vector", table.to_record))
        if text:
            jobs.append(_run(storage.text_search(name, text, where, per_list), name, "text", table.to_record))
    lists = await asyncio.gather(*jobs)
    candidates: list[Candidate] = [c for lst in lists for c in lst]
    hits = fuse(candidates, request.policy, now)
    if request.policy.neighbours and "episodic" in request.types:
        hits = await _with_neighbours(storage, request, hits)
    if request.budget_tokens is not None:
        return pack(hits, request.budget_tokens, count_tokens)
    return hits[: request.k]


async def _run(rows_coro, memory_type: str, source: str, to_record) -> list[Candidate]:  # type: ignore[no-untyped-def]
    rows = await rows_coro
    return rank_rows(memory_type, rows, source, to_record)


async def _with_neighbours(storage: Storage, request: SearchRequest, hits: list[Hit]) -> list[Hit]:
    """Put the turn before and after each of the best turns right behind it (one extra query)."""
    policy = request.policy
    if request.budget_tokens is None:  # a top-k search returns k records, not context around them
        return hits
    count = min(policy.neighbours, request.budget_tokens // max(1, policy.neighbour_budget_tokens))
    anchors = [h for h in hits if h.memory_type == "episodic" and getattr(h.record, "event_type", "") == "message"][:count]
    if not anchors:
        return hits
    reach = timedelta(minutes=policy.neighbour_window_minutes)
    table = storage.type_table("episodic")
    where = (Where(request.scope).status_in(request.statuses)
             .any_time_window("occurred_at", [(a.record.event_time() - reach, a.record.event_time() + reach) for a in anchors])
             .build())
    rows = await storage.rows("episodic", where, limit=60 * len(anchors), columns=None)
    nearby = sorted((table.to_record(r) for r in rows), key=lambda r: (r.event_time(), r.id))
    by_session: dict[tuple[str, str, str], list[Any]] = {}
    for record in nearby:
        by_session.setdefault((record.user_id, record.agent_id, record.session_id), []).append(record)
    extra: dict[str, list[Hit]] = {}
    for anchor in anchors:
        turns = by_session.get((anchor.record.user_id, anchor.record.agent_id, anchor.record.session_id), [])
        ids = [t.id for t in turns]
        if anchor.id not in ids:
            continue
        at = ids.index(anchor.id)
        for record in (turns[at - 1] if at > 0 else None, turns[at + 1] if at + 1 < len(turns) else None):
            if record is not None:
                extra.setdefault(anchor.id, []).append(Hit("episodic", record, anchor.score, {"neighbour_of": 1.0}))
    out: list[Hit] = []
    seen: set[str] = set()
    for hit in hits:
        if hit.id in seen:
            continue
        out.append(hit)
        seen.add(hit.id)
        for neighbour in extra.get(hit.id, []):
            if neighbour.id not in seen:
                out.append(neighbour)
                seen.add(neighbour.id)
    return out
