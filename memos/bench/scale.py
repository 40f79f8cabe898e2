"""`memos bench scale`: insert and search speed, and memory, at N records.

N synthetic records (deterministic, varied text) are spread over the six stores and 20 user
scopes and written through `MemoryOS.add` with the local embedder. The tables are then
compacted and indexed by the maintenance job's own function (`memos.store.lancedb.maintenance.maintain`), and random queries
are searched in random scopes through `MemoryOS.search` over every store. Query vectors are
computed first and served from a cache during the timed searches, so `search_ms` excludes
the query embedding; `embed_ms` reports that embedding on its own.

`embedder="hashed"` builds the data with `HashedTokens`, a deterministic feature-hashing
embedder that costs microseconds a record: the same write path, tables, indexes and searches,
without the hours the local model would take to embed a million records on two cores. Its
reports say which embedder built the data; insert rates of the two are not comparable.
"""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memos.embeddings import TextEmbedder, local_embedder
from memos.memory import MemoryOS
from memos.memtypes import CoreBlock, Episode, Fact, MemoryRecord, Procedure, Resource, VaultItem
from memos.store.lancedb.maintenance import maintain
from memos.store.scope import Scope

from ._stats import peak_rss_mb, percentiles

__all__ = ["HashedTokens", "bench_embedder", "make_records", "open_bench_store", "random_sentence", "run_scale_bench"]

USERS = 20
PURGE_EVERY = 100_000
"""A bulk build drops its tables' old versions after every this many records: each background
optimize rewrites the full-text index, and keeping every version for `KEEP_VERSIONS` made a
build of 340k records take 25 GB of disk (its live data: ~1 GB). Nobody else reads a bench store."""
_PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jules", "Kofi", "Lena", "Mira", "Noah"]
_PLACES = ["Lisbon", "Osaka", "Lagos", "Quito", "Bergen", "Tbilisi", "Hanoi", "Porto", "Nairobi", "Oslo", "Cusco", "Kyoto"]
_THINGS = ["violin lessons", "a sourdough starter", "the garden shed", "a marathon plan", "tax forms", "a vintage camera",
           "the team offsite", "a broken bike", "birthday presents", "the quarterly report", "a hiking trip", "piano practice",
           "the apartment lease", "a chess club", "kitchen renovation", "a language course", "the dentist", "a road trip"]
_VERBS = ["talked about", "planned", "worried about", "finished", "postponed", "asked for help with", "celebrated",
          "argued about", "researched", "bought supplies for", "cancelled", "remembered"]
_MIX = [("episodic", 0.50), ("semantic", 0.20), ("resource", 0.12), ("procedural", 0.10), ("vault", 0.04), ("core", 0.04)]


def random_sentence(rng: random.Random) -> str:
    return (f"{rng.choice(_PEOPLE)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} in {rng.choice(_PLACES)} "
            f"with {rng.choice(_PEOPLE)} ({rng.randint(1, 28)} {rng.choice(['May', 'June', 'July', 'March'])}).")


def make_records(n: int, seed: int = 0) -> list[tuple[Scope, MemoryRecord]]:
    """N deterministic records over the six stores and `USERS` scopes."""
    rng = random.Random(seed)
    names = [name for name, _ in _MIX]
    weights = [w for _, w in _MIX]
    out: list[tuple[Scope, MemoryRecord]] = []
    for i in range(n):
        scope = Scope(f"user{rng.randrange(USERS):02d}", "agent")
        kind = rng.choices(names, weights)[0]
        text = random_sentence(rng)
        record: MemoryRecord
        if kind == "episodic":
            record = Episode(summary=text, actor=rng.choice(_PEOPLE), importance=rng.random())
        elif kind == "semantic":
            record = Fact(subject=rng.choice(_PEOPLE), summary=text, importance=rng.random())
        elif kind == "resource":
            record = Resource(title=f"{rng.choice(_THINGS)}.pdf", content=" ".join(random_sentence(rng) for _ in range(3)))
        elif kind == "procedural":
            record = Procedure(summary=f"How to handle {rng.choice(_THINGS)}", steps=[random_sentence(rng) for _ in range(3)])
        elif kind == "vault":
            record = VaultItem(caption=f"{rng.choice(_PEOPLE)}'s login for {rng.choice(_THINGS)}", secret=f"pw-{i:08d}")
        else:
            record = CoreBlock(label=f"notes{i}", value=text)
        out.append((scope, record))
    return out


_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass(eq=False)
class HashedTokens(TextEmbedder):
    """A deterministic feature-hashing embedder for building large benchmark stores fast.

    Each word (and word pair) adds +-1 to a hashed coordinate; the vector is L2-normalised, so
    texts sharing words are close in cosine. Not a language model: for bulk data only."""

    name: str = "hashed-tokens"
    dim: int = 384
    embedder: Any = None

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        words = [w.lower() for w in _TOKEN.findall(text)]
        for feature in (*words, *(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))):
            digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
            vec[digest % self.dim] += 1.0 if (digest >> 32) & 1 else -1.0
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        return [v / norm for v in vec]

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


