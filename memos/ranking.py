"""Pure ranking: fuse ranked candidate lists and weigh them by recency and importance.

No I/O here. `memos.retrieval` runs the queries and hands their ranked rows to `fuse`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memtypes import MemoryRecord

__all__ = ["Candidate", "Hit", "RankingPolicy", "fuse", "rank_rows"]


@dataclass(frozen=True)
class RankingPolicy:
    """Knobs of the fused score. Defaults are tuned on the LOCOMO dev split (see README)."""

    rrf_k: float = 60.0
    """Reciprocal-rank-fusion constant: larger flattens the contribution of top ranks."""
    vector_weight: float = 1.0
    """Weight of the dense (embedding) list in the fusion."""
    text_weight: float = 1.0
    """Weight of the full-text (BM25) list in the fusion."""
    importance_weight: float = 0.2
    """Multiplier 1 + w * (importance - 0.5): important records rise, trivial ones sink."""
    recency_weight: float = 0.1
    """Multiplier 1 + w * 2^(-age / half_life): recent records get a small lift."""
    recency_half_life_days: float = 30.0
    neighbours: int = 8
    """At most this many of the best conversation turns bring the turn before and after them
    along (the question a reply answers, the answer a question got) in budgeted searches;
    0 turns it off."""
    neighbour_budget_tokens: int = 800
    """With a token budget, one best turn brings its neighbours per this many tokens (a small
    budget is better spent on more hits than on context)."""
    neighbour_window_minutes: float = 30.0
    """How far apart two turns of one session can be and still be neighbours."""


@dataclass(frozen=True)
class Candidate:
    """A row returned by one of the searches, with its rank (0 = best) in that list."""

    memory_type: str
    record: MemoryRecord
    source: str  # "vector" or "text"
    rank: int


@dataclass
class Hit:
    """One search result: a record, the store it came from and why it ranked where it did."""

    memory_type: str
    record: MemoryRecord
    score: float
    parts: dict[str, float] = field(default_factory=dict)
    text: str = ""
    """The record as rendered into a prompt."""
    tokens: int = 0
    """Tokens of `text` for the serving model (set when packed)."""

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def source_ids(self) -> list[str]:
        return list(self.record.source_ids)


def fuse(candidates: Sequence[Candidate], policy: RankingPolicy, now: datetime) -> list[Hit]:
    """Merge candidates by record, score them and return hits best-first (ties by record id)."""
    merged: dict[tuple[str, str], Hit] = {}
    for cand in candidates:
        key = (cand.memory_type, cand.record.id)
        hit = merged.get(key)
        if hit is None:
            hit = merged[key] = Hit(cand.memory_type, cand.record, 0.0, {"rrf": 0.0})
        weight = policy.vector_weight if cand.source == "vector" else policy.text_weight
        hit.parts["rrf"] += weight / (policy.rrf_k + cand.rank + 1)
        hit.parts.setdefault(f"{cand.source}_rank", float(cand.rank))
    for hit in merged.values():
        age_days = max(0.0, (now - hit.record.event_time()).total_seconds() / 86400.0)
        recency = math.pow(2.0, -age_days / policy.recency_half_life_days)
        hit.parts["recency"] = recency
        hit.parts["importance"] = hit.record.importance
        hit.score = (
            hit.parts["rrf"]
            * (1.0 + policy.importance_weight * (hit.record.importance - 0.5))
            * (1.0 + policy.recency_weight * recency)
        )
    return sorted(merged.values(), key=_order)


def _order(hit: Hit) -> tuple[float, str]:
    return (-hit.score, hit.record.id)


def rank_rows(memory_type: str, rows: list[dict[str, Any]], source: str, to_record: Any) -> list[Candidate]:
    """Turn one query's rows (already in rank order) into candidates."""
    return [Candidate(memory_type, to_record(row), source, rank) for rank, row in enumerate(rows)]
