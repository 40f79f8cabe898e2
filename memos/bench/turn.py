"""`memos bench turn`: what one chat turn costs besides the model call.

A store of N synthetic records (`memos.bench.scale.open_bench_store`) gets a conversation in
one of its scopes. Each timed step is what `ChatAgent.chat` does around the model request:
record the user's turn and compile the context (active retrieval over every store, paging,
rendering under the budget) side by side (`MemorySession.step`: `user_step`), record the reply.
Reported in ms, p50 / p95, as a whole and per part; the model's reply is a scripted line. The embedder that built the store also
embeds the turns and queries: with the local model (default) its time is included; a store
built with `--embedder hashed` times everything but embedding.

`pause_ms`: an untimed pause after the step (the model's call) and another after the reply (the
user reading and typing). Back to back (0, the default) the background work a turn starts (its
rows written behind it, `memos.store.lancedb.write_behind`; the optimizes its commits bring) lands in the next
turns; in a chat it runs during those pauses, which this shows.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from memos.context.session import MemorySession
from memos.store.lancedb._malloc import freeze_startup_objects
from memos.store.scope import Scope

from ._stats import peak_rss_mb, percentiles
from .scale import USERS, bench_embedder, open_bench_store, random_sentence

__all__ = ["run_turn_bench"]

WARMUP = 3


async def run_turn_bench(records: int, *, path: str | Path | None = None, turns: int = 60, budget: int = 8000,
                         embedder: str = "local", progress: Any = None, seed: int = 0, pause_ms: float = 0) -> dict[str, Any]:
    """Build (or reuse) a store of `records`, then time `turns` steps of one conversation."""
    root = Path(path or tempfile.mkdtemp(prefix="memos-turn-"))
    model = bench_embedder(embedder)
    memory, built = await open_bench_store(records, root, embedder=model, seed=seed, progress=progress)
    rng = random.Random(seed + 2)
    scope = Scope(f"user{rng.randrange(USERS):02d}", "agent", f"bench-{rng.randrange(10**6)}")
    session = await MemorySession.open(memory, scope, budget=budget)
    freeze_startup_objects()  # as `memos chat` does once it has started
    parts: dict[str, list[float]] = {"user_step": [], "record_reply": [], "total": []}
    for step in range(turns + WARMUP):
        message = f"Do you remember when {random_sentence(rng)}"
        t0 = time.perf_counter()
        _, context = await session.step(message)
        t1 = time.perf_counter()
        await asyncio.sleep(pause_ms / 1000)
        t1b = time.perf_counter()
        await session.record_turn("assistant", f"Yes: {random_sentence(rng)}")
        t2 = time.perf_counter()
        await asyncio.sleep(pause_ms / 1000)
        assert context.total_tokens <= budget
        if step >= WARMUP:
            for name, ms in (("user_step", t1 - t0), ("record_reply", t2 - t1b), ("total", t1 - t0 + t2 - t1b)):
                parts[name].append(ms * 1000)
        if progress:
            progress(step + 1, turns + WARMUP)
    return {
        **built,
        "embedder": model.name,
        "turns": turns,
        "budget": budget,
        "pause_ms": pause_ms,
        "turn_ms": {name: percentiles(samples) for name, samples in parts.items()},
        "peak_rss_mb": peak_rss_mb(),
    }
