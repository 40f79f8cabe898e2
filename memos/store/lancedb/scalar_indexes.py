"""The scalar indexes a table gets: a B-tree or bitmap on each column every search filters by.

Without them a query's scope-and-status filter reads those columns of every fragment before it
filters. A table gets them from the maintenance job (`memos.store.lancedb.indexing.ensure_indexes`)
and from its automatic optimizes (`memos.store.lancedb.compaction`) once it has `SCALAR_MIN_ROWS`
rows, or `SEARCHED_SCALAR_ROWS` for a table its process searches (a server's shared search table).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from lancedb.index import Bitmap, BTree

__all__ = ["SCALAR_MIN_ROWS", "SEARCHED_SCALAR_ROWS", "SHARED_INDEXES", "STORE_INDEXES", "needs_scalar_index", "scalar_indexes"]

SCALAR_MIN_ROWS = 1_000
"""A table with at least this many rows gets scalar indexes on its scope and status columns."""
SEARCHED_SCALAR_ROWS = 256
"""...and a table its process searches, this many: a server's shared search table is searched
several times a commit, and its newest rows sit in many small fragments. A full-text query of
one user's rows of 800 in 6 fragments costs 2.4-2.9 ms of CPU with the scope and status indexed
against 3.8-4.3 ms without; of 24,000 in 26 fragments, 3.3-4.7 against 8.7-10.0 ms
(docs/benchmarks.md, "The shared table's scalar indexes from its optimizes")."""
STORE_INDEXES: dict[str, tuple[str, Any]] = {"user_id": ("btree", BTree), "agent_id": ("bitmap", Bitmap),
                                             "status": ("bitmap", Bitmap), "id": ("btree", BTree)}
"""A store's table's: the filter columns every search uses, and the kind of index each gets. A
search of the shared table (`memos.store.lancedb.search_index`) may read its winners' rows from
their stores by id, which the B-tree on `id` makes a lookup."""
SHARED_INDEXES: dict[str, tuple[str, Any]] = {"user_id": ("btree", BTree), "agent_id": ("bitmap", Bitmap),
                                              "status": ("bitmap", Bitmap), "memory_type": ("bitmap", Bitmap),
                                              "key": ("btree", BTree)}
"""The shared search table's: scope and status as everywhere, its store column, and the key its
mirrored writes and deletes find rows by."""


def needs_scalar_index(rows: int, has_index: bool, *, min_rows: int = SCALAR_MIN_ROWS) -> bool:
    """Whether a table should get a scalar index on its scope columns now."""
    return not has_index and rows >= min_rows


def scalar_indexes(columns: Collection[str]) -> dict[str, tuple[str, Any]]:
    """The scalar indexes a table with these columns gets: the shared search table's (it has
    `key`, `memory_type` and `record`), a store's (`id`, `user_id`, `status`), or none (the
    history and meta tables)."""
    names = set(columns)
    if {"key", "memory_type", "record"} <= names:
        return SHARED_INDEXES
    if {"id", "user_id", "status"} <= names:
        return STORE_INDEXES
    return {}
