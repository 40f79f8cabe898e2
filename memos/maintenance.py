"""Table maintenance: compaction (LanceDB `optimize`) and index builds.

Every append makes a small data fragment; `optimize()` compacts fragments, folds new rows into
the existing indexes and prunes old versions past `cleanup_older_than`. Index builds are
`memos.indexing.ensure_indexes` (vector ANN index once a table is large enough, scalar
indexes); when that module is absent a minimal fallback builds the ANN index past `min_rows`.
Commit conflicts with concurrent writers are retried (`retry_conflicts`), never dropped.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from .storage import Storage, retry_conflicts

__all__ = ["ANN_MIN_ROWS", "compact_tables", "maintain"]

log = logging.getLogger("memos.maintenance")

ANN_MIN_ROWS = 50_000
"""Fallback threshold: below this many rows brute-force vector search is fast enough."""


async def compact_tables(storage: Storage, *, cleanup_older_than: timedelta = timedelta(days=7)) -> dict[str, Any]:
    """Optimize every table (typed stores and history); returns what each compaction did."""
    out: dict[str, Any] = {}
    tables = {name: t.table for name, t in storage.tables.items()}
    tables["_history"] = storage.history
    for name, table in tables.items():
        stats = await retry_conflicts(lambda table=table: table.optimize(cleanup_older_than=cleanup_older_than))
        compaction = getattr(stats, "compaction", None)
        out[name] = {
            "fragments_removed": getattr(compaction, "fragments_removed", 0),
            "fragments_added": getattr(compaction, "fragments_added", 0),
        }
    return out


async def _fallback_indexes(storage: Storage, min_rows: int) -> dict[str, str]:
    from lancedb.index import IvfPq

    done: dict[str, str] = {}
    for name, typed in storage.tables.items():
        if storage.embedder_name is None or name == "vault":
            continue
        rows = await typed.table.count_rows()
        has_vector_index = any(idx.columns == ["vector"] for idx in await typed.table.list_indices())
        if rows >= min_rows and not has_vector_index:
            await retry_conflicts(lambda t=typed.table: t.create_index("vector", config=IvfPq(distance_type="cosine")))
            done[name] = "vector index built"
        else:
            done[name] = "vector index present" if has_vector_index else f"{rows} rows: brute force"
    return done


async def maintain(storage: Storage, *, min_rows: int | None = None,
                   cleanup_older_than: timedelta = timedelta(days=7)) -> dict[str, Any]:
    """Compact every table, then make sure the indexes a table of its size needs exist."""
    compaction = await compact_tables(storage, cleanup_older_than=cleanup_older_than)
    try:
        from .indexing import ensure_indexes
    except ImportError:
        indexes = await _fallback_indexes(storage, min_rows or ANN_MIN_ROWS)
    else:
        indexes = await ensure_indexes(storage, min_rows=min_rows)
    log.info("maintenance: compacted %d tables, indexes %s", len(compaction), indexes)
    return {"compaction": compaction, "indexes": indexes}
