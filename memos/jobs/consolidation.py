"""Consolidation: merge duplicates and supersede contradicted facts, as a plan, then apply it.

Planning is pure (`plan_consolidation` takes records and vectors, returns a
`ConsolidationPlan`); `apply_plan` carries a plan out through `MemoryOS`, so every change is
in history and nothing is deleted:

Merges and supersedes leave the records `memos.jobs.merging` describes, the same the memory manager
leaves behind:

Nothing is ever decided across scopes: records merge, and facts contradict, only within one exact
scope (the same user, agent and session ids as stored, `memos.jobs.partition`), whatever scope the
job was run for.

- **merge**: records of one store and exact scope with the same normalized text, or with cosine
  similarity >= `similarity` (near-duplicates), form a group. The survivor is the one with the
  best importance (then the oldest); it keeps the union of provenance (`source_ids`), tags and
  access counts and the best importance. The others are archived with `superseded_by` set to
  the survivor and the tag `merged`. Episodes only merge when actor and time are equal too
  (a double-ingested turn), never because two different moments said the same words; episodes
  and resource chunks never merge by similarity alone (only types declaring
  `merge_near_duplicates` do).
- **supersede** (facts, no model): two active facts with the same subject and the same
  attribute but different values contradict; the newer one wins (by `valid_from`, else
  `created_at`). The older closes its validity (`valid_to` = the newer's start), gets
  `status="superseded"` and `superseded_by`. The attribute comes from a `attr:<name>` tag,
  else from a small set of relational phrases ("lives in", "works at", "<x> is ..."). Anything
  the heuristic cannot parse is left alone: it is conservative on purpose. With a model, the
  consolidation agent (`agents/consolidation.py`) makes the decision instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from memos.memtypes import MemoryRecord

if TYPE_CHECKING:
    from memos.memory import MemoryOS
    from memos.store.scope import Scope

from memos.exceptions import RecordChangedError

from .merging import MERGE, SUPERSEDE, DisjointSets, merge_note, merged_marks, superseded_marks
from .partition import ScopeKey, by_scope, same_scope, stored_scope

__all__ = [
    "ConsolidationPlan",
    "Merge",
    "Supersede",
    "apply_plan",
    "fact_key",
    "mark",
    "normalize_text",
    "plan_consolidation",
    "plan_contradictions",
    "plan_merges",
]

_WORDS = re.compile(r"[^\w']+", re.UNICODE)
_RELATIONS = {
    "lives in": "lives in", "lives at": "lives in", "moved to": "lives in", "relocated to": "lives in",
    "is based in": "lives in", "works at": "works at", "works for": "works at", "joined": "works at",
    "works as": "works as", "is married to": "married to", "is dating": "partner", "prefers": "prefers",
    "drives": "drives", "is allergic to": "allergic to",
}
_RELATION = re.compile(r"^(?:he |she |they |it )?(" + "|".join(sorted(map(re.escape, _RELATIONS), key=len, reverse=True)) + r") (.+)$")
_ATTRIBUTE_IS = re.compile(r"^(?:'s )?([a-z][a-z ]{0,40}?) (?:is|are) (.+)$")


def normalize_text(text: str) -> str:
    """Lowercase words only: what two records must share to be exact duplicates."""
    return " ".join(_WORDS.sub(" ", text.lower()).replace(" '", " ").replace("' ", " ").split())


def fact_key(record: MemoryRecord) -> tuple[str, str, str] | None:
    """(subject, attribute, value) of a fact, or None when the heuristic cannot tell."""
    subject = normalize_text(getattr(record, "subject", "") or "")
    summary = getattr(record, "summary", "") or ""
    if not subject or not summary:
        return None
    tagged = next((t.split(":", 1)[1] for t in record.tags if t.startswith("attr:")), None)
    text = " ".join(summary.lower().rstrip(".!").split())
    if text.startswith(subject + "'s "):
        text = "'s " + text[len(subject) + 3:]
    elif text.startswith(subject + " "):
        text = text[len(subject) + 1:]
    if tagged:
        return subject, normalize_text(tagged), normalize_text(text)
    match = _RELATION.match(text.removeprefix("'s "))
    if match:
        return subject, _RELATIONS[match.group(1)], normalize_text(match.group(2))
    match = _ATTRIBUTE_IS.match(text)
    if match and match.group(1) not in {"he", "she", "they", "it", "this", "that", "there"}:
        return subject, normalize_text(match.group(1)), normalize_text(match.group(2))
    return None


@dataclass(frozen=True)
class Merge:
    """Archive `merged_ids` into `survivor_id`, which takes the union of their provenance."""

    survivor_id: str
    merged_ids: tuple[str, ...]
    importance: float
    source_ids: tuple[str, ...]
    tags: tuple[str, ...]
    access_count: int
    reason: str
    kind: Literal["merge"] = "merge"


@dataclass(frozen=True)
class Supersede:
    """Close `old_id`'s validity at `valid_to` and link it to `new_id`."""

    old_id: str
    new_id: str
    valid_to: datetime
    reason: str
    kind: Literal["supersede"] = "supersede"


