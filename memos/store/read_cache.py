"""Reads remembered at the table version they saw, so a chat turn does not read twice what has
not changed.

A LanceDB table's version moves by one with every commit, whoever makes it. A read made when a
table was at version `v` is still right while the table is at `v`. `Storage` reports each of
its own writes here with the version that write produced (`wrote`): a write that took the
table from `v` to `v + 1` is exactly that write, so a remembered read at `v` can be carried
forward to `v + 1` when the write only added rows (a count grows by the rows that match, a
set of records read by id is unchanged); any other write, or a version that jumped by more
than one (another writer, a compaction), forgets the reads of that table.

Other processes' commits are seen by `Storage.versions()` (one cheap call: each table's
latest version): `check` forgets every read whose table moved. A caller that wants remembered
reads calls it once at the start of a step and then reads with `cached=True`; LanceDB itself
sees other processes' commits within `storage.READ_CONSISTENCY`, and a step's reads are no
staler than that.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FORGET", "KEEP", "ReadCache"]

AddRule = Callable[[Any, Sequence[dict[str, Any]]], Any]
"""How a remembered value changes when rows are added: the new value, or `FORGET`."""

FORGET = object()
"""What `ReadCache.get` returns for a read it does not hold, and what an add rule returns to drop one."""


def KEEP(value: Any, added: Sequence[dict[str, Any]]) -> Any:  # noqa: N802 (a rule, named like a constant)
    """An add rule: rows added never change this read (e.g. records read by id)."""
    return value


@dataclass
class _Entry:
    table: str
    version: int
    value: Any
    on_add: AddRule | None


class ReadCache:
    """Remembered reads keyed by what was read (see the module docstring). Bounded: the oldest
    entries go first once `limit` are held."""

    FORGET = FORGET

    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self.seen: dict[str, int] = {}
        """Each table's latest version known to this process (from `check` and its own writes)."""
        self._entries: dict[Hashable, _Entry] = {}
        self.hits = 0
        self.misses = 0

    def check(self, versions: Mapping[str, int]) -> None:
        """Take the tables' current versions (`Storage.versions()`); forget reads of tables that moved."""
        self.seen.update(versions)
        for key, entry in list(self._entries.items()):
            if versions.get(entry.table, entry.version) != entry.version:
                del self._entries[key]

    def get(self, key: Hashable) -> Any:
        """The remembered value of `key` if its table is still at the version it was read at, else `FORGET`."""
        entry = self._entries.get(key)
        if entry is None or self.seen.get(entry.table) != entry.version:
            self.misses += 1
            return FORGET
        self.hits += 1
        return entry.value

    def at(self, table: str) -> int | None:
        """The version a read about to start is labelled with (take it before the read: a write
        of this process that lands while the read is in flight then leaves the value unused;
        `Storage.label` takes it once the rows this process queued for the table are written)."""
        return self.seen.get(table)

    def put(self, key: Hashable, table: str, value: Any, on_add: AddRule | None = None, *, at: int | None = None) -> None:
        """Remember `value`, read after the last `check`, labelled with `at` (from `at()` before the
        read). A commit seen by the read but not by the label makes the next check forget it,
        never the reverse. Nothing is kept for a table whose version is not known."""
        version = at
        if version is None:
            return
        self._entries.pop(key, None)
        self._entries[key] = _Entry(table, version, value, on_add)
        while len(self._entries) > self.limit:
            del self._entries[next(iter(self._entries))]

    def wrote(self, table: str, version: int | None, added: Sequence[dict[str, Any]] | None = None) -> None:
        """This process committed to `table`, producing `version` (None: unknown, e.g. a write that
        failed part way). `added`: the rows, when the write only added rows."""
        before = self.seen.get(table)
        for key, entry in list(self._entries.items()):
            if entry.table != table:
                continue
            carried = FORGET
            if version is not None and added is not None and entry.on_add is not None and entry.version == version - 1:
                carried = entry.on_add(entry.value, added)
            if carried is FORGET or version is None:  # version None: carried is FORGET
                del self._entries[key]
            else:
                entry.value, entry.version = carried, version
        if version is None:
            self.seen.pop(table, None)
        elif before is None or version > before:
            self.seen[table] = version

    def added(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """This process queued `rows` for `table` (`memos.store.lancedb.write_behind`): remembered reads of the
        table's current version count them now, as added by a commit (their commit is then reported
        with no rows). A read of a table with rows queued writes them first, so no remembered read
        counts them twice."""
        current = self.seen.get(table)
        for key, entry in list(self._entries.items()):
            if entry.table != table:
                continue
            carried = entry.on_add(entry.value, rows) if entry.on_add is not None and entry.version == current else FORGET
            if carried is FORGET:
                del self._entries[key]
            else:
                entry.value = carried

    def clear(self) -> None:
        """Forget everything (a store rebuilt under this process, e.g. a re-index)."""
        self._entries.clear()
        self.seen.clear()
