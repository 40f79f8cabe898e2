"""A filter's rows of the shared search table, held in memory: a vector or full-text search of a
scope this process searches again and again is answered in numpy and Python, not by a LanceDB query.

Below `indexing.ANN_MIN_ROWS` LanceDB answers a vector query by reading every vector its filter
lets through, and each query has a fixed cost of its own (planning, the filter, the reads): served,
the shared table's vector query was a large part of a search's CPU and most of its wait
(docs/benchmarks.md). A full-text query reads the index and then scans every row committed since
the index was last brought up to date; under a served load there always are some, and that scan
was ~45 % of a search's CPU on 2 cores. Here the rows of one `where` (key, vector, `RECORD`, and the
indexed text when asked for) are read once, in one scan, and then kept up to date by this
process's own writes to the table:

- **What the copy is a copy of.** A load reads the table's version before and after its scan;
  only a scan that saw one version is kept, labelled with it. Every later write of this process
  to the shared table (`SearchIndex.mirror`) reports the rows it set and the keys it removed with
  the version it produced, and each held copy takes the change if it is newer than the copy (per
  key: a write reported after a newer one of the same key changes nothing). The writes reported
  while a load is in flight are logged, and the load, once labelled, takes those newer than its
  label.
- **Other processes.** The store's commit counters (`memos.store.lancedb.commits`) tell when
  another process committed to the table. Every commit to the shared table posts a change notice
  (`HeldReads.noticed`: the versions it made and the keys it set or removed, never what a row holds)
  after it lands and before it is counted, so a process that finds the counters moved reads the
  others' notices and then re-reads the keys they name, in one query at one version of the table
  (a catch-up, `caught_up`); what it read is taken like a write of its own at that version, and
  the copies and the terms are then current at the counters' epoch. Until a catch-up has run, a
  copy of an older epoch answers nothing (the search goes to LanceDB).
- **Versions nobody explained.** A catch-up also checks that every version of the table since
  the oldest copy was read is one this process committed or one a notice named (`known`). A
  version unexplained for `UNEXPLAINED_SECONDS` (a process that died between its commit and its
  notice, a notice file removed before it was read) drops everything held, as does a catch-up
  with more than `CATCH_UP_MAX_KEYS` keys to read. A store with no counters (object storage)
  holds nothing.
- **What is held.** Only filters that say how to test a row (`memos.store.scope.Where.test`), and
  only once a filter has been searched twice (a filter of a passing moment, such as a time window
  ending now, is never loaded). At most `BUDGET` bytes in all, the least recently searched copy
  going first; a filter with more rows than a quarter of that is left to LanceDB.
- **When in doubt, nothing.** A write whose outcome is unknown (it raised, or gave no version), a
  rebuilt table, an unexplained version or a copy that cannot be labelled drops what is held.

Vector scores are LanceDB's: the cosine distance, 1 - a.b / (|a| |b|), in float32. A row with no
vector (or a zero one, which has no direction) is never a vector hit.

**Full text** needs, besides a filter's rows, the table's terms (`_Terms`): every row's tokens as the
index splits them (LanceDB's own tokenizer with the index's settings, `text_index.index_tokens`)
and the counts BM25 weighs them by, read in one scan of the whole table's text
(`TERMS_MAX_ROWS` rows at most) and kept up to date the same way. A hit is a row holding a token of
the query, scored by BM25 as LanceDB's index scores it (k1 = 1.2, b = 0.75; each occurrence of a
query token counts; the document count, average length and each token's document count over the
rows with a token) over the table's current rows: the scores LanceDB gives when its index was
built from the rows as they are. Between rebuilds LanceDB's own differ from those by about 1 % with
the index's history (rows it still counts after their deletion, parts indexed apart, rows outside
it), so rows within that of each other may come in the other order.
"""

from __future__ import annotations

import collections
import itertools
import math
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memos.store.scope import RowTest

__all__ = ["BM25_B", "BM25_K1", "BUDGET", "CATCH_UP_MAX_KEYS", "HeldRows", "TERMS_MAX_ROWS", "UNEXPLAINED_SECONDS"]

