"""Group commit and backpressure (`memos.group_commit`, `memos.batching`): concurrent adds share one
embedding call and one commit per table, each caller acknowledged once its rows have committed,
in its own scope and order, failing alone; a full queue waits or refuses (HTTP 503 + Retry-After)
and never takes half a call."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from memos.memtypes import Episode, Fact

from memos import MemoryOS, Scope
from memos.bench.serve import ServerProcess
from memos.embeddings import TextEmbedder
from memos.exceptions import DuplicateIdError
from memos.group_commit import LINGER

ANN, BOB = Scope("ann", "helper"), Scope("bob", "helper")


@dataclass
class Counting:
    """The real encoder behind `TextEmbedder`, counting the calls it is given (and refusing a marked text)."""

    inner: Any
    fail_on: str | None = None
    delay: float = 0.0
    """Seconds each documents call takes on top of the encoder's own."""
    documents: list[list[str]] = field(default_factory=list)
    queries: list[Any] = field(default_factory=list)

    async def embed_documents(self, texts: list[str]) -> Any:
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise RuntimeError("the embedding service refused a text")
        self.documents.append(list(texts))
        await asyncio.sleep(self.delay)
        return await self.inner.embed_documents(texts)

    async def embed_query(self, text: Any) -> Any:
        self.queries.append(text)
        return await self.inner.embed_query(text)


def counting(real: TextEmbedder, fail_on: str | None = None, delay: float = 0.0) -> tuple[TextEmbedder, Counting]:
    inner = Counting(real.embedder, fail_on, delay)
    return TextEmbedder(real.name, real.dim, inner, batch_size=real.batch_size, requests=real.requests,
                        english_only=real.english_only), inner


async def test_concurrent_adds_share_one_embedding_call_and_one_commit_per_table(db_path, embedder):
    wrapped, calls = counting(embedder)
    mem = await MemoryOS.open(db_path, embedder=wrapped)
    await mem.add(ANN, Fact(subject="ann", summary="ann warms the store up"))
    await mem.storage.settle()
    calls.documents.clear()
    before = await mem.storage.version("semantic")
    added = await asyncio.gather(*(mem.add(ANN if i % 2 else BOB, Fact(subject=f"thing {i}", summary=f"fact number {i} about plants"))
                                   for i in range(20)))
    assert sum(len(b) for b in calls.documents) == 20 and len(calls.documents) < 20
    assert await mem.storage.version("semantic") - before < 20  # fewer commits than adds
    stored = {r.id for scope in (ANN, BOB) for r in await mem.list(scope, "semantic", limit=None)}
    assert {r.id for [r] in added} <= stored

    calls.queries.clear()
    hits = await asyncio.gather(*(mem.search(f"fact number {i}", ANN, k=3) for i in range(10)))
    assert all(hits) and 1 <= len(calls.queries) < 10  # concurrent queries embedded together
    assert sum(1 if isinstance(q, str) else len(q) for q in calls.queries) == 10


async def test_the_wait_for_more_adds_lasts_a_commit_not_the_embedding_before_it(db_path, embedder):
    """After a batch of several callers the next waits for more adds (`linger`) so that its commit
    is bigger; the wait lasts what the batch took less its embedding: an encoder call outlasts a
    commit, and waiting as long again only delayed every write."""
    wrapped, calls = counting(embedder, delay=0.3)
    mem = await MemoryOS.open(db_path, embedder=wrapped)
    await asyncio.gather(*(mem.add(ANN, Fact(subject=f"slow {i}", summary=f"a slowly embedded fact {i}")) for i in range(3)))
    group = mem.group
    assert calls.documents and group.embedding_s >= 0.3
    assert group.queue.linger == group.linger
    assert group.linger(3, group.embedding_s + 0.04) == pytest.approx(0.04)  # the commit's time only
    assert group.linger(3, group.embedding_s + 2.0) == LINGER and group.linger(1, group.embedding_s + 0.04) == 0
    unembedded = await MemoryOS.open(db_path.parent / "plain", embedder=None)
    await asyncio.gather(*(unembedded.add(ANN, Fact(subject=f"p {i}", summary=f"plain {i}")) for i in range(3)))
    assert unembedded.group.embedding_s < 0.05  # nothing to embed: the wait is the whole batch's time, as before


