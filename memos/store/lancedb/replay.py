"""Replaying the turn journal: what a stopped process acknowledged and its tables lack.

A chat turn is durable once it is in the journal (`memos.store.lancedb.journal`); the process
that wrote it writes it to its tables half a second later. A process killed before that leaves
its segment, and the next open of the store writes what the segment holds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from memos.store.schema import VECTOR_COLUMN, finite
from memos.store.scope import sql_in

from .journal import orphans, read_frames
from .write_behind import HISTORY, STATE

__all__ = ["Replayed", "absent", "replay_journal"]

T = TypeVar("T")
log = logging.getLogger("memos.store.lancedb.replay")


class Replayed(Protocol):
    """What a replay uses of the store (`Storage`)."""

    history: Any
    tables: dict[str, Any]

    def memory_types(self) -> list[str]: ...
    async def read(self, table: Any, op: Callable[[], Awaitable[T]], attempts: int = 4) -> T: ...
    async def add_rows(self, memory_type: str, rows: list[dict[str, Any]], *, shared_by_key: bool = False) -> None: ...
    async def append_history(self, entries: list[dict[str, Any]]) -> None: ...
    async def write_state(self, values: dict[str, str]) -> None: ...


async def absent(store: Replayed, memory_type: str | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose id the memory type's table (the history table for None) does not hold,
    as of its newest version (another process may have committed them a moment ago)."""
    table = store.history if memory_type is None else store.tables[memory_type].table
    await table.checkout_latest()
    present: set[str] = set()
    ids = [r["id"] for r in rows]
    for start in range(0, len(ids), 1_000):
        query = table.query().where(sql_in("id", ids[start : start + 1_000])).select(["id"])
        present.update((await store.read(table, query.to_arrow))["id"].to_pylist())
    return [r for r in rows if r["id"] not in present]


def _writable(row: dict[str, Any], segment: str) -> dict[str, Any]:
    """`row`, without its vector if that holds a NaN or infinite value (which LanceDB refuses, so
    the row would block the open): journaled by a version that did not check its embedder's
    vectors. The record is kept, found by full text; `memos reindex` embeds it again."""
    vector = row.get(VECTOR_COLUMN)
    if vector is None or finite(vector):
        return row
    log.warning("journal segment %s: record %s had a NaN or infinite vector; written without one "
                "(found by full text until `memos reindex`)", segment, row.get("id"))
    return {**row, VECTOR_COLUMN: None}


async def replay_journal(store: Replayed, root: Path) -> int:
    """Write what the journal segments of stopped processes hold and the tables lack: their turns'
    rows (with their shared-table rows), the history rows of those turns and the
    session state. Rows already written are skipped, and shared rows are written by key (a
    group-commit add's was committed before it was acknowledged), so replaying a segment twice
    changes nothing. Returns how many of the stores' rows it wrote."""
    known = set(store.memory_types())
    total = 0
    with orphans(root) as found:
        for orphan in found:
            typed: dict[str, list[dict[str, Any]]] = {}
            history: list[dict[str, Any]] = []
            state: dict[str, str] = {}
            for name, rows in read_frames(orphan.data):
                if name == HISTORY:
                    history += rows.to_pylist()
                elif name == STATE:
                    state.update((r["key"], r["value"]) for r in rows.to_pylist())
                elif name in known:
                    typed.setdefault(name, []).extend(rows.to_pylist())
                else:
                    orphan.done = False
            if not orphan.done:  # kept whole for an open that registers that type
                log.warning("journal segment %s holds rows of a memory type this store was not opened with; "
                            "kept for an open that registers it", orphan.path.name)
                continue
            written = 0
            for name, rows in typed.items():
                missing = [_writable(row, orphan.path.name) for row in await absent(store, name, rows)]
                await store.add_rows(name, missing, shared_by_key=True)
                written += len(missing)
            await store.append_history(await absent(store, None, history))
            if state:  # the newest value it journaled of each key (a session's state)
                await store.write_state(state)
            if written:
                log.warning("%d rows a stopped process had journaled were written to their tables", written)
            total += written
    return total
