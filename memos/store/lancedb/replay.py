"""Replaying the turn journal: what a stopped process acknowledged and its tables lack.

A chat turn is durable once it is in the journal (`memos.store.lancedb.journal`); the process
that wrote it writes it to its tables half a second later. A process killed before that leaves
its segment, and the next open of the store writes what the segment holds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from .journal import orphans, read_frames
from .write_behind import HISTORY, STATE

__all__ = ["Replayed", "replay_journal"]

log = logging.getLogger("memos.store.lancedb.replay")


class Replayed(Protocol):
    """What a replay uses of the store (`Storage`)."""

    def memory_types(self) -> list[str]: ...
    async def absent(self, memory_type: str | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]: ...
    async def add_rows(self, memory_type: str, rows: list[dict[str, Any]], *, shared_by_key: bool = False) -> None: ...
    async def append_history(self, entries: list[dict[str, Any]]) -> None: ...
    async def write_state(self, values: dict[str, str]) -> None: ...


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
                missing = await store.absent(name, rows)
                await store.add_rows(name, missing, shared_by_key=True)
                written += len(missing)
            await store.append_history(await store.absent(None, history))
            if state:  # the newest value it journaled of each key (a session's state)
                await store.write_state(state)
            if written:
                log.warning("%d rows a stopped process had journaled were written to their tables", written)
            total += written
    return total
