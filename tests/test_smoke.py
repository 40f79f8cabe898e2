"""End-to-end smoke: ingest, search, supersede, reopen."""

from memos import MemoryOS, Scope
from memos.memtypes import Fact


async def test_ingest_search_and_reopen(mem: MemoryOS, alice: Scope, bob: Scope, db_path, embedder, clock) -> None:
    await mem.ingest(alice, [{"speaker": "alice", "text": "I moved to Lisbon in May.", "id": "m1"}])
    await mem.ingest(bob, [{"speaker": "bob", "text": "I moved to Berlin in May.", "id": "m2"}])
    hits = await mem.search("where did alice move?", alice, k=5)
    assert [h.source_ids for h in hits] == [["m1"]]
    [fact] = await mem.add(alice, Fact(subject="alice", summary="lives in Lisbon"))
    new = await mem.supersede(alice, "semantic", fact.id, Fact(subject="alice", summary="lives in Porto"))
    reopened = await MemoryOS.open(db_path, embedder=embedder, clock=clock)
    facts = {f.summary: f for f in await reopened.list(alice, "semantic", status=None)}
    assert facts["lives in Lisbon"].status == "superseded"
    assert facts["lives in Lisbon"].superseded_by == new.id
    assert facts["lives in Porto"].status == "active"
    assert await reopened.counts(bob) == {"core": 0, "episodic": 1, "semantic": 0, "procedural": 0, "resource": 0, "vault": 0,
                                           "entity": 0, "relation": 0}
