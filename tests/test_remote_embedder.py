"""Remote (here: pydantic-ai's TestEmbeddingModel) embedders through every entry point, each under a timeout.

A resolution that re-entered memos' own loop used to hang forever; every test here runs its
body in a watched thread or process, so a hang fails the test instead of hanging CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from memos.memtypes import Fact
from pydantic_ai.embeddings import Embedder, TestEmbeddingModel

from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.exceptions import ConfigError, MemoryOSError

TIMEOUT = 90.0
ALICE = Scope("alice")


def within(seconds: float, body: Callable[[], Any]) -> Any:
    """Run `body` in a daemon thread; fail (instead of hanging) if it has not returned in time."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = body()
        except BaseException as exc:  # handed back to the test thread below
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds}s: deadlocked"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_sync_api_opens_searches_and_reindexes_with_a_test_embedder(tmp_path):
    def body() -> tuple[Any, ...]:
        mem = MemoryOS.open_sync(tmp_path / "db", embedder=Embedder(TestEmbeddingModel()))
        mem.add_sync(ALICE, [Fact(subject="Alice", summary="Alice keeps bees"), Fact(subject="Bob", summary="Bob sails")])
        hits = mem.search_sync("bees", ALICE, k=5)
        done = mem.reindex_sync(Embedder(TestEmbeddingModel(dimensions=16)))
        return mem, hits, done

    mem, hits, done = within(TIMEOUT, body)
    assert mem.embedder.name == "test:test" and mem.embedder.dim == 16
    assert hits[0].record.summary == "Alice keeps bees"  # constant vectors: the full-text side ranks
    assert done == 2
    assert within(TIMEOUT, lambda: len(mem.search_sync("sails", ALICE)[0].record.summary)) > 0


def test_a_model_string_and_the_test_name_resolve_inside_the_sync_loop(tmp_path):
    mem = within(TIMEOUT, lambda: MemoryOS.open_sync(tmp_path / "db", embedder="test"))
    assert (mem.embedder.name, mem.embedder.dim) == ("test:test", 8)
    reopened = within(TIMEOUT, lambda: MemoryOS.open_sync(tmp_path / "db", embedder=TestEmbeddingModel()))
    assert reopened.embedder.dim == 8


def test_async_api_opens_searches_and_reindexes_with_a_test_embedder(tmp_path):
    async def main() -> tuple[Any, ...]:
        mem = await MemoryOS.open(tmp_path / "db", embedder=Embedder(TestEmbeddingModel()))
        await mem.add(ALICE, Fact(subject="Alice", summary="Alice keeps bees"))
        hits = await mem.search("bees", ALICE)
        done = await mem.reindex(TestEmbeddingModel(dimensions=12))
        return mem, hits, done

    mem, hits, done = within(TIMEOUT, lambda: asyncio.run(main()))
    assert [h.record.summary for h in hits] == ["Alice keeps bees"]
    assert done == 1 and mem.embedder.dim == 12


def test_a_scheduled_job_opens_its_store_with_a_test_embedder(tmp_path):
    from memos.jobs.runs import run_scheduled_job

    mem = within(TIMEOUT, lambda: MemoryOS.open_sync(tmp_path / "db", embedder="test"))
    mem.add_sync(ALICE, Fact(subject="Alice", summary="Alice keeps bees"))
    outcome = within(TIMEOUT, lambda: run_scheduled_job("decay", str(tmp_path / "db"), "alice", None, None, {"embedder": "test"}))
    assert outcome["job_id"].startswith("decay:")


def test_cli_reindex_with_the_test_embedder(tmp_path):
    db = tmp_path / "db"
    env = {**os.environ, "COLUMNS": "500", "HF_HUB_OFFLINE": "1", "LANCE_LOG": "error"}
    write = ("import sys; from memos import MemoryOS, Scope; from memos.memtypes import Fact; "
             "MemoryOS.open_sync(sys.argv[1], embedder=None).add_sync(Scope('alice'), "
             "[Fact(subject='Alice', summary='Alice keeps bees'), Fact(subject='Alice', summary='Alice rows')])")
    # written by a process that has ended: re-embedding needs the store to itself (memos.store.lancedb.openers)
    subprocess.run([sys.executable, "-c", write, str(db)], check=True, timeout=TIMEOUT * 2, env=env)
    run = subprocess.run([sys.executable, "-m", "memos.cli", "reindex", str(db), "--embedder", "test"],
                         capture_output=True, text=True, timeout=TIMEOUT * 2, env=env)
    assert run.returncode == 0, run.stderr
    said = run.stdout + run.stderr  # the console reports on stderr
    assert "re-embedded 2 records" in said and "with test:test" in said
    meta = within(TIMEOUT, lambda: run_sync(MemoryOS.open_sync(db, embedder="test").storage.get_meta()))
    assert json.loads(meta["embedder"]) == {"name": "test:test", "dim": 8}


def test_a_sync_call_from_inside_memos_loop_fails_at_once_instead_of_hanging(tmp_path):
    mem = MemoryOS.open_sync(tmp_path / "db", embedder=None)

    async def nested() -> Any:
        return mem.counts_sync(ALICE)  # a sync twin called where it would wait for itself

    with pytest.raises(MemoryOSError, match="await the async method"):
        within(TIMEOUT, lambda: run_sync(nested()))


def test_an_embedder_that_cannot_be_resolved_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="provider:model"):
        MemoryOS.open_sync(tmp_path / "db", embedder="nonsense")
    with pytest.raises(ConfigError, match="embedder nosuchprovider:model failed its dimension probe"):
        MemoryOS.open_sync(tmp_path / "db", embedder="nosuchprovider:model")
