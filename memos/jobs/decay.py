"""Decay: a retention score from recency, importance and access; stale low-value records are archived.

    retention = w_recency * 2^(-age_days / half_life_days)
              + w_importance * importance
              + w_access * min(1, log2(1 + access_count) / log2(1 + saturating_accesses))

with age measured from the later of `last_accessed` and `created_at`. Weights are normalized to
sum to 1, so the score is in [0, 1]. A record is archived (status "archived", never deleted,
history kept) when its score is below `threshold` and it is at least `min_age_days` old.
Only stores whose type declares `decays` are touched (not core blocks or vault items, whatever
the policy says); a user's own type opts in by setting it.
`plan_decay` is pure; `apply_decay` archives through `MemoryOS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memos.memtypes import MemoryRecord

from memos.exceptions import ConfigError

if TYPE_CHECKING:
    from memos.memory import MemoryOS
    from memos.store.scope import Scope

__all__ = ["DecayPolicy", "apply_decay", "plan_decay", "retention_score"]


@dataclass(frozen=True)
class DecayPolicy:
    """How records lose value over time, and where archiving starts."""

    threshold: float = 0.15
    """Records scoring below this are archived."""
    half_life_days: float = 30.0
    """Age at which the recency term halves."""
    min_age_days: float = 7.0
    """Younger records are never archived, whatever their score."""
    w_recency: float = 0.4
    w_importance: float = 0.45
    w_access: float = 0.15
    saturating_accesses: int = 10
    """Access count at which the access term reaches 1."""
    types: tuple[str, ...] | None = None
    """Stores decay looks at (None: every store whose type declares `decays`; a named store that
    does not declare it is still left alone)."""

    def __post_init__(self) -> None:
        if self.half_life_days <= 0 or min(self.w_recency, self.w_importance, self.w_access) < 0:
            raise ConfigError("DecayPolicy needs a positive half-life and non-negative weights")
        if self.w_recency + self.w_importance + self.w_access <= 0:
            raise ConfigError("DecayPolicy weights must not all be zero")


def retention_score(record: MemoryRecord, now: datetime, policy: DecayPolicy = DecayPolicy()) -> float:
    """How much a record is still worth keeping in retrieval, 0-1."""
    seen = max(record.created_at, record.last_accessed) if record.last_accessed else record.created_at
    age_days = max(0.0, (now - seen).total_seconds() / 86400.0)
    recency = math.pow(2.0, -age_days / policy.half_life_days)
    access = min(1.0, math.log2(1 + record.access_count) / math.log2(1 + max(1, policy.saturating_accesses)))
    total = policy.w_recency + policy.w_importance + policy.w_access
    return (policy.w_recency * recency + policy.w_importance * record.importance + policy.w_access * access) / total


def plan_decay(records: Sequence[MemoryRecord], now: datetime, policy: DecayPolicy = DecayPolicy()) -> list[tuple[str, str, float]]:
    """(memory_type, id, score) of every active record to archive, lowest score first."""
    out = []
    for record in records:
        if not record.decays or record.status != "active":
            continue
        if (now - record.created_at).total_seconds() < policy.min_age_days * 86400.0:
            continue
        score = retention_score(record, now, policy)
        if score < policy.threshold:
            out.append((record.memory_type, record.id, score))
    return sorted(out, key=lambda x: (x[2], x[1]))


async def apply_decay(memory: MemoryOS, scope: Scope, policy: DecayPolicy = DecayPolicy(), *, actor: str = "decay",
                      limit: int | None = None) -> dict[str, Any]:
    """Archive the records of `scope` that `plan_decay` picks; returns counts per store.

    Each archive is conditional on the version decay scored: a record changed since (a fresh
    update, an access) or deleted is skipped, never archived on stale numbers nor written back."""
    from .consolidation import mark

    now = memory.clock()
    archived: dict[str, int] = {}
    scanned = skipped = 0
    for name in memory.types if policy.types is None else policy.types:
        if name not in memory.types or not memory.types[name].decays:
            continue
        records = await memory.list(scope, name, status="active", limit=limit)
        by_id = {r.id: r for r in records}
        scanned += len(records)
        for memory_type, record_id, score in plan_decay(records, now, policy):
            done = await mark(memory, scope, memory_type, by_id[record_id], {"status": "archived"}, op="archive", actor=actor,
                              note=f"decayed (retention {score:.3f} < {policy.threshold})")
            if done is None:
                skipped += 1
                continue
            archived[memory_type] = archived.get(memory_type, 0) + 1
    return {"scanned": scanned, "archived": sum(archived.values()), "archived_by_type": archived, "skipped": skipped}