BUDGET = 48 << 20
"""Bytes held in all (vectors, records, texts, a copy's postings). A 384-d row with its record is
~2 KB, so ~24,000 rows: the scopes a busy server searches, not a whole large store."""
TERMS_MAX_ROWS = 100_000
"""The most rows of a table whose terms are held for full-text searches: ~270 bytes a row (its key
and token ids), and a load tokenizes every row (~13 µs a row, in a worker thread)."""
BM25_K1 = 1.2
BM25_B = 0.75
"""LanceDB's BM25 parameters (its full-text index has no setting for them)."""
CATCH_UP_MAX_KEYS = 2_048
"""The most keys one catch-up re-reads; past it (another process wrote a large batch) everything
held is dropped and read again later, which costs about the same."""
UNEXPLAINED_SECONDS = 5.0
"""How long a version of the table may be unexplained (no commit of this process, no notice)
before what is held is dropped: this process's commits in flight and the others' notices on their
way explain theirs within milliseconds."""
_KNOWN_MAX = 65_536
"""Versions remembered as explained above the oldest unexplained one; past it everything is dropped."""
_SETTLED = 256
"""Searches answered with the terms after which their drop starts the count again."""
_MOST_DROPS = 6
_LOG_ROWS = 8_192
"""Rows written while loads are in flight that are kept for them; past it those loads are not kept."""
_SEEN = 1_024
"""Filters remembered as searched once (and at which commit epoch)."""
_TOUCHED = 4_096
"""Keys a copy remembers the last write of (the newest): a write is reported late only behind
the few in flight beside it."""

Tokenizer = Any
"""`text_index.index_tokens`: texts to their token lists (None: no tokenizer)."""


