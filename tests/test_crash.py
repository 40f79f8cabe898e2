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
    db, side, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
    while kills < KILLS:
        proc = subprocess.Popen([sys.executable, str(script), str(db), str(side), str(next_id)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        assert proc.stdout.readline().strip() == b"ready"
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
    assert len(side.read_text().split()) > 20
