"""Rows added through the journal instead of a commit each (`memos.store.lancedb.write_behind`).

A store's own rows and their history rows are appended to the journal, durable when that
returns, and committed a moment later in batches; what this process has remembered reading
counts them at once. Their shared search table rows either wait with them (a chat's turns) or
are handed back for the caller to commit at once (the group commit's adds, so that a search
finds an acknowledged add as soon as its caller is told it is stored).
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa

from memos.store.schema import arrow_schema, arrow_table

from .errors import journal_error

__all__ = ["hold_rows"]


class _Store(Protocol):
    """What holding rows uses of `memos.store.lancedb.storage.Storage` (which calls it)."""

    uri: str
    dim: int
    tables: dict[str, Any]
    behind: Any
    search: Any
    reads: Any
    presence: Any


def hold_rows(storage: _Store, typed: dict[str, list[dict[str, Any]]], history: list[dict[str, Any]], *,
              shared_behind: bool) -> list[dict[str, Any]] | None:
    """Journal and queue `typed` rows (by memory type) with their `history` rows; returns their
    shared-table rows (queued too when `shared_behind`, else the caller commits them), or None
    (nothing queued) when the store has no journal or a row's values need LanceDB's own
    conversion. A journal that cannot take them (a full disk) raises a memos error, nothing queued."""
    if not storage.behind.journaled:
        return None
    tables = {name: arrow_table(rows, arrow_schema(storage.tables[name].record_type, storage.dim)) for name, rows in typed.items()}
    if any(not isinstance(t, pa.Table) for t in tables.values()):
        return None
    shared = [row for name, rows in typed.items() if storage.search.covers(name) and storage.search.table is not None
              for row in storage.search.project(name, rows)]
    try:
        storage.behind.queue(history, shared if shared_behind else [], typed=tables)
    except OSError as exc:  # the journal could not take them: nothing was queued
        raise journal_error(exc, storage.uri) from exc
    for name, rows in typed.items():
        storage.reads.added(name, rows)
        storage.presence.added(name)
    return shared