async def test_each_caller_is_acknowledged_in_its_own_scope_order_and_actor(db_path, embedder, clock):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock)  # a stopped clock: order is commit order
    sent: dict[Scope, list[str]] = {ANN: [], BOB: []}

    async def add(scope: Scope, i: int) -> None:
        fact = Fact(subject=f"{scope.user_id} {i}", summary=f"the same sentence {i}")
        sent[scope].append(fact.id)
        await mem.add(scope, fact, actor=f"writer-{scope.user_id}")

    await asyncio.gather(*(add(scope, i) for i in range(8) for scope in (ANN, BOB)))
    assert mem.group.queue.batches < mem.group.queue.calls  # they did share batches
    for scope, other in ((ANN, BOB), (BOB, ANN)):
        history = await mem.history(scope)
        assert [e.record_id for e in history] == sent[scope]  # in the order each caller sent them
        assert {e.actor for e in history} == {f"writer-{scope.user_id}"}
        rows = await mem.storage.rows("semantic", f"user_id = '{scope.user_id}'", columns=["id"])
        assert [r["id"] for r in rows] == sent[scope]
        hits = await mem.search("the same sentence 3", scope, k=20)
        assert hits and {h.record.user_id for h in hits} == {scope.user_id}
        assert not set(sent[other]) & {r.id for r in await mem.list(scope, "semantic", limit=None)}


