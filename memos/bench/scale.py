"""`memos bench scale`: insert and search speed, and memory, at N records.

N synthetic records (deterministic, varied text) are spread over the six stores and 20 user
scopes and written through `MemoryOS.add` with the local embedder. The tables are then
compacted and indexed by the maintenance job's own function (`memos.maintenance.maintain`), and random queries
are searched in random scopes through `MemoryOS.search` over every store. Query vectors are
computed first and served from a cache during the timed searches, so `search_ms` excludes
the query embedding; `embed_ms` reports that embedding on its own.
"""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memos.memtypes import CoreBlock, Episode, Fact, MemoryRecord, Procedure, Resource, VaultItem

from ..embeddings import TextEmbedder, local_embedder
from ..maintenance import maintain
from ..memory import MemoryOS
from ..scope import Scope
from ._stats import peak_rss_mb, percentiles

__all__ = ["make_records", "run_scale_bench"]

USERS = 20
_PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jules", "Kofi", "Lena", "Mira", "Noah"]
_PLACES = ["Lisbon", "Osaka", "Lagos", "Quito", "Bergen", "Tbilisi", "Hanoi", "Porto", "Nairobi", "Oslo", "Cusco", "Kyoto"]
_THINGS = ["violin lessons", "a sourdough starter", "the garden shed", "a marathon plan", "tax forms", "a vintage camera",
           "the team offsite", "a broken bike", "birthday presents", "the quarterly report", "a hiking trip", "piano practice",
           "the apartment lease", "a chess club", "kitchen renovation", "a language course", "the dentist", "a road trip"]
_VERBS = ["talked about", "planned", "worried about", "finished", "postponed", "asked for help with", "celebrated",
          "argued about", "researched", "bought supplies for", "cancelled", "remembered"]
_MIX = [("episodic", 0.50), ("semantic", 0.20), ("resource", 0.12), ("procedural", 0.10), ("vault", 0.04), ("core", 0.04)]


def _sentence(rng: random.Random) -> str:
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
        text = _sentence(rng)
        record: MemoryRecord
        if kind == "episodic":
            record = Episode(summary=text, actor=rng.choice(_PEOPLE), importance=rng.random())
        elif kind == "semantic":
            record = Fact(subject=rng.choice(_PEOPLE), summary=text, importance=rng.random())
        elif kind == "resource":
            record = Resource(title=f"{rng.choice(_THINGS)}.pdf", content=" ".join(_sentence(rng) for _ in range(3)))
        elif kind == "procedural":
            record = Procedure(summary=f"How to handle {rng.choice(_THINGS)}", steps=[_sentence(rng) for _ in range(3)])
        elif kind == "vault":
            record = VaultItem(caption=f"{rng.choice(_PEOPLE)}'s login for {rng.choice(_THINGS)}", secret=f"pw-{i:08d}")
        else:
            record = CoreBlock(label=f"notes{i}", value=text)
        out.append((scope, record))
    return out


@dataclass(eq=False)
class _CachedQueries(TextEmbedder):
    """Serves precomputed query vectors, so timed searches exclude embedding."""

    cache: dict[str, list[float]] = field(default_factory=dict)

    async def embed_query(self, text: str) -> list[float]:
        return self.cache[text]


async def run_scale_bench(records: int, *, path: str | Path | None = None, queries: int = 200, batch: int = 1000,
                          progress: Any = None, seed: int = 0) -> dict[str, Any]:
    """Insert `records`, index, search; the report `memos bench scale` writes."""
    root = Path(path or tempfile.mkdtemp(prefix="memos-scale-"))
    embedder = local_embedder()
    memory = await MemoryOS.open(root / "db", embedder=embedder, vault_key_file=root / "vault.key")
    by_scope: dict[Scope, list[MemoryRecord]] = {}
    started = time.perf_counter()
    for start in range(0, records, batch):
        by_scope.clear()
        for scope, record in make_records(min(batch, records - start), seed + start):  # generated batch by batch
            by_scope.setdefault(scope, []).append(record)
        for scope, group in by_scope.items():
            await memory.add(scope, group, actor="bench")
        if progress:
            progress(min(start + batch, records), records)
    insert_s = time.perf_counter() - started

    started = time.perf_counter()
    indexes = (await maintain(memory.storage))["indexes"]  # compaction, index builds, freed heap returned
    index_s = time.perf_counter() - started

    rng = random.Random(seed + 1)
    texts = [_sentence(rng).split(" (")[0] for _ in range(queries)]
    embed_ms, cache = [], {}
    for text in texts:
        t0 = time.perf_counter()
        cache[text] = await embedder.embed_query(text)
        embed_ms.append((time.perf_counter() - t0) * 1000)
    memory.embedder = _CachedQueries(embedder.name, embedder.dim, embedder.embedder, cache=cache)  # type: ignore[call-arg]
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
        "records": records,
        "insert_per_s": round(records / insert_s, 1),
        "index_build_s": round(index_s, 1),
        "indexes": indexes,
        "search_ms": percentiles(search_ms),
        "embed_ms": {"p50": percentiles(embed_ms)["p50"]},
        "peak_rss_mb": peak_rss_mb(),
        "queries": len(search_ms),
        "stores_searched": len(memory.searchable_types),
    }
