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

A delete that does find its rows can meet the other side of the same window: the process that
journaled them has committed them but not yet deleted its segment (it writes their history
first). Killed then, its segment would be replayed by the next open, and a replay writes the
rows its tables lack: the deleted record would come back. So a delete first waits until no
segment holds the rows it removes (`settle_journaled`), replaying a stopped process's itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Any, Protocol

from .journal import live_ids
from .replay import Replayed, replay_journal

__all__ = ["POLL", "WAIT", "await_journaled", "settle_journaled"]

log = logging.getLogger("memos.store.lancedb.storage")

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


async def settle_journaled(storage: _Store, memory_type: str, ids: Collection[str], wait: float = WAIT) -> None:
    """Before a delete of `ids` (rows of `memory_type` in their table): wait, at most `wait`
    seconds, until no journal segment holds them, live or stopped, writing a stopped process's
    segments meanwhile (`replay_journal`), so that no later replay brings a deleted row back.
    Returns at once when no segment holds them (one look at the journal folder)."""
    behind = storage.behind
    if not behind.journaled or not ids:
        return
    root, wanted = behind.journal.root, set(ids)
    deadline = time.monotonic() + wait
    while True:
        held = (await asyncio.to_thread(live_ids, root, stopped=True)).get(memory_type, set())
        if held.isdisjoint(wanted):
            return
        if time.monotonic() >= deadline:  # a writer that cannot commit them: delete anyway
            log.warning("a delete of %d %s rows went ahead while a journal segment still holds them", len(held & wanted), memory_type)
            return
        await replay_journal(storage, root)  # a stopped process's: written (they are there), then deleted
        await asyncio.sleep(POLL)