@dataclass
class ConsolidationPlan:
    """What consolidation will do to one store of one scope."""

    memory_type: str
    merges: list[Merge] = field(default_factory=list)
    supersedes: list[Supersede] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.merges and not self.supersedes

    def counts(self) -> dict[str, int]:
        return {"merged": sum(len(m.merged_ids) for m in self.merges), "superseded": len(self.supersedes)}


def _similar_pairs(records: list[MemoryRecord], vectors: dict[str, list[float]], similarity: float,
                   block: int = 1024) -> list[tuple[MemoryRecord, MemoryRecord, float]]:
    """Pairs (i < j) with cosine >= similarity, computed blockwise with numpy."""
    import numpy as np

    if len(records) < 2:
        return []
    matrix: np.ndarray = np.asarray([vectors[r.id] for r in records], dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms == 0, 1.0, norms)
    out = []
    for start in range(0, len(records), block):
        sims = matrix[start:start + block] @ matrix.T
        rows, cols = np.nonzero(sims >= similarity)
        for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
            if start + i < j:
                out.append((records[start + i], records[j], float(sims[i, j])))
    return out


def _dup_key(record: MemoryRecord) -> tuple[Any, ...]:
    return (*record.duplicate_key(), normalize_text(record.index_text()))


def _start(record: MemoryRecord) -> datetime:
    return record.valid_from or record.created_at


def plan_merges(records: Sequence[MemoryRecord], vectors: dict[str, list[float]] | None = None, *,
                similarity: float = 0.95) -> list[Merge]:
    """Groups of duplicates (same normalized text, or cosine >= `similarity`) and their survivors.

    Records only ever merge with records of their own exact scope (`memos.jobs.partition`): the same
    words stored by two agents, or in two sessions, are two memories, not a duplicate."""
    merges = [m for group in by_scope(records).values() for m in _merges_in_scope(group, vectors, similarity)]
    return sorted(merges, key=lambda m: m.survivor_id)


def _merges_in_scope(records: Sequence[MemoryRecord], vectors: dict[str, list[float]] | None,
                     similarity: float) -> list[Merge]:
    active = sorted((r for r in records if r.status == "active"), key=lambda r: (r.created_at, r.id))
    sets = DisjointSets(r.id for r in active)

    reasons: dict[str, str] = {}
    first: dict[tuple[Any, ...], str] = {}
    for r in active:
        key = _dup_key(r)
        if key in first:
            sets.union(first[key], r.id)
            reasons[r.id] = "same text"
        else:
            first[key] = r.id
    if vectors and similarity < 1.0 and active and active[0].merge_near_duplicates:
        for a, b, score in _similar_pairs([r for r in active if vectors.get(r.id)], vectors, similarity):
            if sets.find(a.id) == sets.find(b.id):
                continue
            ka, kb = fact_key(a), fact_key(b)
            if ka and kb and ka[:2] == kb[:2] and ka[2] != kb[2]:
                continue  # a contradiction, not a duplicate
            sets.union(a.id, b.id)
            reasons[b.id] = f"similar ({score:.3f})"
    merges = []
    for members in sets.groups(active, key=lambda r: r.id):
        survivor = max(members, key=lambda r: (r.importance, -r.created_at.timestamp(), _neg(r.id)))
        others = [r for r in members if r.id != survivor.id]
        sources = list(dict.fromkeys([*survivor.source_ids, *(s for r in others for s in r.source_ids)]))
        tags = list(dict.fromkeys([*survivor.tags, *(t for r in others for t in r.tags)]))
        why = sorted({reasons.get(r.id, "same text") for r in others})
        merges.append(Merge(survivor.id, tuple(r.id for r in others), max(r.importance for r in members), tuple(sources),
                            tuple(tags), sum(r.access_count for r in members), ", ".join(why)))
    return merges


def _neg(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)


def plan_contradictions(records: Sequence[MemoryRecord], *, exclude: Set[str] = frozenset(),
                        starts: dict[str, datetime] | None = None) -> list[Supersede]:
    """Facts with the same subject and attribute but another value: each is closed by the next newer one.

    `starts` overrides when a fact was last stated (a merge survivor was restated by its duplicates).
    Only facts of one exact scope contradict each other: another agent's or session's newer
    fact never closes this one.
    """
    starts = starts or {}

    def start(record: MemoryRecord) -> datetime:
        return starts.get(record.id, _start(record))

    by_key: dict[tuple[ScopeKey, str, str], list[tuple[MemoryRecord, str]]] = {}
    for r in records:
        if r.status != "active" or r.id in exclude or not r.supersede_contradictions:
            continue
        key = fact_key(r)
        if key is not None:
            by_key.setdefault((stored_scope(r), *key[:2]), []).append((r, key[2]))
    out = []
    for (_, subject, attribute), facts in by_key.items():
        facts.sort(key=lambda f: (start(f[0]), f[0].id))
        for (old, old_value), (new, new_value) in zip(facts, facts[1:]):
            if old_value != new_value:
                out.append(Supersede(old.id, new.id, start(new),
                                     f"{subject} {attribute}: {old_value!r} -> {new_value!r}"))
    return out