@dataclass(eq=False)
class _CachedQueries(TextEmbedder):
    """Serves precomputed query vectors, so timed searches exclude embedding."""

    cache: dict[str, list[float]] = field(default_factory=dict)

    async def embed_query(self, text: str) -> list[float]:
        return self.cache[text]


def bench_embedder(kind: str) -> TextEmbedder:
    """The embedder a benchmark store is built with: "local" (the default model) or "hashed"."""
    if kind == "hashed":
        return HashedTokens()
    if kind == "local":
        return local_embedder()
    raise ValueError(f"unknown bench embedder {kind!r}; use 'local' or 'hashed'")


async def open_bench_store(records: int, root: Path, *, embedder: TextEmbedder, batch: int = 1000, seed: int = 0,
                           progress: Any = None) -> tuple[MemoryOS, dict[str, Any]]:
    """A store of `records` synthetic records at `root`, written through `MemoryOS.add` and then
    compacted and indexed by the maintenance job; reused as it is when `root` already holds one."""
    memory = await MemoryOS.open(root / "db", embedder=embedder, vault_key_file=root / "vault.key")
    existing = sum([await memory.storage.count(name) for name in memory.type_names])
    if existing >= records:
        return memory, {"records": existing, "reused": True}
    by_scope: dict[Scope, list[MemoryRecord]] = {}
    started = time.perf_counter()
    for start in range(0, records, batch):
        by_scope.clear()
        for scope, record in make_records(min(batch, records - start), seed + start):  # generated batch by batch
            by_scope.setdefault(scope, []).append(record)
        for scope, group in by_scope.items():
            await memory.add(scope, group, actor="bench")
        done = start + batch
        if done < records and done // PURGE_EVERY > start // PURGE_EVERY:
            await memory.storage.purge_old_versions()
        if progress:
            progress(min(start + batch, records), records)
    await memory.storage.settle()  # the background optimizes the writes started are part of inserting
    insert_s = time.perf_counter() - started
    started = time.perf_counter()
    indexes = (await maintain(memory.storage))["indexes"]  # compaction, index builds, freed heap returned
    return memory, {"records": records, "insert_per_s": round(records / insert_s, 1),
                    "index_build_s": round(time.perf_counter() - started, 1), "indexes": indexes}


async def run_scale_bench(records: int, *, path: str | Path | None = None, queries: int = 200, batch: int = 1000,
                          progress: Any = None, seed: int = 0, embedder: str = "local",
                          query_embedder: str | None = None) -> dict[str, Any]:
    """Insert `records`, index, search; the report `memos bench scale` writes.

    `peak_rss_mb` is the process's peak resident memory over the whole run (the kernel's
    high-water mark: short peaks between samples count), `peak_rss_build_mb` the same once the
    store is built and indexed, before the queries are embedded.

    `query_embedder="local"` embeds the queries with the local model whatever built the data,
    so a store built fast with `"hashed"` is searched with the model resident in the process
    (its peak memory counted); the vectors have the same dimension, the ranking means nothing."""
    root = Path(path or tempfile.mkdtemp(prefix="memos-scale-"))
    model = bench_embedder(embedder)
    memory, built = await open_bench_store(records, root, embedder=model, batch=batch, seed=seed, progress=progress)
    built_peak = peak_rss_mb()  # the build's own (inserting, optimizing, indexing), before a query model loads

    rng = random.Random(seed + 1)
    texts = [random_sentence(rng).split(" (")[0] for _ in range(queries)]
    embed_ms, cache = [], {}
    querying = bench_embedder(query_embedder) if query_embedder else model
    if querying.dim != model.dim:
        raise ValueError(f"query embedder {querying.name} is {querying.dim}-d, the store {model.dim}-d")
    for text in texts:
        t0 = time.perf_counter()
        cache[text] = await querying.embed_query(text)
        embed_ms.append((time.perf_counter() - t0) * 1000)
    memory.embedder = _CachedQueries(model.name, model.dim, model.embedder, cache=cache)
    search_ms = []
    for i, text in enumerate(texts):
        scope = Scope(f"user{rng.randrange(USERS):02d}", "agent")
        t0 = time.perf_counter()
        hits = await memory.search(text, scope, k=10)
        elapsed = (time.perf_counter() - t0) * 1000
        if i >= 5:  # the first searches warm caches and index readers
            search_ms.append(elapsed)
        assert all(h.record.user_id == scope.user_id for h in hits)
    return {
        **built,
        "embedder": model.name,
        "query_embedder": querying.name,
        "search_ms": percentiles(search_ms),
        "embed_ms": {"p50": percentiles(embed_ms)["p50"]},
        "peak_rss_mb": peak_rss_mb(),
        "peak_rss_build_mb": built_peak,
        "queries": len(search_ms),
        "stores_searched": len(memory.searchable_types),
    }
