"""Index policy: which tables need an ANN vector index, and building the indexes.

Brute-force vector search over a scope-filtered table is exact and, below tens of thousands
of rows, fast enough. Past `ANN_MIN_ROWS` a
table gets an IVF-HNSW index (cosine). Every search still prefilters by scope first, so an
index never lets one user's query see another's rows. A B-tree on `user_id` makes that
prefilter an index lookup: without it every query reads the scope columns *and the vectors*
of the whole table before filtering. Bitmaps on `agent_id` and `status` (few distinct
values) complete it: the whole scope-and-status filter is answered from indexes and no query
reads those columns row by row. (Measurements: docs/benchmarks.md, "Indexes".)
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from memos.store.schema import VECTOR_COLUMN

from .purge import vector_index
from .scalar_indexes import SCALAR_MIN_ROWS, needs_scalar_index, scalar_indexes
from .search_index import SEARCH_TABLE
from .storage import Storage

__all__ = ["ANN_MIN_ROWS", "MAX_INDEX_PARTS", "SCALAR_MIN_ROWS", "ensure_indexes", "needs_ann_index", "needs_scalar_index"]

log = logging.getLogger("memos.store.lancedb.indexing")

ANN_MIN_ROWS = 50_000
"""A table with at least this many rows gets an ANN vector index."""
MAX_INDEX_PARTS = 32
"""A vector index in more parts than this is built again whole. Each optimize adds the new rows
to a table's vector index as one more part (LanceDB appends, it never merges them), and keeps
each part's rows in fragments of their own (a compaction merges only fragments under the same
index parts), so a chat's one-row commits slowly make every vector query dearer. The
rebuild also sizes the partitions for the rows the table has now."""


def needs_ann_index(rows: int, has_index: bool, *, min_rows: int = ANN_MIN_ROWS, has_vectors: bool = True) -> bool:
    """Whether a table of `rows` rows should get an ANN vector index now."""
    return has_vectors and not has_index and rows >= min_rows


async def ensure_indexes(storage: Storage, *, min_rows: int | None = None, max_parts: int = MAX_INDEX_PARTS) -> dict[str, str]:
    """Build the indexes each table needs at its size, and a vector index again once it is in
    more than `max_parts` parts; returns what was done per table."""
    done: dict[str, str] = {}
    ann_rows = ANN_MIN_ROWS if min_rows is None else min_rows
    scalar_rows = SCALAR_MIN_ROWS if min_rows is None else min(min_rows, SCALAR_MIN_ROWS)
    tables = {name: typed.table for name, typed in storage.tables.items()}
    tables |= {SEARCH_TABLE: table for table in storage.search_tables()}
    for name, table in tables.items():
        rows = await storage.read(table, table.count_rows)
        indexed = {tuple(idx.columns) for idx in await storage.read(table, table.list_indices)}
        notes = []
        scalars = scalar_indexes((await storage.read(table, table.schema)).names)
        for column, (kind, config) in scalars.items():
            if needs_scalar_index(rows, (column,) in indexed, min_rows=scalar_rows):
                await storage.rewrite(table, functools.partial(table.create_index, column, config=config(), replace=True))
                notes.append(f"{kind}({column})")
        vectors = storage.embedder_name is not None
        if needs_ann_index(rows, (VECTOR_COLUMN,) in indexed, min_rows=ann_rows, has_vectors=vectors):
            ann = vector_index(rows)
            await storage.rewrite(table, functools.partial(table.create_index, VECTOR_COLUMN, config=ann, replace=True))
            notes.append(f"ivf_hnsw_sq({ann.num_partitions} partitions)")
        elif (VECTOR_COLUMN,) in indexed and (parts := await _vector_parts(storage, table)) > max_parts:
            ann = vector_index(rows)
            await storage.rewrite(table, functools.partial(table.create_index, VECTOR_COLUMN, config=ann, replace=True))
            notes.append(f"ivf_hnsw_sq({ann.num_partitions} partitions) rebuilt from {parts} parts")
        done[name] = ", ".join(notes) or (f"{rows} rows: indexes present" if indexed - {("text",)} else f"{rows} rows: brute force")
        if notes:
            log.info("indexes on %s (%d rows): %s", name, rows, ", ".join(notes))
    return done


async def _vector_parts(storage: Storage, table: Any) -> int:
    """How many parts a table's vector index is in (1 when it was built and nothing appended since)."""
    name = next(idx.name for idx in await storage.read(table, table.list_indices) if idx.columns == [VECTOR_COLUMN])
    stats = await storage.read(table, lambda: table.index_stats(name))
    return int(stats.num_indices or 1) if stats is not None else 1
