"""One `MemoryOS.add` (and so one ingest chunk) embeds every distinct text once, in one batch,
before anything is written; its stores' commits run side by side, one per table, then one
history commit and one shared-table commit. An embedder failure leaves every store as it was;
a store whose commit fails leaves the others' committed rows audited and searchable."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from memos.memtypes import Episode, Fact, Procedure

import memos.services as memory_module
from memos import MemoryOS, Scope
from memos.embeddings import TextEmbedder
from memos.store.lancedb.storage import Storage


async def shared_rows(mem: MemoryOS) -> dict[tuple[str, str], dict]:
    rows = await mem.storage.search.table.query().select(["memory_type", "id", "updated_at", "text", "vector"]).to_list()
    return {(r["memory_type"], r["id"]): r for r in rows}


async def assert_mirrored(mem: MemoryOS) -> None:
    """The shared table holds exactly the mirrored stores' rows, their text and their vectors."""
    typed = {}
    for name in mem.storage.search.types:
        for r in await mem.storage.rows(name, None, columns=["id", "updated_at", "text", "vector"]):
            typed[(name, r["id"])] = r
    shared = await shared_rows(mem)
    assert set(shared) == set(typed)
    for key, row in typed.items():
        assert {k: shared[key][k] for k in ("updated_at", "text", "vector")} == {k: row[k] for k in ("updated_at", "text", "vector")}


@dataclass(eq=False)
class Recording(TextEmbedder):
    """The real embedder, recording each batch it is given (and failing on a marked text)."""

    fail_on: str | None = None
    batches: list[list[str]] = field(default_factory=list)

    @classmethod
    def of(cls, real: TextEmbedder, fail_on: str | None = None) -> Recording:
        return cls(real.name, real.dim, real.embedder, english_only=real.english_only, fail_on=fail_on)

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise RuntimeError("the embedding service is down")
        self.batches.append(list(texts))
        return await super().embed_documents(texts)


def count_commits(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    commits: Counter[str] = Counter()
    write = Storage.write

    async def counted(self: Storage, table: Any, op: Any, attempts: int = 12, **counting: Any) -> Any:
        commits[table.name.split("_g")[0]] += 1
        return await write(self, table, op, attempts, **counting)

    monkeypatch.setattr(Storage, "write", counted)
    return commits


def mixed() -> list[Any]:
    return [Episode(actor="ann", summary="we planted tomatoes"), Fact(subject="ann", summary="ann grows tomatoes"),
            Episode(actor="ann", summary="thanks!"), Episode(actor="ann", summary="thanks!"),
            Procedure(summary="watering", steps=["water at dawn"])]


async def test_one_add_embeds_each_distinct_text_once_and_commits_once_per_table(db_path, embedder, vault_key, monkeypatch):
    recording = Recording.of(embedder)
    mem = await MemoryOS.open(db_path, embedder=recording, vault_key_file=vault_key)
    await mem.storage.settle()
    commits = count_commits(monkeypatch)
    added = await mem.add(Scope("ann"), mixed())
    assert len(recording.batches) == 1
    texts = recording.batches[0]
    assert len(texts) == len(set(texts)) == 4  # the repeated "thanks!" once
    assert {r.index_text() for r in added} == set(texts)
    assert dict(commits) == {"_search": 1}  # a local store: the rest journaled (memos.group_commit), committed with the next batch
    await mem.storage.flush_queued()
    assert dict(commits) == {"episodic": 1, "semantic": 1, "procedural": 1, "_history": 1, "_search": 1}
    await assert_mirrored(mem)
    same = [r for r in added if r.index_text() == "ann: thanks!"]
    vectors = await mem.storage.rows("episodic", f"id IN ('{same[0].id}', '{same[1].id}')", columns=["id", "vector"])
    assert len(vectors) == 2 and vectors[0]["vector"] == vectors[1]["vector"]

    recording.batches.clear()
    monkeypatch.setattr(memory_module, "INGEST_CHUNK", 400)
    turns = [{"speaker": "ann" if i % 2 else "bob", "text": f"turn number {i} about tomatoes"} for i in range(600)]
    await mem.ingest(Scope("ann"), turns)
    assert [len(b) for b in recording.batches] == [400, 200]  # one batch per chunk of the call


async def test_an_embedder_failure_leaves_every_store_as_it_was(db_path, embedder, vault_key):
    mem = await MemoryOS.open(db_path, embedder=Recording.of(embedder, fail_on="grows"), vault_key_file=vault_key)
    await mem.add(Scope("ann"), Fact(subject="ann", summary="ann likes basil"))
    history, shared = await mem.history(Scope("ann")), await shared_rows(mem)
    with pytest.raises(RuntimeError, match="embedding service"):
        await mem.add(Scope("ann"), mixed())  # the episodes come first: stored before the fact's embedding once
    for name in ("episodic", "semantic", "procedural"):
        assert len(await mem.list(Scope("ann"), name, limit=None)) == (name == "semantic")
    assert await mem.history(Scope("ann")) == history
    assert await shared_rows(mem) == shared


async def test_a_store_whose_commit_fails_leaves_the_others_audited_and_searchable(db_path, embedder, vault_key):
    mem = await MemoryOS.open(db_path, embedder=embedder, vault_key_file=vault_key)
    mem.storage.behind.journal = None  # each add commits (object storage; a local store journals them first)
    scope = Scope("ann")
    table = mem.storage.tables["semantic"].table

    async def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError("No space left on device")

    table.add = full
    records = mixed()
    with pytest.raises(Exception, match="(?i)space|full"):
        await mem.add(scope, records)
    stored = {r.id for name in ("episodic", "semantic", "procedural") for r in await mem.list(scope, name, limit=None)}
    expected = {r.id for r in records if not isinstance(r, Fact)}
    assert stored == expected
    assert {e.record_id for e in await mem.history(scope)} == expected
    await assert_mirrored(mem)
    hits = await mem.search("watering at dawn", scope, k=3)
    assert any(h.record.memory_type == "procedural" for h in hits)
