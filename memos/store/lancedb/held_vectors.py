"""A filter's vectors of the shared search table, held in memory: a vector search of a scope this
process searches again and again is an exact product in numpy, not a LanceDB query.

Below `indexing.ANN_MIN_ROWS` LanceDB answers a vector query by reading every vector its filter
lets through, and each query has a fixed cost of its own (planning, the filter, the reads): served,
the shared table's vector query was a large part of a search's CPU and most of its wait
(docs/benchmarks.md). Here the rows of one `where` (key, vector, `RECORD`, and the indexed text when asked for)
are read once, in one scan, and then kept up to date by this process's own writes to the table:

- **What the copy is a copy of.** A load reads the table's version before and after its scan;
  only a scan that saw one version is kept, labelled with it. Every later write of this process
  to the shared table (`SearchIndex.mirror`) reports the rows it set and the keys it removed with
  the version it produced, and each held copy takes the change if it is newer than the copy (per
  key: a write reported after a newer one of the same key changes nothing). The writes reported
  while a load is in flight are logged, and the load, once labelled, takes those newer than its
  label.
- **Other processes.** The store's commit counters (`memos.store.lancedb.commits`) tell when
  another process committed to the table: a copy read before that is dropped, and the search goes
  to LanceDB. A filter is loaded again only once two searches in a row found the counters still,
  so a table that others write to all the time is searched as before, with no loads wasted. A
  store with no counters (object storage) holds nothing.
- **What is held.** Only filters that say how to test a row (`memos.store.scope.Where.test`), and
  only once a filter has been searched twice (a filter of a passing moment, such as a time window
  ending now, is never loaded). At most `BUDGET` bytes in all, the least recently searched copy
  going first; a filter with more rows than a quarter of that is left to LanceDB.
- **When in doubt, nothing.** A write whose outcome is unknown (it raised, or gave no version), a
  rebuilt table or a copy that cannot be labelled drops what is held.

Scores are LanceDB's: the cosine distance, 1 - a.b / (|a| |b|), in float32. A row with no vector
(or a zero one, which has no direction) is never returned from a held copy.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memos.store.scope import RowTest

__all__ = ["BUDGET", "HeldVectors"]

BUDGET = 48 << 20
"""Bytes held in all (vectors, records, texts). A 384-d row with its record is ~2 KB, so ~24,000
rows: the scopes a busy server searches, not a whole large store."""
_LOG_ROWS = 8_192
"""Rows written while loads are in flight that are kept for them; past it those loads are not kept."""
_SEEN = 1_024
"""Filters remembered as searched once (and at which commit epoch)."""
_TOUCHED = 4_096
"""Keys a copy remembers the last write of (the newest): a write is reported late only behind
the few in flight beside it."""


class _Rows:
    """One filter's rows: vectors in one growing matrix, keys to positions, removed rows masked."""

    def __init__(self, keys: Sequence[str], vectors: np.ndarray, records: Sequence[str], texts: Sequence[str | None]) -> None:
        """The rows of a load: `vectors` one float32 row per key (a row of NaN: none stored)."""
        n, self.dim = vectors.shape
        size = max(16, n * 5 // 4)
        self.vectors = np.zeros((size, self.dim), dtype=np.float32)
        self.vectors[:n] = vectors
        self.norms = np.zeros(size, dtype=np.float32)
        with np.errstate(invalid="ignore"):
            self.norms[:n] = np.linalg.norm(vectors, axis=1)
        self.alive = np.zeros(size, dtype=bool)
        self.alive[:n] = np.isfinite(self.norms[:n]) & (self.norms[:n] > 0)
        self.records: list[str | None] = [*records, *[None] * (size - n)]
        self.texts: list[str | None] = [*texts, *[None] * (size - n)]
        self.at = {key: i for i, key in enumerate(keys) if self.alive[i]}  # a key read twice: its last row
        self.alive[:] = False
        self.alive[list(self.at.values())] = True
        for i in np.flatnonzero(~self.alive[:n]):
            self.records[i] = self.texts[i] = None
        self.used = n
        self.bytes = n * (self.dim * 4 + 64) + sum(len(r) for r in records) + sum(len(t) for t in texts if t)

    def put(self, key: str, vector: Any, record: str, text: str | None) -> None:
        """Set `key`'s row (a row with no usable vector is removed: it is never a vector hit)."""
        values = None if vector is None else np.asarray(vector, dtype=np.float32).reshape(-1)
        if values is None or values.shape[0] != self.dim or not np.isfinite(values).all():
            self.remove(key)
            return
        norm = float(np.linalg.norm(values))
        if norm == 0.0:
            self.remove(key)
            return
        i = self.at.get(key)
        if i is None:
            if self.used == len(self.alive):
                self._grow()
            i = self.used
            self.used += 1
            self.at[key] = i
            self.bytes += self.dim * 4 + 64
        else:
            self.bytes -= len(self.records[i] or "") + len(self.texts[i] or "")
        self.vectors[i] = values
        self.norms[i] = norm
        self.alive[i] = True
        self.records[i], self.texts[i] = record, text
        self.bytes += len(record) + len(text or "")

    def remove(self, key: str) -> None:
        i = self.at.pop(key, None)
        if i is not None:
            self.alive[i] = False
            self.bytes -= len(self.records[i] or "") + len(self.texts[i] or "")
            self.records[i] = self.texts[i] = None

    def _grow(self) -> None:
        """Room for one more row: the live rows moved together when removed ones are half the
        matrix or more, else a matrix twice the size."""
        live = np.flatnonzero(self.alive[: self.used])
        if len(live) <= self.used // 2:
            key_of = {i: key for key, i in self.at.items()}
            n = len(live)
            self.vectors[:n], self.norms[:n] = self.vectors[live], self.norms[live]
            self.records[:n], self.texts[:n] = [self.records[i] for i in live], [self.texts[i] for i in live]
            self.records[n : self.used] = self.texts[n : self.used] = [None] * (self.used - n)
            self.alive[:] = False
            self.alive[:n] = True
            self.at = {key_of[i]: j for j, i in enumerate(live.tolist())}
            self.bytes -= (self.used - n) * (self.dim * 4 + 64)
            self.used = n
            return
        size = len(self.alive) * 2
        self.vectors = np.resize(self.vectors, (size, self.dim))
        self.norms = np.resize(self.norms, size)
        alive = np.zeros(size, dtype=bool)
        alive[: len(self.alive)] = self.alive
        self.alive = alive
        self.records += [None] * (size - len(self.records))
        self.texts += [None] * (size - len(self.texts))

    def nearest(self, query: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """The `limit` nearest live rows as (position, cosine distance), nearest first."""
        n = self.used
        if not self.at or limit <= 0:
            return []
        qnorm = np.float32(np.linalg.norm(query))
        if not np.isfinite(qnorm) or qnorm == 0:
            return []
        with np.errstate(invalid="ignore", divide="ignore"):  # a removed row's norm may be 0: masked below
            distance = np.float32(1.0) - (self.vectors[:n] @ query) / (self.norms[:n] * qnorm)
        distance[~self.alive[:n]] = np.inf
        k = min(limit, len(self.at))
        top = np.argpartition(distance, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(distance[top], kind="stable")]
        return [(int(i), float(distance[i])) for i in top[:k] if self.alive[i]]


@dataclass
class _Held:
    rows: _Rows
    test: RowTest
    with_text: bool
    version: int
    """The table's version the copy was read at; writes up to it are in it."""
    epoch: int
    """The commit counters' epoch of the table when it was read (another process's commit moves it)."""
    touched: dict[str, int] = field(default_factory=dict)
    """Keys written since the read, with the version that last set them."""

    def take(self, version: int, sets: Sequence[Mapping[str, Any]], removed: Sequence[str]) -> None:
        if version <= self.version:
            return
        for row in sets:
            if self._newer(row["key"], version):
                if self.test(row):
                    self.rows.put(row["key"], row.get("vector"), row["record"], row.get("text") if self.with_text else None)
                else:
                    self.rows.remove(row["key"])
        for key in removed:
            if self._newer(key, version):
                self.rows.remove(key)
        if len(self.touched) > _TOUCHED:
            for key in list(itertools.islice(self.touched, len(self.touched) - _TOUCHED // 2)):
                del self.touched[key]

    def _newer(self, key: str, version: int) -> bool:
        """Whether a write of `key` at `version` is newer than the last one taken (and note it)."""
        if self.touched.get(key, -1) >= version:
            return False
        self.touched.pop(key, None)  # to the end: the oldest are forgotten first
        self.touched[key] = version
        return True


@dataclass(frozen=True)
class _Write:
    version: int
    sets: Sequence[Mapping[str, Any]]
    removed: Sequence[str]


class HeldVectors:
    """The shared table's held copies for one open store (see the module docstring)."""

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self._held: collections.OrderedDict[tuple[str, bool], _Held] = collections.OrderedDict()
        self._seen: collections.OrderedDict[tuple[str, bool], int] = collections.OrderedDict()
        self._large: collections.OrderedDict[tuple[str, bool], None] = collections.OrderedDict()
        """Filters found to have too many rows to hold: left to LanceDB."""
        self._loading = 0
        """Loads in flight: while there are any, this process's writes are logged for them."""
        self._log: list[_Write] = []
        self._logged = 0
        self._generation = 0
        """Moves on when what is held is dropped or the log overflows: a load begun before is not kept."""
        self.hits = 0
        self.loads = 0

    # --- what this process wrote ---------------------------------------------------------

    def wrote(self, version: int | None, sets: Sequence[Mapping[str, Any]] = (), removed: Sequence[str] = ()) -> None:
        """This process committed a write to the shared table: `sets` (shared rows, as written)
        were set by key, `removed` keys were deleted, producing `version` (None: unknown)."""
        if version is None:
            self.clear()
            return
        if self._loading:
            self._log.append(_Write(version, sets, removed))
            self._logged += len(sets) + len(removed)
            if self._logged > _LOG_ROWS:
                self._forget_log()
        for held in self._held.values():
            held.take(version, sets, removed)
        self._fit()

    def _forget_log(self) -> None:
        self._log, self._logged = [], 0
        self._generation += 1

    def clear(self) -> None:
        """Drop everything held (a write of unknown outcome, a rebuilt table)."""
        self._held.clear()
        self._seen.clear()
        self._forget_log()

    # --- searching -----------------------------------------------------------------------

    def nearest(self, where: str, with_text: bool, epoch: int, vector: Sequence[float], limit: int) -> list[dict[str, Any]] | None:
        """The `limit` nearest rows of `where` from a held copy, as (`RECORD`, text, `_distance`)
        dicts, nearest first; None when no copy is held for the filter at this epoch."""
        key = (where, with_text)
        held = self._held.get(key)
        if held is None:
            return None
        if held.epoch != epoch:  # another process committed since it was read
            del self._held[key]
            return None
        self._held.move_to_end(key)
        self.hits += 1
        rows = held.rows
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != rows.dim:
            return None  # LanceDB's own error names the mismatch
        return [{"record": rows.records[i], "text": rows.texts[i], "_distance": d} for i, d in rows.nearest(query, limit)]

    def wanted(self, where: str, with_text: bool, epoch: int) -> bool:
        """Whether the filter should be loaded now: searched before at this same epoch."""
        key = (where, with_text)
        if key in self._large:
            return False
        before = self._seen.get(key)
        self._seen[key] = epoch
        self._seen.move_to_end(key)
        while len(self._seen) > _SEEN:
            self._seen.popitem(last=False)
        return before == epoch

    def begin(self) -> int:
        """A load is about to read: this process's writes are logged until it `end`s; returns
        what `keep` compares."""
        self._loading += 1
        return self._generation

    def end(self) -> None:
        """A load is over (kept or not)."""
        self._loading -= 1
        if not self._loading:
            self._log, self._logged = [], 0

    def limit_rows(self, dim: int) -> int:
        """The most rows one filter may have to be held."""
        return max(1, self.budget // 4 // (dim * 4 + 512))

    def keep(self, where: str, with_text: bool, test: RowTest, epoch: int, generation: int,
             before: int, after: int, keys: Sequence[str], vectors: np.ndarray, records: Sequence[str],
             texts: Sequence[str | None] | None) -> bool:
        """Hold a load's rows (`vectors`: one float32 row per key, NaN where a row has none), read
        between the table's versions `before` and `after` (kept only when they are one: the rows
        are then exactly that version's), then take the writes newer than it. False when not kept."""
        key = (where, with_text)
        if len(keys) > self.limit_rows(vectors.shape[1]):
            self._large[key] = None
            while len(self._large) > _SEEN:
                self._large.popitem(last=False)
            return False
        if before != after or generation != self._generation:
            return False
        held = _Held(_Rows(keys, vectors, records, texts if texts is not None else [None] * len(keys)), test, with_text, before, epoch)
        for write in sorted(self._log, key=lambda w: w.version):
            held.take(write.version, write.sets, write.removed)
        self._held[key] = held
        self.loads += 1
        self._fit()
        return key in self._held

    def _fit(self) -> None:
        total = sum(h.rows.bytes for h in self._held.values())
        while total > self.budget and self._held:
            _, held = self._held.popitem(last=False)
            total -= held.rows.bytes

    def held_rows(self) -> int:
        """Rows held in all (for `GET /admin/stats` and tests)."""
        return sum(len(h.rows.at) for h in self._held.values())
