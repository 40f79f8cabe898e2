"""Crash safety: a writer killed with SIGKILL at random moments never loses an acknowledged write."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from memos import MemoryOS, Scope

WRITER = textwrap.dedent('''
    import os, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    db, side = sys.argv[1], sys.argv[2]
    start = int(sys.stdin.readline())  # started ahead while the previous writer runs: imported, it waits for its turn
    mem = MemoryOS.open_sync(db, embedder=None)
    scope = Scope("writer", "w", "s")
    with open(side, "a") as acks:
        print("ready", flush=True)
        n = start
        while True:
            batch = [{"id": f"m{n + i}", "speaker": "w", "text": f"message number {n + i} " + "x" * (n % 50)} for i in range(3)]
            mem.ingest_sync(scope, batch)
            acks.write(" ".join(m["id"] for m in batch) + "\\n")  # acknowledged: the call returned
            acks.flush()
            os.fsync(acks.fileno())
            n += 3
''')


KILLS = int(os.environ.get("MEMOS_STRESS_KILLS", "8"))
"""Kills per run: 8 in the suite (each restart costs a process start); `MEMOS_STRESS_KILLS=50` runs longer."""


def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path: Path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    db, side = tmp_path / "db", tmp_path / "acks.txt"
    side.touch()
    rng = random.Random(11)
    kills = 0
    next_id = 0

    def spawn() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), str(db), str(side)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)

    def go(proc: subprocess.Popen, start: int) -> None:
        proc.stdin.write(f"{start}\n".encode())
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == b"ready"

    proc = spawn()
    go(proc, next_id)
    while kills < KILLS:
        # the next writer imports while this one writes; it opens the store only after the kill and the check
        following = spawn() if kills + 1 < KILLS else None
        time.sleep(rng.uniform(0.05, 0.6))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        acked = side.read_text().split()
        mem = MemoryOS.open_sync(db, embedder=None)  # opens after every kill
        rows = mem.list_sync(Scope("writer"), "episodic", limit=None)
        stored = Counter(s for r in rows for s in r.source_ids)
        missing = [a for a in acked if stored[a] == 0]
        doubled = [a for a in acked if stored[a] > 1]
        assert not missing and not doubled, (kills, missing[:5], doubled[:5])
        assert all(r.summary.startswith("message number ") for r in rows)  # no half-written record
        # the next writer continues after the highest id seen (written or not acknowledged)
        next_id = max([int(s[1:]) for s in stored] + [int(a[1:]) for a in acked] + [-1]) + 1
        if following is not None:
            proc = following
            go(proc, next_id)
    assert len(side.read_text().split()) > 20