def plan_consolidation(memory_type: str, records: Sequence[MemoryRecord], vectors: dict[str, list[float]] | None = None,
                       *, similarity: float = 0.95, contradictions: bool = True) -> ConsolidationPlan:
    """The whole plan for one store of one scope: merges first, then contradictions among the rest."""
    merges = plan_merges(records, vectors, similarity=similarity)
    merged = {i for m in merges for i in m.merged_ids}
    by_id = {r.id: r for r in records}
    restated = {m.survivor_id: max(_start(by_id[i]) for i in (m.survivor_id, *m.merged_ids)) for m in merges}
    supersedes = (plan_contradictions(records, exclude=merged, starts=restated)
                  if contradictions else [])
    return ConsolidationPlan(memory_type, merges, supersedes)


async def mark(memory: MemoryOS, scope: Scope, name: str, record: MemoryRecord, changes: dict[str, Any], *, op: str,
               actor: str, note: str | None = None) -> MemoryRecord | None:
    """Change bookkeeping fields of a record, keeping its stored vector (its text does not change);
    None if the record changed or vanished since `record` was read (nothing is written then).

    Unlike `MemoryOS.update` this never re-embeds, so a job running without an embedder
    (full-text-only worker) cannot strip vectors from the records it touches (`MemoryOS.restamp`).
    The write is conditional on the version read, so a job's decision on a stale copy never
    overwrites an acknowledged update and never brings a deleted record back: the job skips it.
    """
    try:
        return await memory.restamp(record, changes, op=op, actor=actor, note=note)
    except RecordChangedError:
        return None


async def apply_plan(memory: MemoryOS, scope: Scope, plan: ConsolidationPlan, *, actor: str = "consolidation") -> dict[str, int]:
    """Carry a plan out through `MemoryOS` (history for every change); returns counts.

    Records are re-read first: one that vanished or stopped being active since planning
    (another writer got there first) is skipped, not resurrected; so is one that changes between
    that read and the write (`mark` writes only the version it read). A merge or supersede that
    would relate records of two exact scopes (a plan made elsewhere) is skipped too.
    """
    done = {"merged": 0, "superseded": 0, "skipped": 0}
    name = plan.memory_type
    for merge in plan.merges:
        current = await _active(memory, scope, name, [merge.survivor_id, *merge.merged_ids])
        survivor = current.get(merge.survivor_id)
        others = [current[i] for i in merge.merged_ids
                  if i in current and survivor is not None and same_scope(survivor, current[i])]
        done["skipped"] += len(merge.merged_ids) - len(others)
        if survivor is None or not others:
            done["skipped"] += len(others)
            continue
        # The union is taken over the records as re-read now, never over the plan's copies: a
        # value a writer changed since planning is what gets merged (each write below is still
        # conditional on the version read here).
        members = [survivor, *others]
        kept = await mark(memory, scope, name, survivor, {
            "importance": max(r.importance for r in members),
            "source_ids": list(dict.fromkeys(s for r in members for s in r.source_ids)),
            "tags": list(dict.fromkeys(t for r in members for t in r.tags)),
            "access_count": sum(r.access_count for r in members),
        }, op=MERGE, actor=actor, note=f"survivor of {len(others)} duplicates")
        if kept is None:  # the survivor changed under us: the next run decides again
            done["skipped"] += len(others)
            continue
        for other in others:
            if await mark(memory, scope, name, other, merged_marks(other, survivor.id),
                          op=MERGE, actor=actor, note=merge_note(survivor.id, merge.reason)) is None:
                done["skipped"] += 1
                continue
            done["merged"] += 1
    for sup in plan.supersedes:
        current = await _active(memory, scope, name, [sup.old_id, sup.new_id])
        if len(current) != 2:
            done["skipped"] += 1
            continue
        old, new = current[sup.old_id], current[sup.new_id]
        if not same_scope(old, new) or await mark(memory, scope, name, old, superseded_marks(new.id, sup.valid_to),
                      op=SUPERSEDE, actor=actor, note=sup.reason) is None:
            done["skipped"] += 1
            continue
        if new.valid_from is None:
            await mark(memory, scope, name, new, {"valid_from": _start(new)}, op="update", actor=actor, note="validity opened")
        done["superseded"] += 1
    return done


async def _active(memory: MemoryOS, scope: Scope, name: str, ids: list[str]) -> dict[str, MemoryRecord]:
    return {r.id: r for r in await memory.get_many(scope, name, ids, status="active")}
