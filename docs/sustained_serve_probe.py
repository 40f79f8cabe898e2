"""A sustained load on one `memos serve`: ops/s, server CPU an operation and search latency in windows.

`memos bench serve` times a fixed number of operations (and reads every acknowledged write back);
this holds the same mix for a fixed time instead, to see what changes as the store grows
(docs/benchmarks.md, "Served under a sustained load"). No read-back: a diagnostic, not the bench.

    python docs/sustained_serve_probe.py SECONDS WINDOW [EMBEDDER]   # e.g. 300 30 none
"""

from __future__ import annotations

import asyncio
import glob
import os
import sys
import tempfile
import time
import uuid

import httpx2

from memos.bench.serve import ServerProcess, process_cpu_seconds

CLIENTS, USERS = 20, 4


async def _client(url: str, token: str, i: int, deadline: float, done: list[tuple[float, int, float]]) -> None:
    async with httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        step = 0
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            if step % 2 == 0:
                fact = {"subject": f"client {i}", "summary": f"client {i} wrote fact {step} marker {uuid.uuid4().hex[:12]}"}
                r = await http.post("/v1/stores/semantic", json=fact)
            else:
                r = await http.post("/v1/search", json={"query": f"client {i} fact {step}", "k": 5})
            end = time.perf_counter()
            r.raise_for_status()
            done.append((end, step % 2, (end - start) * 1000))
            step += 1


async def _run(server: ServerProcess, db: str, tokens: list[str], seconds: float, window: float) -> None:
    done: list[tuple[float, int, float]] = []
    began = time.perf_counter()
    tasks = [asyncio.create_task(_client(server.url, tokens[i % USERS], i, began + seconds, done)) for i in range(CLIENTS)]
    assert server.proc is not None
    cpu, n = process_cpu_seconds([server.proc.pid]), 0
    while time.perf_counter() < began + seconds:
        await asyncio.sleep(window)
        now_cpu, n = process_cpu_seconds([server.proc.pid]), n + 1
        ops = [o for o in done if began + (n - 1) * window <= o[0] < began + n * window]
        searches = sorted(o[2] for o in ops if o[1] == 1) or [0.0]
        versions = sum(len(glob.glob(table + "/_versions/*")) for table in glob.glob(os.path.join(db, "_search*")))
        cpu_ms = (now_cpu - cpu) * 1000 / max(1, len(ops)) if now_cpu is not None and cpu is not None else float("nan")
        print(f"t={n * window:5.0f}s ops/s {len(ops) / window:6.1f} cpu ms/op {cpu_ms:5.1f} search p50/p95 "
              f"{searches[len(searches) // 2]:6.1f}/{searches[int(len(searches) * 0.95)]:6.1f} shared-table versions {versions}",
              flush=True)
        cpu = now_cpu
    await asyncio.gather(*tasks)


def main() -> None:
    seconds, window = float(sys.argv[1]), float(sys.argv[2])
    embedder = sys.argv[3] if len(sys.argv) > 3 else "none"
    db = os.path.join(tempfile.mkdtemp(prefix="memos-sustain-"), "db")
    os.makedirs(db)
    server = ServerProcess(db, embedder=embedder).start()
    try:
        tokens = [server.make_key(f"u{u}", name=f"probe{u}") for u in range(USERS)]
        asyncio.run(_run(server, db, tokens, seconds, window))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
