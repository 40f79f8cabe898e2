"""Table maintenance: compaction (LanceDB `optimize`) and index builds.

Every append makes a small data fragment; `optimize()` compacts fragments, folds new rows into
the existing indexes and prunes old versions past `cleanup_older_than`. Index builds are
`memos.store.lancedb.indexing.ensure_indexes` (scope-column B-trees, and a vector ANN index once a table is
large enough). Afterwards the freed heap goes back to the operating system (`memos.store.lancedb._malloc`).
Commit conflicts with concurrent writers are retried (`Storage.write`), never dropped; a purge that
`Storage.purge_old_versions` had to defer is finished here, and so are deletes and history rows
that a stopped process left unfinished (`memos.store.lancedb.deletion`, `memos.jobs.audit`).
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta
from typing import Any

from memos.jobs.audit import malformed_history, repair_history

from ._malloc import release_free_memory
from .compaction import KEEP_VERSIONS
from .deletion import finish_deletes
from .errors import is_conflict
from .indexing import MAX_INDEX_PARTS, ensure_indexes
from .search_index import SEARCH_TABLE
from .storage import Storage

__all__ = ["compact_tables", "maintain"]

log = logging.getLogger("memos.store.lancedb.maintenance")


async def compact_tables(storage: Storage, *, cleanup_older_than: timedelta = KEEP_VERSIONS) -> dict[str, Any]:
    """Optimize every table (typed stores and history); returns what each compaction did.

    Old versions are kept as long as the automatic compactions keep them (`KEEP_VERSIONS`), no
    longer: nothing in memos reads an older version, and LanceDB's default of 7 days kept every
    rewrite of a bulk load on disk."""
    out: dict[str, Any] = {}
    tables = {name: t.table for name, t in storage.tables.items()}
    tables["_history"] = storage.history
    tables |= {SEARCH_TABLE: table for table in storage.search_tables()}
    for name, table in tables.items():
        try:
            stats = await storage.rewrite(table, functools.partial(table.optimize, cleanup_older_than=cleanup_older_than))
        except RuntimeError as exc:
            if not is_conflict(exc):
                raise
            # writers kept preempting the rewrite (it lost every retry): nothing is wrong, the next run compacts
            log.info("compaction of %s skipped: concurrent writes preempted it", name)
            out[name] = {"skipped": "concurrent writes preempted the compaction; the next run compacts"}
            continue
        compaction = getattr(stats, "compaction", None)
        out[name] = {
            "fragments_removed": getattr(compaction, "fragments_removed", 0),
            "fragments_added": getattr(compaction, "fragments_added", 0),
        }
    return out


async def maintain(storage: Storage, *, min_rows: int | None = None, cleanup_older_than: timedelta = KEEP_VERSIONS,
                   max_index_parts: int = MAX_INDEX_PARTS, now: datetime | None = None) -> dict[str, Any]:
    """Compact every table, then make sure the indexes a table of its size needs exist (and
    build a vector index in more than `max_index_parts` parts again: `memos.store.lancedb.indexing`); finish
    the deletes a stopped process cut short (`memos.store.lancedb.deletion`) and repair the history of writes
    abandoned before `now` minus `REPAIR_GRACE` (`memos.jobs.audit`; `now`: the wall clock by default)."""
    compaction = await compact_tables(storage, cleanup_older_than=cleanup_older_than)
    indexes = await ensure_indexes(storage, min_rows=min_rows, max_parts=max_index_parts)
    purge = await storage.finish_deferred_purge()
    deletes = await finish_deletes(storage)
    repaired = await repair_history(storage, now=now)
    malformed = await malformed_history(storage)
    if storage.search.table is not None:
        await storage.search.check()  # a mirror write another process missed (memos.store.lancedb.search_index)
    release_free_memory()
    log.info("maintenance: compacted %d tables, indexes %s", len(compaction), indexes)
    out: dict[str, Any] = {"compaction": compaction, "indexes": indexes}
    if purge is not None:
        out["deferred_purge"] = purge
    if deletes:
        out["deletes_finished"] = deletes
    if repaired:
        out["history_repaired"] = repaired
    if malformed:  # stored around the facade's checks: skipped by the audit pass, reported here
        log.warning("maintenance: %d history rows lack a required field and were skipped", malformed)
        out["history_malformed"] = malformed
    return out