async def test_one_callers_bad_write_fails_only_that_caller(db_path, embedder):
    wrapped, _ = counting(embedder, fail_on="poison")
    mem = await MemoryOS.open(db_path, embedder=wrapped)
    taken = Fact(id="fact-shared-id", subject="x", summary="the first to claim the id")
    twin = Fact(id="fact-shared-id", subject="y", summary="the second to claim it")
    good = [Fact(subject=f"good {i}", summary=f"a good fact {i}") for i in range(6)]
    results = await asyncio.gather(
        *(mem.add(ANN, f) for f in good[:3]), mem.add(ANN, taken), mem.add(BOB, twin),
        mem.add(BOB, [Fact(subject="p", summary="a poison text"), Episode(actor="bob", summary="said with it")]),
        *(mem.add(BOB, f) for f in good[3:]), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert isinstance(results[5], RuntimeError) and len(errors) == 2
    [lost] = [i for i in (3, 4) if isinstance(results[i], DuplicateIdError)]  # one claim of the id wins
    ann = {r.id: r for r in await mem.list(ANN, "semantic", limit=None)}
    bob = {r.id: r for r in await mem.list(BOB, "semantic", limit=None)}
    assert set(ann) == {f.id for f in good[:3]} | ({taken.id} if lost == 4 else set())
    assert set(bob) == {f.id for f in good[3:]} | ({twin.id} if lost == 3 else set())
    assert [r.id for scope in (ANN, BOB) for r in await mem.list(scope, "semantic", limit=None)].count(taken.id) == 1
    assert await mem.list(BOB, "episodic", limit=None) == []
    assert {e.record_id for e in await mem.history(ANN)} | {e.record_id for e in await mem.history(BOB)} == set(ann) | set(bob)


async def test_a_full_queue_waits_or_refuses_and_never_takes_half_a_call(db_path, embedder):
    from memos import OverloadedError, QueueLimits

    mem = await MemoryOS.open(db_path, embedder=embedder)
    await mem.add(ANN, Fact(subject="warm", summary="warm up"))
    mem.limits = QueueLimits(max_pending=2, when_full="raise")
    facts = [[Fact(subject=f"r{i}", summary=f"refusable {i} a"), Fact(subject=f"r{i}", summary=f"refusable {i} b")] for i in range(10)]
    results = await asyncio.gather(*(mem.add(ANN, pair) for pair in facts), return_exceptions=True)
    refused = [r for r in results if isinstance(r, OverloadedError)]
    assert refused and all(r.retry_after >= 1 for r in refused) and "retry" in str(refused[0])
    assert all(isinstance(r, list | OverloadedError) for r in results)
    stored = {r.id for r in await mem.list(ANN, "semantic", limit=None)}
    for pair, result in zip(facts, results, strict=True):
        assert ({f.id for f in pair} <= stored) if isinstance(result, list) else not ({f.id for f in pair} & stored)
    searched = await asyncio.gather(*(mem.search("refusable", ANN) for _ in range(6)), return_exceptions=True)
    assert any(isinstance(r, OverloadedError) for r in searched) and any(isinstance(r, list) for r in searched)

    mem.limits = QueueLimits(max_pending=2, when_full="wait")
    waited = await asyncio.gather(*(mem.add(BOB, Fact(subject=f"w{i}", summary=f"waited {i}")) for i in range(10)))
    assert len({r.id for r in await mem.list(BOB, "semantic", limit=None)} & {r.id for [r] in waited}) == 10


def test_a_full_server_answers_503_with_retry_after_and_loses_nothing(tmp_path: Path):
    store = tmp_path / "served"
    store.mkdir()
    with ServerProcess(str(store), max_pending=2) as server:
        headers = {"Authorization": f"Bearer {server.make_key('ann')}"}

        async def hammer() -> list[tuple[str, httpx.Response]]:
            async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
                async def post(i: int) -> tuple[str, httpx.Response]:
                    marker = f"marker{i:03d}"
                    return marker, await http.post("/v1/stores/semantic", json={"subject": "load", "summary": f"load {marker}"})
                return await asyncio.gather(*(post(i) for i in range(40)))

        answers = asyncio.run(hammer())
        statuses = Counter(r.status_code for _, r in answers)
        assert set(statuses) <= {201, 503} and statuses[503] and statuses[201], statuses
        assert all(int(r.headers["retry-after"]) >= 1 and r.json()["error"]["type"] == "overloaded"
                   for _, r in answers if r.status_code == 503)
        listed = httpx.get(server.url + "/v1/stores/semantic", params={"limit": 1000}, headers=headers, timeout=60).json()["records"]
        found = Counter(r["summary"].removeprefix("load ") for r in listed)
        assert {m for m, r in answers if r.status_code == 201} == set(found) and set(found.values()) == {1}


def _add_until_killed(db: str, acked: str) -> None:
    """In a spawned process: 8 writers add 3 facts a call, each call's id written to `acked` once
    `add` returned; the parent kills this process mid-way."""
    os.environ["LANCE_LOG"] = "error"

    async def run() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        with open(acked, "a") as out:
            async def writer(w: int) -> None:
                for i in range(10_000):
                    call = f"w{w}c{i}"
                    await mem.add(ANN, [Fact(subject=call, summary=f"{call} part {p}", tags=[call]) for p in range(3)])
                    out.write(call + "\n")
                    out.flush()
            await asyncio.gather(*(writer(w) for w in range(8)))

    asyncio.run(run())


def test_a_process_killed_mid_batch_keeps_every_acknowledged_call_once_and_no_half_call(tmp_path: Path):
    db, acked = tmp_path / "db", tmp_path / "acked.txt"
    MemoryOS.open_sync(db, embedder=None)
    acked.touch()
    child = multiprocessing.get_context("spawn").Process(target=_add_until_killed, args=(str(db), str(acked)))
    child.start()
    deadline = time.monotonic() + 120
    while len(acked.read_text().splitlines()) < 40 and time.monotonic() < deadline and child.is_alive():
        time.sleep(0.05)
    child.kill()
    child.join(30)
    calls = [line for line in acked.read_text().splitlines() if line]
    assert len(calls) >= 40
    mem = MemoryOS.open_sync(db, embedder=None)
    parts = Counter(r.subject for r in mem.list_sync(ANN, "semantic", limit=None))
    assert all(parts[c] == 3 for c in calls)  # every acknowledged call there, once
    assert set(parts.values()) == {3}  # a call not acknowledged is there whole or not at all
    rows = mem.list_sync(ANN, "semantic", limit=None)
    assert len({r.id for r in rows}) == len(rows)