class _Newest:
    """Which write of a key was taken last: one reported after a newer one changes nothing."""

    def __init__(self) -> None:
        self.touched: dict[str, int] = {}

    def newer(self, key: str, version: int) -> bool:
        """Whether a write of `key` at `version` is newer than the last one taken (and note it)."""
        if self.touched.get(key, -1) >= version:
            return False
        self.touched.pop(key, None)  # to the end: the oldest are forgotten first
        self.touched[key] = version
        return True

    def trim(self) -> None:
        if len(self.touched) > _TOUCHED:
            for key in list(itertools.islice(self.touched, len(self.touched) - _TOUCHED // 2)):
                del self.touched[key]


class _Terms:
    """The shared table's terms: each row's tokens (ids, repeats kept) and, over the rows with at
    least one, how many there are (`docs`), their tokens in all (`total`) and how many hold each
    token (`df`): what BM25 weighs a match by."""

    def __init__(self, version: int, epoch: int, keys: Sequence[str], tokens: Sequence[Sequence[str]]) -> None:
        self.version, self.epoch = version, epoch
        self.searches = 0
        """Full-text searches answered with these terms."""
        self.ids: dict[str, int] = {}
        self.df: list[int] = []
        self.of: dict[str, array[int]] = {}
        self.docs = self.total = 0
        self.newest = _Newest()
        for key, row in zip(keys, tokens, strict=True):
            self._set(key, row)

    def token_ids(self, tokens: Sequence[str]) -> array[int]:
        ids = self.ids
        out = array("i")
        for token in tokens:
            i = ids.get(token)
            if i is None:
                i = ids[token] = len(self.df)
                self.df.append(0)
            out.append(i)
        return out

    def _set(self, key: str, tokens: Sequence[str]) -> None:
        self._remove(key)
        row = self.token_ids(tokens)
        self.of[key] = row
        if row:
            self.docs += 1
            self.total += len(row)
            for i in set(row):
                self.df[i] += 1

    def _remove(self, key: str) -> None:
        row = self.of.pop(key, None)
        if row:
            self.docs -= 1
            self.total -= len(row)
            for i in set(row):
                self.df[i] -= 1

    def take(self, version: int, keys: Sequence[str], tokens: Sequence[Sequence[str]], removed: Sequence[str]) -> None:
        if version <= self.version:
            return
        for key, row in zip(keys, tokens, strict=True):
            if self.newest.newer(key, version):
                self._set(key, row)
        for key in removed:
            if self.newest.newer(key, version):
                self._remove(key)
        self.newest.trim()

    def weights(self, query: Sequence[str]) -> dict[int, float]:
        """Each token of the query the table holds, with its BM25 weight (idf × its count in the query)."""
        weights: dict[int, float] = {}
        if not self.docs:
            return weights
        for token, count in collections.Counter(query).items():
            i = self.ids.get(token)
            if i is not None and self.df[i] > 0:
                n = self.df[i]
                weights[i] = count * math.log(1 + (self.docs - n + 0.5) / (n + 0.5))
        return weights


class _Postings:
    """A copy's tokens for full-text scoring: one entry (token id, row position, count) per distinct
    token of each row, in growing arrays; a row's entries are contiguous, and a row removed or set
    again has its old entries marked dead until they are half of all. A search finds a token's
    entries in an order of the entries by token (sorted again as entries are added: about 23
    bytes an entry in all) and among the few added since, not by reading them all."""

    def __init__(self) -> None:
        self.token = np.zeros(1024, dtype=np.int32)
        self.row = np.zeros(1024, dtype=np.int32)
        self.count = np.zeros(1024, dtype=np.float32)
        self.live = np.zeros(1024, dtype=bool)
        self.used = 0
        self.dead = 0
        self.span: dict[int, tuple[int, int]] = {}
        self.sorted = 0
        """Entries before it are in `order` (their places, by token) and `keys` (their tokens, sorted)."""
        self.order = np.zeros(0, dtype=np.int64)
        self.keys = np.zeros(0, dtype=np.int32)

    @property
    def bytes(self) -> int:
        return len(self.token) * 13 + len(self.order) * 12

    def add(self, position: int, tokens: array[int]) -> None:
        self.remove(position)
        if not tokens:
            return
        ids, counts = np.unique(np.asarray(tokens, dtype=np.int32), return_counts=True)
        n = len(ids)
        if self.used + n > len(self.token):
            size = max(2 * len(self.token), self.used + n)
            self.token, self.row, self.count, self.live = (np.resize(self.token, size), np.resize(self.row, size),
                                                           np.resize(self.count, size), np.resize(self.live, size))
            self.live[self.used :] = False
        start, end = self.used, self.used + n
        self.token[start:end], self.count[start:end] = ids, counts
        self.row[start:end] = position
        self.live[start:end] = True
        self.span[position] = (start, end)
        self.used = end

    def remove(self, position: int) -> None:
        span = self.span.pop(position, None)
        if span is None:
            return
        self.live[span[0] : span[1]] = False
        self.dead += span[1] - span[0]
        if self.dead > 1024 and self.dead * 2 > self.used:
            self._pack()

    def _pack(self) -> None:
        """The live entries moved together (each row's stay contiguous)."""
        keep = np.flatnonzero(self.live[: self.used])
        before = np.zeros(self.used + 1, dtype=np.int64)
        before[1:] = np.cumsum(self.live[: self.used])  # live entries before each place: its new place
        self.span = {position: (int(before[a]), int(before[b])) for position, (a, b) in self.span.items()}
        n = len(keep)
        self.token[:n], self.row[:n], self.count[:n] = self.token[keep], self.row[keep], self.count[keep]
        self.live[:n], self.live[n:] = True, False
        self.used, self.dead, self.sorted = n, 0, 0

    def scores(self, weights: Mapping[int, float], lengths: np.ndarray, average: float) -> tuple[np.ndarray, np.ndarray]:
        """(positions, BM25 scores) of the rows holding a weighed token (`lengths`: each position's tokens)."""
        m = len(weights)
        ids = np.fromiter(weights.keys(), dtype=np.int32, count=m)
        order = np.argsort(ids)
        ids, weight = ids[order], np.fromiter(weights.values(), dtype=np.float64, count=m)[order]
        token = self.token[: self.used]
        if self.used - self.sorted > max(512, self.sorted // 8):  # sorted again once the entries after it are an eighth
            self.order = np.argsort(token, kind="stable")
            self.keys, self.sorted = token[self.order], self.used
        low, high = np.searchsorted(self.keys, ids, "left"), np.searchsorted(self.keys, ids, "right")
        newer = self.sorted + np.flatnonzero(np.isin(token[self.sorted :], ids))
        at = np.concatenate([*(self.order[a:b] for a, b in zip(low.tolist(), high.tolist(), strict=True)), newer])
        at = at[self.live[at]]
        if not len(at):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        position, tf = self.row[at], self.count[at].astype(np.float64)
        k1, b = BM25_K1, BM25_B
        part = weight[np.searchsorted(ids, token[at])] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[position] / average))
        total = np.bincount(position, weights=part, minlength=len(lengths))
        found = np.flatnonzero(np.bincount(position, minlength=len(lengths)))
        return found, total[found]


class _Rows:
    """One filter's rows: vectors in one growing matrix, keys to positions, removed rows masked;
    for full text, its rows' tokens (`_Postings`) gathered at the first full-text search."""

    def __init__(self, keys: Sequence[str], vectors: np.ndarray, records: Sequence[str], texts: Sequence[str | None]) -> None:
        """The rows of a load: `vectors` one float32 row per key (a row of NaN: none stored; no
        columns: the store has no embedder)."""
        n, self.dim = vectors.shape
        size = max(16, n * 5 // 4)
        self.vectors = np.zeros((size, self.dim), dtype=np.float32)
        self.vectors[:n] = vectors
        self.norms = np.zeros(size, dtype=np.float32)
        with np.errstate(invalid="ignore"):
            self.norms[:n] = np.linalg.norm(vectors, axis=1) if self.dim else 0.0
        self.vectored = np.zeros(size, dtype=bool)
        self.vectored[:n] = np.isfinite(self.norms[:n]) & (self.norms[:n] > 0)
        self.alive = np.zeros(size, dtype=bool)
        self.records: list[str | None] = [*records, *[None] * (size - n)]
        self.texts: list[str | None] = [*texts, *[None] * (size - n)]
        self.at = {key: i for i, key in enumerate(keys)}  # a key read twice: its last row
        self.alive[list(self.at.values())] = True
        self.vectored &= self.alive
        for i in np.flatnonzero(~self.alive[:n]):
            self.records[i] = self.texts[i] = None
        self.used = n
        self.bytes = n * (self.dim * 4 + 64) + sum(len(r) for r in records) + sum(len(t) for t in texts if t)
        self.postings: _Postings | None = None
        self.lengths = np.zeros(size, dtype=np.float64)

    def put(self, key: str, vector: Any, record: str, text: str | None, tokens: array[int] | None) -> None:
        """Set `key`'s row (`tokens`: its token ids, None: not known, which drops the postings)."""
        values = None if vector is None or not self.dim else np.asarray(vector, dtype=np.float32).reshape(-1)
        usable = values is not None and values.shape[0] == self.dim and bool(np.isfinite(values).all())
        norm = float(np.linalg.norm(values)) if usable and values is not None else 0.0
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
            self._unpost(i)
        if norm > 0 and values is not None:
            self.vectors[i], self.norms[i], self.vectored[i] = values, norm, True
        else:
            self.vectored[i] = False
        self.alive[i] = True
        self.records[i], self.texts[i] = record, text
        self.bytes += len(record) + len(text or "")
        if self.postings is not None:
            if tokens is None:
                self.drop_postings()
            else:
                self._post(i, tokens)

    def remove(self, key: str) -> None:
        i = self.at.pop(key, None)
        if i is not None:
            self.alive[i] = self.vectored[i] = False
            self.bytes -= len(self.records[i] or "") + len(self.texts[i] or "")
            self.records[i] = self.texts[i] = None
            self._unpost(i)

    def _grow(self) -> None:
        """Room for one more row: the live rows moved together when removed ones are half the
        matrix or more, else a matrix twice the size."""
        live = np.flatnonzero(self.alive[: self.used])
        if len(live) <= self.used // 2:
            key_of = {i: key for key, i in self.at.items()}
            n = len(live)
            self.vectors[:n], self.norms[:n], self.vectored[:n] = self.vectors[live], self.norms[live], self.vectored[live]
            self.records[:n], self.texts[:n] = [self.records[i] for i in live], [self.texts[i] for i in live]
            self.records[n : self.used] = self.texts[n : self.used] = [None] * (self.used - n)
            self.alive[:] = False
            self.alive[:n] = True
            self.vectored[n:] = False
            self.at = {key_of[i]: j for j, i in enumerate(live.tolist())}
            self.bytes -= (self.used - n) * (self.dim * 4 + 64)
            self.used = n
            self.drop_postings()  # positions moved: built again at the next full-text search
            return
        size = len(self.alive) * 2
        self.vectors = np.resize(self.vectors, (size, self.dim))
        self.norms = np.resize(self.norms, size)
        self.lengths = np.resize(self.lengths, size)
        alive, vectored = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
        alive[: len(self.alive)], vectored[: len(self.vectored)] = self.alive, self.vectored
        self.alive, self.vectored = alive, vectored
        self.records += [None] * (size - len(self.records))
        self.texts += [None] * (size - len(self.texts))

    def nearest(self, query: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """The `limit` nearest live rows with a vector as (position, cosine distance), nearest first."""
        n = self.used
        if not self.at or limit <= 0:
            return []
        qnorm = np.float32(np.linalg.norm(query))
        if not np.isfinite(qnorm) or qnorm == 0:
            return []
        with np.errstate(invalid="ignore", divide="ignore"):  # a removed row's norm may be 0: masked below
            distance = np.float32(1.0) - (self.vectors[:n] @ query) / (self.norms[:n] * qnorm)
        distance[~self.vectored[:n]] = np.inf
        k = min(limit, int(self.vectored[:n].sum()))
        if k <= 0:
            return []
        top = np.argpartition(distance, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(distance[top], kind="stable")]
        return [(int(i), float(distance[i])) for i in top[:k] if self.vectored[i]]

    # --- full text -----------------------------------------------------------------------

    def drop_postings(self) -> None:
        if self.postings is not None:
            self.bytes -= self.postings.bytes
        self.postings = None

    def build_postings(self, terms: _Terms) -> bool:
        """Post every live row's tokens (from `terms`); False, and nothing built, when a row is not in them."""
        self.drop_postings()
        self.postings = _Postings()
        for key, i in self.at.items():
            tokens = terms.of.get(key)
            if tokens is None:
                self.drop_postings()
                return False
            self._post(i, tokens)
        return True

    def _post(self, i: int, tokens: array[int]) -> None:
        postings = self.postings
        assert postings is not None
        self.bytes -= postings.bytes
        postings.add(i, tokens)
        self.lengths[i] = len(tokens)
        self.bytes += postings.bytes

    def _unpost(self, i: int) -> None:
        if self.postings is not None:
            self.bytes -= self.postings.bytes
            self.postings.remove(i)
            self.bytes += self.postings.bytes

    def best_text(self, weights: Mapping[int, float], average: float, limit: int) -> list[tuple[int, float]]:
        """The `limit` best BM25 matches as (position, score), best first (`weights`: `_Terms.weights`)."""
        if self.postings is None or not weights or limit <= 0 or average <= 0:
            return []
        before = self.postings.bytes
        found, scores = self.postings.scores(weights, self.lengths, average)
        self.bytes += self.postings.bytes - before  # the order by token may have been built again
        k = min(limit, len(found))
        if k < len(found):
            top = np.argpartition(-scores, k - 1)[:k]
            found, scores = found[top], scores[top]
        order = np.argsort(-scores, kind="stable")
        return [(int(found[i]), float(scores[i])) for i in order]


@dataclass
class _Held:
    rows: _Rows
    test: RowTest
    with_text: bool
    version: int
    """The table's version the copy was read at; writes up to it are in it."""
    epoch: int
    """The commit counters' epoch of the table when it was read (another process's commit moves it)."""
    newest: _Newest = field(default_factory=_Newest)
    """Keys written since the read, with the version that last set them."""

    def take(self, version: int, sets: Sequence[Mapping[str, Any]], removed: Sequence[str], terms: _Terms | None) -> None:
        if version <= self.version:
            return
        for row in sets:
            key = row["key"]
            if self.newest.newer(key, version):
                if self.test(row):
                    self.rows.put(key, row.get("vector"), row["record"], row.get("text") if self.with_text else None,
                                  None if terms is None else terms.of.get(key))
                else:
                    self.rows.remove(key)
        for key in removed:
            if self.newest.newer(key, version):
                self.rows.remove(key)
        self.newest.trim()


@dataclass(frozen=True)
class _Write:
    version: int
    sets: Sequence[Mapping[str, Any]]
    removed: Sequence[str]
    tokens: Sequence[Sequence[str]]
    """The tokens of `sets`' texts (none without a tokenizer)."""


class HeldRows:
    """The shared table's held copies for one open store (see the module docstring)."""

    def __init__(self, budget: int = BUDGET, tokenizer: Tokenizer = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self.tokenizer = tokenizer
        """`text_index.index_tokens` (None: full-text searches are never held)."""
        self.clock = clock
        """Seconds, for how long a version has been unexplained (`UNEXPLAINED_SECONDS`)."""
        self._held: collections.OrderedDict[tuple[str, bool], _Held] = collections.OrderedDict()
        self._seen: collections.OrderedDict[tuple[str, bool, str], None] = collections.OrderedDict()
        self._large: collections.OrderedDict[tuple[str, bool], None] = collections.OrderedDict()
        """Filters found to have too many rows to hold: left to LanceDB."""
        self.terms: _Terms | None = None
        self._terms_large: int | None = None
        """The epoch at which the table had too many rows for its terms to be held."""
        self._terms_drops = 0
        """How often in a row the terms were dropped soon after a read (`clear`): the next read
        waits for 2 ** it full-text searches without them (a store whose held rows are dropped all
        the time is not read whole again and again)."""
        self._without_terms = 0
        """Full-text searches since the terms were last dropped (or never read)."""
        self._pending: dict[str, int] = {}
        """Keys other processes' notices named, with the newest version that changed each: re-read
        at the next catch-up."""
        self._floor: int | None = None
        """Every version of the table up to it is explained (None: nothing held since the last clear)."""
        self._known: set[int] = set()
        """Versions above the floor explained: committed by this process or named by a notice."""
        self._unexplained_since: float | None = None
        self._loading = 0
        """Loads in flight: while there are any, this process's writes are logged for them."""
        self._log: list[_Write] = []
        self._logged = 0
        self._generation = 0
        """Moves on when what is held is dropped or the log overflows: a load begun before is not kept."""
        self.hits = 0
        self.text_hits = 0
        self.loads = 0
        self.catch_ups = 0

    # --- what this process wrote ---------------------------------------------------------

    def wrote(self, version: int | None, sets: Sequence[Mapping[str, Any]] = (), removed: Sequence[str] = ()) -> None:
        """This process committed a write to the shared table: `sets` (shared rows, as written)
        were set by key, `removed` keys were deleted, producing `version` (None: unknown)."""
        if version is None:
            self.clear()
            return
        tokens: Sequence[Sequence[str]] = []
        if sets and self.tokenizer is not None and (self.terms is not None or self._loading):
            tokens = self.tokenizer([row.get("text") for row in sets])
        if self._loading:
            self._log.append(_Write(version, sets, removed, tokens))
            self._logged += len(sets) + len(removed)
            if self._logged > _LOG_ROWS:
                self._forget_log()
        if self.terms is not None:
            self.terms.take(version, [row["key"] for row in sets], tokens, removed)
        for held in self._held.values():
            held.take(version, sets, removed, self.terms)
        self._fit()

    def _forget_log(self) -> None:
        self._log, self._logged = [], 0
        self._generation += 1

    def clear(self) -> None:
        """Drop everything held (a write of unknown outcome, a rebuilt table, an unexplained version)."""
        if self.terms is not None:
            self._terms_drops = min(self._terms_drops + 1, _MOST_DROPS) if self.terms.searches < _SETTLED else 0
            self._without_terms = 0
        self._held.clear()
        self._seen.clear()
        self.terms = None
        self._pending.clear()
        self._floor, self._known, self._unexplained_since = None, set(), None
        self._forget_log()

    # --- what other processes wrote ------------------------------------------------------

    def empty(self) -> bool:
        """Nothing held and no load in flight: another process's notices so far concern nothing here."""
        return not self._held and self.terms is None and not self._loading

    def known(self, versions: Iterable[int]) -> None:
        """Versions of the table whose changes this process knows of: its own commits (content or
        not) and those another process's notice named."""
        floor = self._floor
        known = self._known
        known.update(v for v in versions if floor is None or v > floor)
        if floor is not None:
            while floor + 1 in known:
                floor += 1
                known.discard(floor)
            self._floor = floor
        if len(known) > _KNOWN_MAX:
            self.clear()

    def noticed(self, first: int, last: int, keys: Sequence[str]) -> None:
        """Another process's notice: its commit made versions `first` to `last` and set or removed `keys`."""
        self.known(range(first, last + 1))
        pending = self._pending
        for key in keys:
            if pending.get(key, -1) < last:
                pending[key] = last
        if len(pending) > CATCH_UP_MAX_KEYS:
            self.clear()

    def pending(self) -> list[str]:
        """The keys the next catch-up re-reads."""
        return list(self._pending)

    def behind(self, epoch: int) -> bool:
        """Whether a copy or the terms are of an older commit epoch than `epoch` (a catch-up is due)."""
        return (self.terms is not None and self.terms.epoch != epoch) or any(h.epoch != epoch for h in self._held.values())

    def caught_up(self, epoch: int, generation: int, version: int, keys: Sequence[str], found: Sequence[Mapping[str, Any]]) -> bool:
        """A catch-up begun at commit `epoch` (after it read the notices) read `keys` at the
        table's `version`, finding the shared rows `found` (the others were removed): taken like a
        write of this process, then everything held is current at `epoch`. False when it was not
        taken (a clear since it began, or a version unexplained for too long: everything dropped)."""
        if generation != self._generation:
            return False
        there = {row["key"] for row in found}
        self.wrote(version, found, [key for key in keys if key not in there])
        for key in keys:
            if self._pending.get(key, version + 1) <= version:
                del self._pending[key]
        if self._floor is not None:
            if self._floor >= version:
                self._unexplained_since = None
            elif self._unexplained_since is None:
                self._unexplained_since = self.clock()
            elif self.clock() - self._unexplained_since > UNEXPLAINED_SECONDS:
                self.clear()
                return False
        for held in self._held.values():
            held.epoch = max(held.epoch, epoch)
        if self.terms is not None:
            self.terms.epoch = max(self.terms.epoch, epoch)
        self.catch_ups += 1
        return True

    def _read_at(self, version: int) -> None:
        """Something was read whole at `version`: the versions after it are the ones to explain."""
        if self._floor is None:
            self._floor = version
            self._known = {v for v in self._known if v > version}
            self.known(())

    # --- searching -----------------------------------------------------------------------

    def _copy(self, where: str, with_text: bool, epoch: int) -> _Held | None:
        key = (where, with_text)
        held = self._held.get(key)
        if held is None:
            return None
        if held.epoch != epoch:  # another process committed since: no catch-up yet
            return None
        self._held.move_to_end(key)
        return held

    def nearest(self, where: str, with_text: bool, epoch: int, vector: Sequence[float], limit: int) -> list[dict[str, Any]] | None:
        """The `limit` nearest rows of `where` from a held copy, as (`RECORD`, text, `_distance`)
        dicts, nearest first; None when no copy is held for the filter at this epoch."""
        held = self._copy(where, with_text, epoch)
        if held is None:
            return None
        rows = held.rows
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != rows.dim:
            return None  # LanceDB's own error names the mismatch
        self.hits += 1
        return [{"record": rows.records[i], "text": rows.texts[i], "_distance": d} for i, d in rows.nearest(query, limit)]

    def best_text(self, where: str, with_text: bool, epoch: int, query: str, limit: int) -> list[dict[str, Any]] | None:
        """The `limit` best full-text matches of `query` (its words, as for LanceDB) in `where`
        from a held copy, as (`RECORD`, text, `_score`) dicts, best first; None when no copy or no
        terms are held at this epoch."""
        terms = self.terms
        if terms is None:
            self._without_terms += 1
            return None
        if terms.epoch != epoch:
            return None
        terms.searches += 1
        held = self._copy(where, with_text, epoch)
        if held is None:
            return None
        rows = held.rows
        if rows.postings is None:
            if not rows.build_postings(terms):
                return None
            self._fit()
            if self._held.get((where, with_text)) is not held:
                return None  # the postings took it over the budget
        [tokens] = self.tokenizer([query])
        self.text_hits += 1
        found = rows.best_text(terms.weights(tokens), terms.total / terms.docs if terms.docs else 0.0, limit)
        return [{"record": rows.records[i], "text": rows.texts[i], "_score": score} for i, score in found]

    def wanted(self, where: str, with_text: bool, kind: str = "vector") -> bool:
        """Whether the filter should be loaded now for a search of `kind` ("vector", "text"):
        searched so before."""
        if (where, with_text) in self._large:
            return False
        key = (where, with_text, kind)
        before = key in self._seen
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > _SEEN:
            self._seen.popitem(last=False)
        return before

    def has_copy(self, where: str, with_text: bool, epoch: int) -> bool:
        held = self._held.get((where, with_text))
        return held is not None and held.epoch == epoch

    def has_terms(self, epoch: int) -> bool:
        """Whether the table's terms are held at this epoch."""
        return self.terms is not None and self.terms.epoch == epoch

    def terms_wanted(self, epoch: int) -> bool:
        """Whether the table's terms should be read now: a tokenizer, none held, not found too many
        at this epoch, and enough full-text searches since they were last dropped (`_terms_drops`)."""
        return (self.tokenizer is not None and self._terms_large != epoch and self.terms is None
                and self._without_terms >= 2 ** self._terms_drops)

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
        """Hold a load's rows (`vectors`: one float32 row per key, NaN where a row has none; no
        columns without an embedder), read between the table's versions `before` and `after` (kept
        only when they are one: the rows are then exactly that version's), then take the writes
        newer than it. False when not kept."""
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
            held.take(write.version, write.sets, write.removed, None)
        self._read_at(before)
        self._held[key] = held
        self.loads += 1
        self._fit()
        return key in self._held

    def keep_terms(self, epoch: int, generation: int, before: int, after: int, keys: Sequence[str],
                   tokens: Sequence[Sequence[str]], complete: bool) -> bool:
        """Hold the table's terms read between its versions `before` and `after` (`tokens`: each
        key's, from `tokenizer`; `complete`: every row was read, else the table is too large),
        then take the writes newer than that. False when not kept."""
        if not complete:
            self._terms_large = epoch
            return False
        if before != after or generation != self._generation:
            return False
        terms = _Terms(before, epoch, keys, tokens)
        for write in sorted(self._log, key=lambda w: w.version):
            terms.take(write.version, [row["key"] for row in write.sets], write.tokens, write.removed)
        self._read_at(before)
        self.terms = terms
        for held in self._held.values():  # built again from these terms at their next full-text search
            held.rows.drop_postings()
        return True

    def _fit(self) -> None:
        total = sum(h.rows.bytes for h in self._held.values())
        while total > self.budget and self._held:
            _, held = self._held.popitem(last=False)
            total -= held.rows.bytes

    def held_rows(self) -> int:
        """Rows held in all (for `GET /admin/stats` and tests)."""
        return sum(len(h.rows.at) for h in self._held.values())
