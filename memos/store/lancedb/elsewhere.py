"""A read by id that missed a row another process has acknowledged and not yet written.

An add is acknowledged once its rows are in the store's journal (`memos.store.lancedb.journal`);
the process that journaled it commits them a moment later (`write_behind.DELAY`). Within one
process every read writes the queue first, but another process (another worker of
`memos serve --workers N`, a job worker) that is asked for that record by id in between would
not find it. `await_journaled` tells such a miss from a real one: the id is in a live process's
journal segment, so the read waits until that process has written it and then looks again. A
process that stopped before writing its segment (killed) leaves it for the next open to replay;
a miss replays it at once, for a delete that did not find such a record would otherwise be
undone by that replay.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from .replay import Replayed, replay_journal

__all__ = ["POLL", "WAIT", "await_journaled"]

WAIT = 3.0
"""Seconds a read waits at most for another process to write a journaled row (several `DELAY`s)."""
POLL = 0.05
"""Seconds between two looks at the live journal segments while waiting."""


class _Store(Replayed, Protocol):
    """What waiting uses of `memos.store.lancedb.storage.Storage`."""

    tables: dict[str, Any]
    behind: Any


async def await_journaled(storage: _Store, memory_type: str, record_id: str, wait: float = WAIT) -> bool:
    """Whether `record_id` waits in a live process's journal for `memory_type`'s table; if so,
    wait (at most `wait` seconds) until it has left the journal, that is until its process has
    committed it, and point the table's handle at the newest version, so the caller's read can
    look again; then write what stopped processes' segments hold (`replay_journal`). False for a
    row no journal holds and nothing replayed (a real miss costs two looks at the journal folder)."""
    behind = storage.behind
    if not behind.journaled:
        return False

    async def waiting() -> bool:
        return record_id in (await asyncio.to_thread(behind.waiting)).get(memory_type, ())

    live = await waiting()
    if live:
        deadline = time.monotonic() + wait
        while True:  # it was there a moment ago: look again after each pause
            await asyncio.sleep(POLL)
            if time.monotonic() >= deadline or not await waiting():
                break
    replayed = await replay_journal(storage, behind.journal.root)  # its writer may have stopped (killed) meanwhile
    if not (live or replayed):
        return False
    await storage.tables[memory_type].table.checkout_latest()
    return True
