"""How the shared search table's held copies (`memos.store.lancedb.held_rows`) are read and kept
current across the processes of a store: the loads of a filter's rows and of the table's terms,
the change notice every commit to the table posts (`noticed`), and the catch-ups that read what
the other processes' notices name before a held copy answers again (`answer`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from memos.store.protocol import RECORD
from memos.store.schema import VECTOR_COLUMN
from memos.store.scope import RowTest, sql_in

from .held_rows import TERMS_MAX_ROWS, HeldRows
from .notices import Notices
from .text_index import index_tokens

__all__ = ["CHANGES_DIR", "HeldReads"]

T = TypeVar("T")
log = logging.getLogger("memos.store.lancedb.held_reads")

CHANGES_DIR = ".memos-changes"
"""The folder beside the tables of the shared table's change notices: each commit's versions and the
keys it set or removed (`memos.store.lancedb.notices`, `memos.store.lancedb.held_rows`)."""
_CATCH_UP_READS = 3
"""Reads a catch-up tries before it gives up until the next search (a read is kept only when it saw one version)."""


class _Index(Protocol):
    """What is read of the shared table's index (`memos.store.lancedb.search_index.SearchIndex`)."""

    storage: Any
    table: Any

    def schema(self) -> pa.Schema: ...


def _matrix(column: pa.ChunkedArray, dim: int) -> np.ndarray:
    """A vector column as one float32 matrix, a row of NaN where a row has no vector."""
    vectors = column.combine_chunks()
    out = np.full((len(vectors), dim), np.nan, dtype=np.float32)
    valid = np.asarray(vectors.is_valid(), dtype=bool)
    if valid.any():
        out[valid] = np.asarray(vectors.flatten(), dtype=np.float32).reshape(-1, dim)
    return out


async def _at_one_version(table: Any, queries: Sequence[Any]) -> tuple[int, list[pa.Table | None], int]:
    """Each query's rows (None for a None query) with the table's version before and after them:
    the rows are that version's when the two are one."""
    before = await table.version()
    found = [None if query is None else await query.to_arrow() for query in queries]
    return before, found, await table.version()


