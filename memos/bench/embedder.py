"""Embedding throughput and memory of the local embedder, as memos calls it.

    python -m memos.bench.embedder [--turns 2000] [--chunks 200]

Encodes short conversation turns and ~256-token document chunks through
`local_embedder().embed_documents` (batches of 64, as ingest does) and single queries through
`embed_query`, in one process; prints load time, sentences/s, query latency and the process's
peak resident memory as JSON. Uses only `memos.embeddings.local_embedder`, so the same file
runs against an older memos install (the torch path) for a side-by-side comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import time

__all__ = ["main"]

_WORDS = ("memory agent lisbon peanut allergy meeting budget report deploy script cat garden trip "
          "doctor invoice sister tea coffee train delayed launch quarter contract dentist puppy "
          "rain interview vegetarian birthday router password kitchen recipe running book").split()
_ZH = "我上个月搬到了上海明天早上九点提醒我给牙医打电话季度报告十五号之前要交他说火车晚点了四十分钟"


def _turn(rng: random.Random) -> str:
    if rng.random() < 0.1:
        start = rng.randrange(len(_ZH) - 20)
        return _ZH[start : start + rng.randint(8, 20)]
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 25))).capitalize() + "."


def _chunk(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(230))


async def _run(turns: int, chunks: int, queries: int) -> dict[str, float]:
    from memos.embeddings import local_embedder

    rng = random.Random(18)
    turn_texts = [_turn(rng) for _ in range(turns)]
    chunk_texts = [_chunk(rng) for _ in range(chunks)]
    t0 = time.perf_counter()
    embedder = local_embedder()
    await embedder.embed_query("warm up: load the weights")
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    await embedder.embed_documents(turn_texts)
    turns_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    await embedder.embed_documents(chunk_texts)
    chunks_s = time.perf_counter() - t0
    latencies = []
    for text in turn_texts[:queries]:
        t0 = time.perf_counter()
        await embedder.embed_query(text)
        latencies.append((time.perf_counter() - t0) * 1000)
    return {
        "load_and_first_query_s": round(load_s, 2),
        "turns_per_s": round(turns / turns_s, 1),
        "chunks_per_s": round(chunks / chunks_s, 1),
        "query_p50_ms": round(statistics.median(latencies), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_run(args.turns, args.chunks, args.queries))))


if __name__ == "__main__":
    main()
