"""Rows another process of the store has journaled and not yet written: a read here waits for them.

An add on a local store is acknowledged once its rows are in the journal (`memos.store.lancedb.journal`);
the process that journaled them writes them to their tables a moment later
(`memos.store.lancedb.write_behind.DELAY`). Until then a read in another process (another worker of
`memos serve --workers N`, a job worker) would not find them: a list through one worker right after
an add through another missed it every time, for about half a second. A read by id already waited
for such a row (`memos.store.lancedb.elsewhere.await_journaled`); lists, counts and budgeted
searches did not.

Now a process that journals rows counts them (`memos.store.lancedb.commits`, one counter a table:
`journaled_of`) after the journal and before its caller is answered. A read of a table first reads
that counter (8 bytes): while it has not moved since this process last looked, no other process has
journaled rows for the table and the read goes on. When it has moved, the read looks at the other
processes' live journal segments; if they hold rows of the table, it asks them to write now (the
`FLUSH` counter, which a process waiting to write a batch polls every `ASK_POLL` s instead of waiting
out its delay) and waits until those rows have left the journals, their history and shared search
rows written too, at most `WAIT` s; then it reads the table's newest version. Rows a read waited for
in vain (their process stopped, or cannot write: a full disk) are not waited for again, so one stuck
worker costs the others one wait, not one a read; they are still asked for. A chat turn's shared
search rows wait with its row: a search waits for them the same way. An object-storage store has
no journal: its rows are committed before they are acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from .commits import CommitCounter
from .errors import Retries
from .journal import live_ids

__all__ = ["ASK_POLL", "FLUSH", "OtherQueues", "POLL", "WAIT", "journaled_of"]

log = logging.getLogger("memos.store.lancedb.storage")

FLUSH = "journal:flush"
"""The counter another process moves to ask the store's processes to write what they journaled now."""
ASK_POLL = 0.02
"""Seconds between two looks at `FLUSH` by a process waiting out its batch's delay."""
POLL = 0.01
"""Seconds between two looks at the other processes' journal segments while a read waits."""
WAIT = 2.0
"""Seconds a read waits at most for another process to write its journaled rows (a batch waits
for a chat step in progress up to `write_behind.STEP_WAIT`)."""


def journaled_of(name: str) -> str:
    """The counter name of rows journaled for table `name` (a memory type, the journal's name of
    the state entries or of the shared search table)."""
    return f"journal:{name}"


class OtherQueues:
    """What the other processes of one local store have journaled, as a read here needs it."""

    def __init__(self, root: Path, counter: CommitCounter, tally: Retries | None = None) -> None:
        self.root = root
        self.counter = counter
        self.tally = tally if tally is not None else Retries()
        """Where the reads that waited are counted (`Storage.retries`)."""
        self._seen: dict[str, int] = {}  # each table's journal epoch when no other process held its rows
        self._given_up: dict[str, set[str]] = {}  # each table's rows a read waited `WAIT` for in vain: not waited for again

    def journaled(self, names: Collection[str]) -> None:
        """This process journaled rows for tables `names`: count them for the others."""
        self.counter.committed([journaled_of(name) for name in names])

    def ask(self) -> None:
        """Ask the store's other processes to write what they journaled now (`FLUSH`)."""
        self.counter.committed([FLUSH])

    def asked(self) -> int:
        """The epoch of the others' requests to write now (`FLUSH`): moves when one asks."""
        return self.counter.epoch(FLUSH)

    async def written(self, name: str, table: Any, pending: Callable[[dict[str, set[str]]], set[str]]) -> None:
        """Before a read of table `name` (its handle `table`): if other processes hold rows for it in
        their journals (`pending` picks them from `live_ids`), ask them to write now and wait until
        they have (at most `WAIT` s), then point the handle at the table's newest version. One
        8-byte read when no other process journaled rows for the table since the last look."""
        epoch = self.counter.epoch(journaled_of(name))
        if self._seen.get(name) == epoch:
            return
        live = pending(await asyncio.to_thread(live_ids, self.root, others=True))
        given_up = self._given_up.get(name, set()) & live  # (those written since are forgotten)
        held = live - given_up
        if live:
            self.ask()  # rows given up on too: their process may be able to write them by now
        if held:
            began = time.monotonic()
            while held and time.monotonic() < began + WAIT:
                await asyncio.sleep(POLL)
                held &= pending(await asyncio.to_thread(live_ids, self.root, others=True))
            if held:  # a process that cannot write them now (stopped, a full disk): read what is there
                log.warning("a read of %s went ahead while another process still holds %d journaled rows of it", name, len(held))
                given_up |= held
            await table.checkout_latest()
            self.tally.journal_waits += 1
            self.tally.journal_wait_s += time.monotonic() - began
        self._given_up[name] = given_up
        self._seen[name] = epoch