class HeldReads:
    """The held copies of one open store's shared table, read and kept current (see the module docstring)."""

    def __init__(self, index: _Index) -> None:
        self.index = index
        self.held = HeldRows(tokenizer=index_tokens)
        path = index.storage.commits.path
        self.changes = Notices(None if path is None else path.parent, CHANGES_DIR)
        """Change notices of the shared table: posted by every commit to it (`noticed`), read by a catch-up."""
        self._running: dict[tuple[str, ...], asyncio.Task[None]] = {}
        """The loads and catch-ups running (`_once`)."""

    def noticed(self, op: Callable[[], Awaitable[T]], changed: Sequence[str] | None) -> Callable[[], Awaitable[T]]:
        """`op` (a write to the shared table) followed, once it has landed, by its change notice
        for the store's other processes: the versions it made and the keys it `changed` (None: a
        write that changes no row's content, such as an optimize or an index); this process
        knows those versions too. The notice goes out before the commit is counted
        (`CommitCounter.committed`), so a process that finds the counters moved finds it."""
        table = self.index.table
        if self.index.storage.commits.path is None:
            return op

        async def write() -> T:
            before = None if changed is not None else await table.version()
            result = await op()
            version = getattr(result, "version", None)
            if changed is not None and isinstance(version, int):
                first = last = version
            elif isinstance(result, range):  # the versions pylance committed (`Compaction`): the handle has not seen them
                first, last = result.start, result.stop - 1
            else:  # an optimize's or an index's versions, however many: what its handle moved over
                first, last = (before if before is not None else await table.version() - 1) + 1, await table.version()
            if last >= first:
                try:
                    self.changes.post({"v": [first, last], "keys": list(changed or ())})
                except OSError as exc:  # the others drop what they hold when they find the version unexplained
                    log.warning("a change notice of the search table was not posted (%s)", exc)
                self.held.known(range(first, last + 1))
            return result

        return write

    async def answer(self, where: str, with_text: bool, test: RowTest, kind: str,
                    answer: Callable[[int], list[dict[str, Any]] | None]) -> list[dict[str, Any]] | None:
        """`answer` (a search of the held copies at the table's commit epoch), loading what it
        needs first if it is time (the filter's rows; the table's terms, which a full-text search
        needs, are read with them); None: ask LanceDB."""
        table, held = self.index.table, self.held
        await self.index.storage.behind.barrier(table, read=True)  # rows queued for the table are written (and held) first
        epoch = self.index.storage.commits.epoch(table.name)
        for _ in range(2):  # a catch-up already running may have begun before the latest commits
            if not held.behind(epoch):
                break
            await self._once(("catch-up",), lambda: self._catch_up(table))
            if table is not self.index.table:
                return None
            epoch = self.index.storage.commits.epoch(table.name)
        found = answer(epoch)
        if found is None and not held.behind(epoch) and held.wanted(where, with_text, kind):
            rows, terms = not held.has_copy(where, with_text, epoch), held.terms_wanted(epoch)
            if kind == "text" and not (terms or held.has_terms(epoch)):
                return None  # the terms are not read yet (`HeldRows.terms_wanted`): a copy alone answers no full text
            if rows or (terms and kind == "text"):
                await self._once((where, with_text, rows, terms), lambda: self._load(table, where if rows else None, with_text, test,
                                                                                    epoch, terms))
            if table is self.index.table:
                found = answer(epoch)
        if found is not None:
            self.index.storage.compaction.searching(table)
        return found

    async def _once(self, what: tuple[Any, ...], load: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `load`, or wait for the same load already running on this loop (a search's vector
        and full-text queries run together and may both want a filter's rows)."""
        loop = asyncio.get_running_loop()
        running = self._running.get(what)
        if running is not None and running.get_loop() is loop and not running.done():
            await asyncio.shield(running)
            return
        task: asyncio.Task[None] = loop.create_task(load())
        self._running[what] = task
        try:
            await asyncio.shield(task)
        finally:
            if self._running.get(what) is task and task.done():
                del self._running[what]

    async def _catch_up(self, table: Any) -> None:
        """Bring what is held up to the table's commit epoch: read the other processes' change
        notices, then the keys they name in one read of the table at one version
        (`HeldRows.caught_up`)."""
        held = self.held
        epoch = self.index.storage.commits.epoch(table.name)
        if not held.behind(epoch):
            return
        for notice in self.changes.read():
            try:
                first, last = (int(v) for v in notice["v"])
                keys = [str(k) for k in notice["keys"]]
            except (KeyError, TypeError, ValueError):
                log.warning("a change notice of the search table was not understood; what is held is dropped")
                held.clear()
                return
            held.noticed(first, last, keys)
        if not held.behind(epoch):  # dropped (too many keys to read)
            return
        keys = held.pending()  # at most `CATCH_UP_MAX_KEYS` (`HeldRows.noticed`)
        query = table.query().where(sql_in("key", keys)).select(self.index.schema().names) if keys else None
        generation = held.begin()
        try:
            for _ in range(_CATCH_UP_READS):
                before, [found], after = await self.index.storage.read(table, lambda: _at_one_version(table, [query]))
                if before == after:
                    break
            else:
                return  # the next search tries again
            if table is self.index.table:
                held.caught_up(epoch, generation, before, keys, [] if found is None else found.to_pylist())
        finally:
            held.end()

    async def _load(self, table: Any, where: str | None, with_text: bool, test: RowTest, epoch: int, terms: bool) -> None:
        """Read the rows of `where` (None: not wanted) and, if `terms`, every row's text
        (`TERMS_MAX_ROWS` at most) in one read of the table at one version, and hold them; the
        texts are tokenized in a worker thread."""
        held = self.held
        dim = self.index.storage.dim if self.index.storage.embedder_name is not None else 0
        columns = ["key", RECORD, *([VECTOR_COLUMN] if dim else []), *(["text"] if with_text else [])]
        rows_query = None if where is None else table.query().where(where).select(columns).limit(held.limit_rows(dim) + 1)
        terms_query = table.query().select(["key", "text"]).limit(TERMS_MAX_ROWS + 1) if terms else None
        if held.empty():  # the notices posted so far are of rows this load reads
            self.changes.skip()
        generation = held.begin()
        try:
            before, [rows, texts], after = await self.index.storage.read(table, lambda: _at_one_version(table, [rows_query, terms_query]))
            if table is not self.index.table:
                return
            if rows is not None and where is not None:
                vectors = _matrix(rows[VECTOR_COLUMN], dim) if dim else np.zeros((rows.num_rows, 0), dtype=np.float32)
                held.keep(where, with_text, test, epoch, generation, before, after, rows["key"].to_pylist(),
                          vectors, rows[RECORD].to_pylist(), rows["text"].to_pylist() if with_text else None)
            if texts is not None:
                complete = texts.num_rows <= TERMS_MAX_ROWS
                tokens = await asyncio.to_thread(index_tokens, texts["text"].to_pylist()) if complete else []
                if table is self.index.table:
                    held.keep_terms(epoch, generation, before, after, texts["key"].to_pylist() if complete else [], tokens, complete)
        finally:
            held.end()
