"""The foundation: typed stores on LanceDB, CRUD with history, scopes, filters, embedders, ingest."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from memos.memtypes import Episode, Fact, Procedure, Resource, VaultItem
from pydantic_ai.embeddings import Embedder, TestEmbeddingModel
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.cli import app
from memos.exceptions import (
    EmbeddingDimensionError,
    InvalidFilterError,
    InvalidRecordError,
    RecordNotFoundError,
    StoreUnavailableError,
    UnknownMemoryTypeError,
)
from memos.tokens import tokenizer_for

runner = CliRunner()


async def test_reopening_finds_everything(db_path, embedder, clock, vault_key, alice):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    fact, = await mem.add(alice, Fact(subject="Alice", summary="Alice plays the cello"))
    again = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    assert (await again.get(alice, "semantic", fact.id)).summary == "Alice plays the cello"
    assert [h.id for h in await again.search("cello", alice)] == [fact.id]
    assert sorted(again.type_names) == sorted(["core", "episodic", "semantic", "procedural", "resource", "vault", "entity", "relation"])


async def test_crud_and_every_mutation_in_history(mem, alice, clock):
    one, two = await mem.add(alice, [Fact(subject="Alice", summary="Lives in Porto"), Fact(subject="Bo", summary="Bo is a cat")])
    clock.advance(days=1)
    await mem.update(alice, "semantic", two.id, {"details": "grey, 4 years old"}, actor="agent")
    new = await mem.supersede(alice, "semantic", one.id, Fact(subject="Alice", summary="Lives in Lisbon"), actor="agent")
    old = await mem.get(alice, "semantic", one.id)
    assert old.status == "superseded" and old.superseded_by == new.id and old.valid_to == clock.now
    assert new.valid_from == clock.now
    archived = await mem.archive(alice, "semantic", two.id, note="stale")
    assert archived.status == "archived"
    assert [f.summary for f in await mem.list(alice, "semantic")] == ["Lives in Lisbon"]
    assert len(await mem.list(alice, "semantic", status=None)) == 3
    ops = [(e.op, e.record_id, e.actor) for e in await mem.history(alice)]
    assert ops == [("add", one.id, "user"), ("add", two.id, "user"), ("update", two.id, "agent"), ("add", new.id, "agent"),
                   ("supersede", one.id, "agent"), ("archive", two.id, "user")]
    update = (await mem.history(alice, two.id))[1]
    assert update.before["details"] == "" and update.after["details"] == "grey, 4 years old" and update.at == clock.now
    await mem.delete(alice, "semantic", two.id)
    with pytest.raises(RecordNotFoundError):
        await mem.get(alice, "semantic", two.id)
    assert await mem.history(alice, two.id) == []  # a real delete takes its history too


async def test_list_filters_by_status_tags_and_time(mem, alice, clock):
    start = clock.now
    await mem.add(alice, Episode(summary="breakfast", occurred_at=start, tags=["food"]))
    await mem.add(alice, Episode(summary="meeting", occurred_at=start + timedelta(hours=3), tags=["work"]))
    await mem.add(alice, Episode(summary="dinner", occurred_at=start + timedelta(hours=9), tags=["food", "family"]))
    assert [e.summary for e in await mem.list(alice, "episodic", tags=["food"])] == ["breakfast", "dinner"]
    window = await mem.list(alice, "episodic", since=start + timedelta(hours=1), until=start + timedelta(hours=5))
    assert [e.summary for e in window] == ["meeting"]


async def test_scopes_are_hard_partitions(mem, alice, bob):
    mine, = await mem.add(alice, Fact(subject="Alice", summary="Alice's bank is Nordbank"))
    await mem.add(bob, Fact(subject="Bob", summary="Bob's bank is Nordbank too"))
    assert {h.record.user_id for h in await mem.search("bank", Scope("alice"))} == {"alice"}
    with pytest.raises(RecordNotFoundError):
        await mem.get(bob, "semantic", mine.id)
    with pytest.raises(RecordNotFoundError):
        await mem.update(bob, "semantic", mine.id, {"summary": "hijacked"})
    with pytest.raises(RecordNotFoundError):
        await mem.delete(bob, "semantic", mine.id)
    assert (await mem.get(alice, "semantic", mine.id)).summary == "Alice's bank is Nordbank"
    assert all(e.user_id == "bob" for e in await mem.history(Scope("bob")))
    other_session = Scope("alice", "assistant", "s2")
    assert await mem.list(other_session, "semantic") == [] and len(await mem.list(Scope("alice"), "semantic")) == 1
    with pytest.raises(InvalidRecordError):
        await mem.add(bob, Fact(subject="x", summary="y", user_id="alice"))


HOSTILE = ["' OR 1=1 --", "alice' OR user_id != '", "x\x00y", "a" * 300, "\ud800", "", 42, None]


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v)[:20] for v in HOSTILE])
async def test_hostile_filter_values_are_refused_and_change_nothing(mem, alice, snapshot, value):
    await mem.add(alice, Fact(subject="Alice", summary="secretive fact"))
    before = await snapshot(mem)
    if value in HOSTILE[:2]:  # printable injection attempts are valid ids, quoted: they match nobody
        assert await mem.list(Scope(value), "semantic") == []
        assert await mem.search("secretive", Scope(value)) == []
    else:
        with pytest.raises(InvalidFilterError):
            await mem.list(Scope(value), "semantic")  # type: ignore[arg-type]
    with pytest.raises((InvalidFilterError, RecordNotFoundError)):
        await mem.get(alice, "semantic", value)  # type: ignore[arg-type]
    if isinstance(value, str) and value not in HOSTILE[:2]:
        with pytest.raises(InvalidFilterError):
            await mem.list(alice, "semantic", tags=[value or "\x00"])
    assert await snapshot(mem) == before


async def test_search_text_with_sql_and_fts_syntax_is_harmless(mem, alice):
    await mem.add(alice, Fact(subject="Alice", summary="Alice's favourite tea is oolong"))
    for query in ["' OR 1=1 --", 'tea" OR "x', "tea AND (oolong OR", "*", "", "NOT", "tea\x00"]:
        hits = await mem.search(query, alice)
        assert all(h.record.user_id == "alice" for h in hits)


async def test_unknown_memory_types_are_named(mem, alice):
    with pytest.raises(UnknownMemoryTypeError, match="known types: core, episodic"):
        await mem.list(alice, "recipes")
    with pytest.raises(UnknownMemoryTypeError):
        await mem.search("x", alice, types=["recipes"])


async def test_a_custom_type_works_like_a_builtin(tmp_path, embedder, monkeypatch):
    spec = importlib.util.spec_from_file_location("custom_example", Path(__file__).parent.parent / "examples" / "custom_memory_type.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr("memos.embeddings._local", embedder)
    titles = await module.main(str(tmp_path / "recipes"))
    assert titles[0] == "Pumpkin soup"
    mem = await MemoryOS.open(tmp_path / "recipes", types=[module.Recipe], embedder=embedder)
    [soup] = [r for r in await mem.list(Scope("sam"), "recipe") if r.title == "Pumpkin soup"]
    assert soup.notes == "Roast the pumpkin first."
    await mem.delete(Scope("sam"), "recipe", soup.id)
    assert [r.title for r in await mem.list(Scope("sam"), "recipe")] == ["Shakshuka"]
    with pytest.raises(TypeError, match="must define render"):
        type("Broken", (module.MemoryRecord,), {"__annotations__": {}, "memory_type": "broken",
                                                "index_text": lambda self: ""})


async def test_embedder_identity_is_stored_and_a_different_dimension_is_refused(db_path, embedder, alice):
    mem = await MemoryOS.open(db_path, embedder=embedder)
    await mem.add(alice, Fact(subject="A", summary="b"))
    meta = await mem.storage.get_meta()
    assert json.loads(meta["embedder"]) == {"name": "local:all-MiniLM-L6-v2", "dim": 384}
    with pytest.raises(EmbeddingDimensionError, match="memos reindex"):
        await MemoryOS.open(db_path, embedder=Embedder(TestEmbeddingModel(dimensions=8)))


async def test_full_text_only_mode_then_reindex_adds_vectors(db_path, embedder, alice, caplog):
    plain = await MemoryOS.open(db_path, embedder=None)
    await plain.add(alice, [Fact(subject="Alice", summary="Alice adopted a greyhound named Comet"),
                            Fact(subject="Alice", summary="Alice works night shifts at the hospital")])
    assert [h.record.summary for h in await plain.search("greyhound", alice)] == ["Alice adopted a greyhound named Comet"]
    assert plain.embedder is None
    with caplog.at_level(logging.WARNING, logger="memos"):
        reopened = await MemoryOS.open(db_path, embedder=embedder)
    assert sum("memos reindex" in r.getMessage() for r in caplog.records) == 1
    result = runner.invoke(app, ["reindex", str(db_path)])
    assert result.exit_code == 0 and "re-embedded" in result.output
    vectors = await MemoryOS.open(db_path, embedder=embedder)
    [hit] = await vectors.search("pet dog", alice, k=1, types=["semantic"])
    assert "greyhound" in hit.record.summary and "vector_rank" in hit.parts


_HOLD_OPEN = """
import sys
from memos import MemoryOS
MemoryOS.open_sync(sys.argv[1], embedder=None)
print("open", flush=True)
sys.stdin.read()  # until the test lets it go
"""


async def test_a_reindex_refuses_while_another_process_has_the_store_open_and_changes_nothing(db_path, alice):
    """Another process with the store open would go on writing to the tables a re-embedding
    replaces (its acknowledged adds were in no table the store named afterwards): the re-embedding
    refuses and writes nothing; once that process has ended it runs. An open in another process
    while one runs is refused the same way."""
    plain = await MemoryOS.open(db_path, embedder=None)
    fact, = await plain.add(alice, Fact(subject="Alice", summary="Alice adopted a greyhound named Comet"))
    other = subprocess.Popen([sys.executable, "-c", _HOLD_OPEN, str(db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "LANCE_LOG": "error"})
    try:
        assert other.stdout.readline().strip() == "open"
        meta = await plain.storage.get_meta()
        with pytest.raises(StoreUnavailableError, match="another process has the memos store .* open"):
            await plain.reindex(TestEmbeddingModel(dimensions=8))
        assert await plain.storage.get_meta() == meta and plain.embedder is None
    finally:
        other.communicate("", timeout=60)
    assert await plain.reindex(TestEmbeddingModel(dimensions=8)) == 1  # it has ended: the store is this process's alone
    with plain.storage.openers.alone():  # while a re-embedding holds the store
        refused = subprocess.run([sys.executable, "-c", _HOLD_OPEN, str(db_path)], input="", capture_output=True, text=True,
                                 timeout=60, env={**os.environ, "LANCE_LOG": "error"})
    assert refused.returncode != 0 and "is being re-embedded" in refused.stderr
    assert [h.id for h in await plain.search("greyhound", alice)] == [fact.id]


def test_tokens_count_offline_by_model_name():
    assert tokenizer_for("openai:gpt-4o").encoding_name == "o200k_base"
    assert tokenizer_for("gpt-4").encoding_name == "cl100k_base"
    assert tokenizer_for("ollama:llama3.2").encoding_name == "o200k_base"
    assert tokenizer_for(None).count("hello world") == 2


async def test_ingest_stores_turns_with_actor_time_and_provenance(mem, alice):
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    episodes = await mem.ingest(alice, [
        {"speaker": "Caroline", "text": "I went to a support group yesterday.", "dia_id": "D1:1", "timestamp": when},
        {"role": "assistant", "content": "How was it?", "id": "m2", "timestamp": when + timedelta(minutes=1)},
    ])
    assert [(e.actor, e.occurred_at, e.source_ids) for e in episodes] == [("Caroline", when, ["D1:1"]),
                                                                          ("assistant", when + timedelta(minutes=1), ["m2"])]
    [hit] = await mem.search("support group", alice, k=1)
    assert hit.record.source_ids == ["D1:1"] and hit.memory_type == "episodic" and set(hit.parts) >= {"fused", "recency", "importance"}


async def test_oversized_messages_are_refused_clearly(mem, alice, snapshot):
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match="limit is 100,000"):
        await mem.ingest(alice, [{"speaker": "a", "text": "ok"}, {"speaker": "a", "text": "x" * 100_001}])
    assert await snapshot(mem) == before


def test_ingest_cli_jsonl_and_errors(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    rows = [{"speaker": "Sam", "text": f"note {i} about gardening", "id": f"n{i}"} for i in range(5)]
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    out = runner.invoke(app, ["ingest", str(path), "--db", str(tmp_path / "db"), "--user", "sam"])
    assert out.exit_code == 0 and "stored 5 turns" in out.output
    mem = MemoryOS.open_sync(tmp_path / "db", embedder=embedder)
    assert len(mem.list_sync(Scope("sam"), "episodic")) == 5
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"speaker": "Sam", "text": "fine"}\n{not json')
    out = runner.invoke(app, ["ingest", str(bad), "--db", str(tmp_path / "db"), "--user", "sam"])
    assert out.exit_code == 2 and "bad.jsonl:2: not valid JSON" in "".join(out.output.split("\n"))


async def test_search_packs_to_a_budget_and_vault_hits_show_captions_only(mem, alice):
    await mem.add(alice, [Fact(subject="Alice", summary=f"Alice visited museum number {i} in Vienna") for i in range(20)])
    await mem.add(alice, VaultItem(caption="Alice's Vienna museum pass number", secret="PASS-7781-ZZ"))
    hits = await mem.search("Vienna museum", alice, budget_tokens=60)
    assert 0 < len(hits) < 21 and sum(h.tokens for h in hits) <= 60
    vault = [h for h in await mem.search("museum pass", alice, types=["vault"])]
    assert vault and "PASS-7781" not in vault[0].text + vault[0].record.render() and vault[0].record.secret == ""
    assert mem.reveal_sync is not None and await mem.reveal(alice, vault[0].id, approved_by="test") == "PASS-7781-ZZ"


async def test_procedural_and_resource_round_trip(mem, alice):
    proc, res = await mem.add(alice, [Procedure(summary="Deploy the site", steps=["build", "upload", "purge cache"]),
                                      Resource(title="Lease.pdf", content="The lease ends on 30 June 2027.")])
    assert (await mem.get(alice, "procedural", proc.id)).steps == ["build", "upload", "purge cache"]
    [hit] = await mem.search("when does the lease end", alice, types=["resource"], k=1)
    assert hit.id == res.id


async def test_rows_read_back_exactly_as_lancedb_gives_them(mem, alice):
    from memos.store.schema import arrow_rows

    await mem.add(alice, [Fact(subject="x", summary="plain"), Fact(subject="y", summary="dated", valid_from=datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))])
    await mem.storage.flush_queued()  # the adds' journaled rows are in the table read below past `Storage.read`
    table = mem.storage.type_table("semantic").table
    ours, theirs = arrow_rows(await table.query().to_arrow()), await table.query().to_list()
    assert ours == theirs and any(r["valid_from"] is None for r in ours)
    assert arrow_rows((await table.query().where("false").to_arrow())) == []


def test_records_rebuilt_from_rows_equal_validated_ones():
    from memos.store.schema import json_columns, record_from_row, row_from_record

    for record in (Fact(subject="s", summary="x", tags=["a"], source_ids=["m1"]), Episode(summary="hi", actor="ana", details="pic")):
        cols = json_columns(type(record))
        rebuilt = record_from_row(type(record), row_from_record(record, None, cols), cols)
        assert rebuilt == record and rebuilt.model_fields_set == record.model_fields_set | set(type(record).model_fields)
        assert rebuilt.model_dump() == record.model_dump() and type(rebuilt).model_validate(rebuilt.model_dump()) == record


async def test_a_top_k_search_takes_its_winners_rows_even_after_a_compaction_moved_them(mem, alice, bob, embedder):
    """Top-k candidates are read lean (ranking columns and the row address); the winners' full
    rows are taken afterwards. A compaction in between moves rows to new addresses: the take
    then reads them by id, inside the scope, and leaves out a winner deleted meanwhile."""
    from memos.store.scope import Where

    facts = await mem.add(alice, [Fact(subject="Alice", summary=f"Alice note {i} about sailing boats") for i in range(12)])
    await mem.add(bob, [Fact(subject="Bob", summary=f"Bob note {i} about sailing boats") for i in range(12)])
    storage, where = mem.storage, Where(alice).status_in(("active",)).build()
    lean = await storage.vector_search("semantic", await embedder.embed_query("sailing boats"), where, 6, ["id", "importance", "created_at"])
    assert len(lean) == 6 and {"text", "summary"}.isdisjoint(lean[0]) and "_rowid" in lean[0]
    gone = lean[1]["id"]
    await mem.delete(alice, "semantic", gone)
    await mem.delete(alice, "semantic", next(f.id for f in facts if f.id not in {r["id"] for r in lean}))
    await storage.purge_old_versions("semantic")  # compaction: rows after a deleted one move
    at_old_addresses = await storage.type_table("semantic").table.take_row_ids([r["_rowid"] for r in lean]).select(["id"]).to_arrow()
    assert at_old_addresses["id"].to_pylist() != [r["id"] for r in lean]  # the rows have moved
    taken = await storage.take("semantic", lean, where)
    assert [r["id"] for r in taken] == [r["id"] for r in lean if r["id"] != gone]
    assert all(r["user_id"] == "alice" and r["summary"].startswith("Alice note") for r in taken)
    hits = await mem.search("sailing boats", alice, k=5)
    assert len(hits) == 5 and all(h.record.summary.startswith("Alice note") and h.record.text for h in hits)


async def test_one_row_commits_are_compacted_in_the_background_within_thirty_commits(mem, alice):
    """A chat commits one turn at a time; each commit is a fragment that every search of the table
    scans outside its indexes until a compaction folds it in (README, issue 18: with the old
    interval of 200 commits a search at 100k records cost up to twice the CPU)."""
    for n in range(30):
        await mem.add(alice, Episode(actor="alice", summary=f"turn {n} about tea"))
    await mem.storage.settle()
    table = mem.storage.type_table("episodic").table
    assert (await table.stats())["fragment_stats"]["num_fragments"] <= 8  # 30 with the old interval
    hits = await mem.search("turn 7 about tea", alice, k=3)
    assert hits and hits[0].record.summary == "turn 7 about tea"
    assert await mem.storage.count("episodic") == 30


async def test_supersedes_of_one_record_at_once_through_two_opens_leave_one_successor(mem, db_path, embedder, clock, vault_key, alice):
    """Each supersede adds a successor and closes the old record: at once (two requests, two server
    workers: here two opens of one store), each added its own and all stayed active. Now they take
    turns (`MemoryOS.exclusive`) and the later ones are refused with the successor's id."""
    import asyncio

    from memos.exceptions import RecordSupersededError

    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    [fact] = await mem.add(alice, Fact(subject="car", summary="the car is red"))
    outcomes = await asyncio.gather(*((mem, other)[i % 2].supersede(alice, "semantic", fact.id, Fact(subject="car", summary=f"the car is color {i}"))
                                      for i in range(4)), return_exceptions=True)
    [winner] = [o for o in outcomes if isinstance(o, Fact)]
    assert all(isinstance(o, RecordSupersededError) and winner.id in str(o) for o in outcomes if o is not winner)
    assert [f.id for f in await mem.list(alice, "semantic", limit=None)] == [winner.id]
