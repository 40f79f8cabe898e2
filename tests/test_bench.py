"""The benchmark commands' building blocks: the bulk-build embedder and the turn-overhead bench."""

from __future__ import annotations

import json
import time

from typer.testing import CliRunner

from memos.bench.scale import HashedTokens
from memos.cli import app

runner = CliRunner()


async def test_hashed_tokens_is_deterministic_normalised_and_word_sensitive():
    embed = HashedTokens()
    a, b, c = await embed.embed_documents(["Ana planned a hiking trip in Lisbon", "Ana planned a hiking trip in Porto",
                                           "the quarterly report is late"])
    assert a == (await embed.embed_documents(["Ana planned a hiking trip in Lisbon"]))[0]
    assert len(a) == 384 and abs(sum(x * x for x in a) - 1) < 1e-9
    cos = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert cos(a, b) > 0.5 > cos(a, c)


def test_bench_turn_reports_each_part_and_reuses_its_store(tmp_path):
    store = tmp_path / "store"
    args = ["bench", "turn", "--records", "300", "--turns", "5", "--embedder", "hashed", "--path", str(store), "--json", "-"]
    first = runner.invoke(app, args)
    report = json.loads(first.stdout)
    assert report["records"] == 300 and report["embedder"] == "hashed-tokens" and report["turns"] == 5
    assert set(report["turn_ms"]) == {"user_step", "record_reply", "total"}
    assert report["turn_ms"]["total"]["p95"] >= report["turn_ms"]["total"]["p50"] > 0
    again = json.loads(runner.invoke(app, args).stdout)
    assert again["reused"] is True and again["records"] >= 300  # the first run's turns are in it too
    started = time.monotonic()
    paused = json.loads(runner.invoke(app, [*args, "--pause-ms", "100"]).stdout)
    assert paused["pause_ms"] == 100 and time.monotonic() - started >= (5 + 3) * 2 * 0.1  # two pauses a turn, warm-up too
    assert set(paused["turn_ms"]) == {"user_step", "record_reply", "total"}
    bad = runner.invoke(app, ["bench", "turn", "--embedder", "bert"])
    assert bad.exit_code == 2 and "hashed" in bad.output


async def test_bulk_build_keeps_every_record_and_drops_old_versions_between_batches(tmp_path, monkeypatch, embedder):
    import memos.bench.scale as scale

    monkeypatch.setattr(scale, "PURGE_EVERY", 400)  # a purge after the 2nd and 4th batch, none after the last
    purges = []
    from memos.store.lancedb.storage import Storage

    original = Storage.purge_old_versions

    async def counted(self, *args, **kwargs):
        purges.append(sum([await self.count(name) for name in self.tables]))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Storage, "purge_old_versions", counted)
    report = await scale.run_scale_bench(1000, path=tmp_path / "s", queries=20, batch=200, embedder="hashed",
                                         query_embedder="local")
    assert purges == [400, 800]
    assert report["records"] == 1000 and report["query_embedder"] == embedder.name
    memory, reused = await scale.open_bench_store(1000, tmp_path / "s", embedder=scale.HashedTokens())
    assert reused["reused"] is True
    assert sum([await memory.storage.count(name) for name in memory.type_names]) == 1000
    table = memory.storage.type_table("episodic").table
    # versions left: the last purge's, then the batches and optimizes after it (not one per commit since the start)
    assert len(await table.list_versions()) < 40


def test_bench_scale_rejects_an_unknown_query_embedder():
    bad = runner.invoke(app, ["bench", "scale", "--records", "100", "--embedder", "hashed", "--query-embedder", "bert"])
    assert bad.exit_code == 2 and "hashed" in bad.output


def test_locomo_evidence_listing_two_turns_in_one_string_is_split(tmp_path):
    from memos.bench.locomo import load_locomo

    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "I painted a lake."},
                          {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice!"},
                          {"speaker": "Ana", "dia_id": "D1:3", "text": "And a sunset."}],
        },
        "qa": [{"question": "What did Ana paint?", "answer": "a lake and a sunset", "evidence": ["D1:1; D1:3"], "category": 1},
               {"question": "Who said nice?", "answer": "Ben", "evidence": ["D1:2"], "category": 4}],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [conv] = load_locomo(path)
    assert [q.evidence for q in conv.questions] == [("D1:1", "D1:3"), ("D1:2",)]
    assert {m.id for m in conv.messages} >= {"D1:1", "D1:3"}  # every evidence id names a turn
