"""Purges, jobs and writers of several processes on one store: nothing lost, nothing resurrected,
nothing broken. Each probe runs in fresh processes (`tests/_probes.py`, never forked after LanceDB
is loaded), bounded in time; CI runs one trial of each, `MEMOS_STRESS_TRIALS=20` runs more."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memos import MemoryOS, Scope
from memos.memtypes import Episode, Fact, VaultItem
from memos.portability import forget_user

sys.path.insert(0, str(Path(__file__).parent))
from _probes import verify  # noqa: E402

PROBES = Path(__file__).parent / "_probes.py"
TRIALS = int(os.environ.get("MEMOS_STRESS_TRIALS", "1"))
SECRET = "zebra-quartz-4471-purge-me"


def _start_writer(db: Path, side: Path, user: str, stop: Path, seed: int) -> subprocess.Popen:
    side.touch()
    proc = subprocess.Popen([sys.executable, str(PROBES), "writer", str(db), str(side), user, str(stop), str(seed)],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while "ready" not in side.read_text():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else "writer died"
        assert time.monotonic() < deadline, "writer did not start"
        time.sleep(0.05)
    return proc


def _acked_ops(side: Path) -> int:
    return sum(1 for line in side.read_text().splitlines() if line.split(" ", 1)[0] in ("add", "upd", "del"))


def _files_with(root: Path, needle: str) -> list[str]:
    data = needle.encode()
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


async def _purge_while_writing(tmp_path: Path, kind: str, trial: int) -> dict:
    db, key = tmp_path / f"db-{kind}-{trial}", tmp_path / f"k-{kind}-{trial}" / "vault.key"
    mem = await MemoryOS.open(db, embedder=None, vault_key_file=key)
    bob = Scope("bob")
    if kind == "forget":
        await mem.add(bob, [Fact(subject="bob", summary=f"bob's locker code is {SECRET} ({i})") for i in range(20)])
        needle = SECRET
    elif kind == "rotate":
        item, = await mem.add(bob, VaultItem(caption="bob's code", secret=SECRET))
        needle = (await mem.storage.rows("vault", None))[0]["secret"]  # the old ciphertext must leave the disk
    else:
        turns = await mem.ingest(bob, [{"speaker": "bob", "text": f"my pin is {SECRET}"}, {"speaker": "bob", "text": "ok"}])
        needle = SECRET
    side, stop = tmp_path / f"acks-{kind}-{trial}.txt", tmp_path / f"stop-{kind}-{trial}"
    proc = _start_writer(db, side, "w", stop, seed=trial)
    try:
        deadline = time.monotonic() + 30
        while _acked_ops(side) < 20 and time.monotonic() < deadline:  # the writer is in full flow
            time.sleep(0.05)
        if kind == "forget":
            await forget_user(mem, "bob")
        elif kind == "rotate":
            await mem.rotate_vault_key()
        else:
            await mem.add(bob, VaultItem(caption="bob's pin", secret=SECRET, source_ids=[turns[0].id]))
        time.sleep(0.5)  # and keeps writing after the purge
    finally:
        stop.touch()
        proc.wait(timeout=60)
    await mem.storage.finish_deferred_purge()  # a purge deferred by busy writers completes once it is safe
    result = verify(db, {"w": side})
    # rotation: the old ciphertext leaves the vault table (history keeps audit rows as they were written)
    result["secret_files"] = _files_with(db / "vault.lance" if kind == "rotate" else db, needle) + _files_with(db, SECRET)
    assert result["acked"] > 20
    return result


@pytest.mark.parametrize("kind", ["forget", "rotate", "scrub"])
async def test_a_purge_while_another_process_writes_breaks_nothing(tmp_path, kind):
    for trial in range(TRIALS):
        result = await _purge_while_writing(tmp_path, kind, trial)
        assert result["lost"] == result["duplicated"] == result["resurrected"] == result["lost_updates"] == 0, result
        assert result["writer_errors"] == 0, result
        assert result["secret_files"] == [], result


async def test_a_busy_store_defers_the_purge_and_maintenance_finishes_it(tmp_path):
    """A purge that cannot have the store alone drops only old-enough versions now, marks itself
    pending, and the next maintenance run after the margin removes the secret's versions."""
    from datetime import UTC, datetime

    from memos import storage as storage_mod

    db = tmp_path / "db"
    mem = await MemoryOS.open(db, embedder=None, vault_key_file=tmp_path / "vault.key")
    await mem.add(Scope("bob"), Fact(subject="bob", summary=f"bob said {SECRET}"))
    async with mem.storage.lease.shared():  # another write is in flight the whole time
        await mem.storage.delete_rows("semantic", "user_id = 'bob'")
        await mem.storage.delete_history("user_id = 'bob'")
        assert await mem.storage.purge_old_versions(wait=0.2) is False
    assert storage_mod.PENDING_PURGE in await mem.storage.get_meta()
    assert _files_with(db, SECRET)  # still in an old version: deferred
    later = datetime.now(UTC) + storage_mod.PURGE_MARGIN
    assert await mem.storage.finish_deferred_purge(later) == "purged"
    assert _files_with(db, SECRET) == []
    assert storage_mod.PENDING_PURGE not in await mem.storage.get_meta()
