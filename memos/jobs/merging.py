"""The one vocabulary for merging and superseding records, shared by everything that does it.

The memory manager (`memos.agents.manager`, a model's decision), consolidation
(`memos.jobs.consolidation`, duplicates and contradictions found without a model) and
`MemoryOS.supersede` leave the same records behind, so a reader of the store or its history
cannot tell (and need not care) which of them acted:

- **merge**: records that say the same thing become one *survivor* (an existing record, or a
  new one that restates them). Each of the others is archived (out of retrieval, never
  deleted), linked to the survivor (`superseded_by`) and tagged `merged`; its history row is
  op `merge` with a note naming the survivor. The survivor carries their provenance.
- **supersede**: a record that is no longer true is closed by its successor: status
  `superseded`, validity closed (`valid_to`), linked (`superseded_by`); history op `supersede`.

The functions here are pure: they return the bookkeeping changes (for `MemoryOS.restamp`),
never write. `DisjointSets` is how both consolidation (records) and the entity graph (entities)
group what is the same thing before they merge it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from memos.memtypes import MemoryRecord

__all__ = ["DisjointSets", "MERGE", "MERGED_TAG", "SUPERSEDE", "merge_note", "merged_marks", "superseded_marks"]

MERGE = "merge"
"""History op of every record a merge touches (the survivor and each merged record)."""
SUPERSEDE = "supersede"
"""History op of a superseded record."""
MERGED_TAG = "merged"
"""Tag of a record merged into another."""


def merged_marks(record: MemoryRecord, survivor_id: str) -> dict[str, Any]:
    """What `record` keeps when it is merged into `survivor_id`: archived, linked, tagged."""
    return {"status": "archived", "superseded_by": survivor_id, "tags": list(dict.fromkeys([*record.tags, MERGED_TAG]))}


def merge_note(survivor_id: str, reason: str) -> str:
    """The history note of a merged record."""
    return f"merged into {survivor_id} ({reason})"


def superseded_marks(successor_id: str, valid_to: datetime) -> dict[str, Any]:
    """What a record keeps when `successor_id` replaces it: superseded, closed at `valid_to`, linked."""
    return {"status": "superseded", "valid_to": valid_to, "superseded_by": successor_id}


T = TypeVar("T")


class DisjointSets:
    """Union-find over ids: which of them end up in one group (duplicates to merge). A group's
    root is its smallest id, so the grouping does not depend on the order of the unions."""

    def __init__(self, ids: Iterable[Hashable]) -> None:
        self._parent: dict[Any, Any] = {i: i for i in ids}

    def find(self, x: Hashable) -> Any:
        parent = self._parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: Hashable, b: Hashable) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)

    def groups(self, items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
        """`items` grouped by set (each in the order given; groups in order of first member),
        only groups of two or more."""
        grouped: dict[Any, list[T]] = {}
        for item in items:
            grouped.setdefault(self.find(key(item)), []).append(item)
        return [g for g in grouped.values() if len(g) > 1]
