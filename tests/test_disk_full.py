"""A full disk: a memos error with a hint (one line in the CLI), nothing acknowledged lost, and
writing resumes once space is freed. Needs a small tmpfs (root and mount); skipped otherwise."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memos import MemoryOS, Scope, StoreFullError
from memos.cli import app
from memos.memtypes import Fact


def _mount(path: Path, size: str, remount: bool = False) -> bool:
    options = f"remount,size={size}" if remount else f"size={size}"
    try:
        return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture
def small_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not _mount(disk, "3m"):
        pytest.skip("cannot mount a small tmpfs here")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=10)


async def test_a_full_disk_is_a_memos_error_and_writing_resumes_after_space_is_freed(small_disk):
    db = small_disk / "db"
    mem = await MemoryOS.open(db, embedder=None)
    scope = Scope("alice")
    acked: list[str] = []
    with pytest.raises(StoreFullError) as info:
        for i in range(10_000):
            fact = Fact(subject=f"thing {i}", summary=f"fact number {i} " + "lorem ipsum " * 150)
            await mem.add(scope, fact)
            acked.append(fact.id)
    message = str(info.value)
    assert "full" in message and "free" in message and ".rs:" not in message and "\n" not in message
    assert acked, "the disk filled before the first write"

    out = CliRunner().invoke(app, ["forget", "--user", "nobody", "--yes", "--db", str(db)])
    if out.exit_code != 0:  # the CLI: one line, never a traceback
        assert "Traceback" not in out.output and out.output.strip().count("\n") == 0, out.output
        assert "error:" in out.output

    assert _mount(small_disk, "64m", remount=True)  # space freed
    more = Fact(subject="after", summary="written after space was freed")
    await mem.add(scope, more)
    reopened = await MemoryOS.open(db, embedder=None)
    stored = {r.id for r in await reopened.list(scope, "semantic", limit=None)}
    assert set(acked) <= stored and more.id in stored
