"""What a process using memos' sync API waits for at exit (memos._sync)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from memos._sync import best_effort, run_sync

    done = Path(sys.argv[1])

    async def must_finish():
        await asyncio.sleep(1.0)
        done.write_text("finished")

    async def compaction_stuck_behind_other_writers():
        await asyncio.sleep(3600)

    async def start():
        asyncio.get_running_loop().create_task(must_finish())
        best_effort(asyncio.get_running_loop().create_task(compaction_stuck_behind_other_writers()))

    run_sync(start())
    print("leaving")
""")


def test_exit_finishes_real_work_and_does_not_wait_for_best_effort_compactions(tmp_path: Path):
    """A writer of a busy store hung for the whole 60 s exit wait while LanceDB kept retrying its
    automatic compaction against other processes' commits (test_concurrency's rotate case failed
    on it under load). Exit still lets unfinished work end; a best-effort task gets a short grace
    and is cancelled (the next writer or the maintenance job compacts)."""
    marker = tmp_path / "done"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(marker)], capture_output=True, text=True, timeout=40)
    assert out.returncode == 0, out.stderr[-2000:]
    assert marker.read_text() == "finished"
    assert "leaving" in out.stdout
    assert "background work still running at exit was cancelled" not in out.stderr
