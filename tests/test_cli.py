"""The command line: each command's happy path and an error path (typer's CliRunner).

Covered elsewhere: demo and chat (test_demo), ingest and reindex (test_storage), forget and
vault rotate-key (test_security), jobs / worker / reflect / consolidate / inspect jobs
(test_scheduler_cli, test_worker), mcp (test_mcp).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.cli import app
from memos.memtypes import Fact

runner = CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


def test_init_then_inspect_stores_core_record_and_context(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    monkeypatch.setenv("HOME", str(tmp_path))
    db = str(tmp_path / "db")
    out = runner.invoke(app, ["init", db, "--user", "sam"])
    assert out.exit_code == 0 and "core blocks ['persona', 'human']" in flat(out.output)
    mem = MemoryOS.open_sync(db, embedder=embedder)
    fact, = mem.add_sync(Scope("sam", "assistant"), Fact(subject="Sam", summary="Sam grows tomatoes"))
    mem.update_sync(Scope("sam"), "semantic", fact.id, {"details": "cherry tomatoes"})
    stores = json.loads(runner.invoke(app, ["inspect", "stores", "--db", db, "--json"]).stdout)
    assert stores["sam"]["semantic"] == 1 and stores["sam"]["core"] == 2
    core = json.loads(runner.invoke(app, ["inspect", "core", "--db", db, "--user", "sam", "--agent", "assistant", "--json"]).stdout)
    assert [b["label"] for b in core] == ["persona", "human"] and core[0]["limit"] == 2000
    record = json.loads(runner.invoke(app, ["inspect", "record", fact.id, "--db", db, "--user", "sam", "--json"]).stdout)
    assert record["store"] == "semantic" and [h["op"] for h in record["history"]] == ["add", "update"]
    ctx = runner.invoke(app, ["inspect", "context", "--db", db, "--user", "sam", "--agent", "assistant",
                              "--message", "what do I grow?", "--budget", "1000", "--json"])
    report = json.loads(ctx.stdout)
    assert report["total"] <= 1000 and "Sam grows tomatoes" in report["system_prompt"]
    assert set(report["sections"]) >= {"instructions", "core", "memories", "turns"}
    bars = runner.invoke(app, ["inspect", "context", "--db", db, "--user", "sam", "--agent", "assistant", "--message", "hi"])
    assert bars.exit_code == 0 and "memories" in bars.output and "/ 4000" in bars.output


def test_inspect_errors(tmp_path):
    missing = runner.invoke(app, ["inspect", "stores", "--db", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no memos store" in flat(missing.output)
    MemoryOS.open_sync(tmp_path / "db", embedder=None)
    unknown = runner.invoke(app, ["inspect", "record", "abc123", "--db", str(tmp_path / "db"), "--user", "sam"])
    assert unknown.exit_code == 2 and "no record 'abc123'" in flat(unknown.output)
    empty = runner.invoke(app, ["inspect", "context", "--db", str(tmp_path / "db"), "--user", "sam", "--embedder", "none"])
    assert empty.exit_code == 2 and "no turns yet" in flat(empty.output)


def test_search_json_and_a_bad_store(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    mem = MemoryOS.open_sync(tmp_path / "db", embedder=embedder)
    mem.add_sync(Scope("sam"), [Fact(subject="Sam", summary="Sam's bike is blue"), Fact(subject="Sam", summary="Sam likes jazz")])
    out = runner.invoke(app, ["search", "bicycle colour", "--db", str(tmp_path / "db"), "--user", "sam", "--json", "-k", "1"])
    [hit] = json.loads(out.stdout)
    assert hit["text"].endswith("Sam's bike is blue") and hit["store"] == "semantic" and "fused" in hit["parts"]
    bad = runner.invoke(app, ["search", "x", "--db", str(tmp_path / "db"), "--user", "sam", "--type", "recipes"])
    assert bad.exit_code == 2 and "unknown memory type 'recipes'" in flat(bad.output)


def test_export_import_cli_round_trip(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db, other, dump = tmp_path / "db", tmp_path / "other", tmp_path / "sam.jsonl"
    MemoryOS.open_sync(db, embedder=embedder).add_sync(Scope("sam"), Fact(subject="Sam", summary="Sam speaks Greek"))
    out = runner.invoke(app, ["export", str(dump), "--db", str(db), "--user", "sam"])
    assert out.exit_code == 0 and dump.read_text().count('"kind": "record"') == 1
    out = runner.invoke(app, ["import", str(dump), "--db", str(other), "--user", "samuel", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["records"] == 1
    assert [f.summary for f in MemoryOS.open_sync(other, embedder=embedder).list_sync(Scope("samuel"), "semantic")] == ["Sam speaks Greek"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "record"}\n')
    out = runner.invoke(app, ["import", str(bad), "--db", str(other)])
    assert out.exit_code == 2


def test_bench_retrieval_on_a_tiny_locomo_file(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turns = [{"speaker": "A" if i % 2 else "B", "dia_id": f"D1:{i + 1}", "text": t} for i, t in enumerate(
        ["I adopted a puppy named Miso.", "Cute! What breed?", "A shiba inu.", "I started pottery classes.", "Nice, where?", "At the studio on Elm street."])]
    data = [{"sample_id": "c1", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": turns,
                                                "session_1_date_time": "1:56 pm on 8 May, 2023"},
             "qa": [{"question": "What is the puppy's name?", "answer": "Miso", "evidence": ["D1:1"], "category": 4},
                    {"question": "Where are the pottery classes?", "answer": "Elm street", "evidence": ["D1:4", "D1:6"], "category": 1}]}]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    out = runner.invoke(app, ["bench", "retrieval", str(path), "--json", "-"])
    report = json.loads(out.stdout)
    assert report["questions"] == 2 and report["recall_all"]["4000"] == 1.0 and 0 < report["tokens_used"]["500"] <= 500
    assert set(report) >= {"recall_any", "recall_all_by_category", "ingest_turns_per_s", "search_ms"}
    assert (start - timedelta(0)).year == 2023
    assert "passages" not in report  # opt-in
    data[0]["conversation"]["session_1"][1]["text"] = " ".join(["Shiba inus are loyal, alert and stubborn dogs."] * 60)
    path.write_text(json.dumps(data))
    with_passages = json.loads(runner.invoke(app, ["bench", "retrieval", str(path), "--passages", "--json", "-"]).stdout)
    assert with_passages["passages"] >= 2 and with_passages["recall_all"]["4000"] == 1.0
    missing = runner.invoke(app, ["bench", "retrieval", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "does not exist" in flat(missing.output)


def test_bench_scale_small(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    out = runner.invoke(app, ["bench", "scale", "--records", "300", "--queries", "20", "--path", str(tmp_path / "s"), "--json", "-"])
    report = json.loads(out.stdout)
    assert report["records"] == 300 and set(report) >= {"insert_per_s", "search_ms", "embed_ms", "peak_rss_mb"}
    assert report["search_ms"]["p95"] >= report["search_ms"]["p50"] > 0
    bad = runner.invoke(app, ["bench", "scale", "--records", "5"])
    assert bad.exit_code == 2


def test_ingest_a_text_document_into_resource_memory_and_a_locomo_file(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    doc = tmp_path / "lease.md"
    doc.write_text("# Lease\n\nThe flat at 12 Rua Augusta is rented from 1 July 2026.\n\n" + ("Clause text. " * 300)
                   + "\n\nThe deposit is two months of rent, returned within 30 days.")
    out = runner.invoke(app, ["ingest", str(doc), "--db", str(tmp_path / "db"), "--user", "sam"])
    assert out.exit_code == 0 and "resource chunks" in out.output
    mem = MemoryOS.open_sync(tmp_path / "db", embedder=embedder)
    chunks = mem.list_sync(Scope("sam"), "resource", limit=None)
    assert len(chunks) >= 3 and {c.title for c in chunks} == {"lease.md"}
    assert "".join(c.content for c in chunks).count("Clause text.") == 300  # nothing dropped
    [hit] = mem.search_sync("how much is the deposit", Scope("sam"), types=["resource"], k=1)
    assert "deposit is two months" in hit.record.content
    locomo = tmp_path / "conv.json"
    locomo.write_text(json.dumps([{"sample_id": "c9", "conversation": {"speaker_a": "A", "speaker_b": "B",
        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "I got a kayak."}], "session_1_date_time": "1:56 pm on 8 May, 2023"},
        "qa": []}]))
    out = runner.invoke(app, ["ingest", str(locomo), "--db", str(tmp_path / "db"), "--user", "sam"])
    assert out.exit_code == 0 and "1 conversations, 1 turns" in flat(out.output)
    [turn] = MemoryOS.open_sync(tmp_path / "db", embedder=embedder).list_sync(Scope("sam"), "episodic")
    assert turn.source_ids == ["D1:1"] and turn.occurred_at.year == 2023
    binary = tmp_path / "photo.png"
    binary.write_bytes(b"\x89PNG\x00\x00binary")
    out = runner.invoke(app, ["ingest", str(binary), "--db", str(tmp_path / "db")])
    assert out.exit_code == 2 and "looks binary" in flat(out.output)


def test_chat_and_reindex_error_paths(tmp_path):
    out = runner.invoke(app, ["chat", "--db", str(tmp_path / "db")])
    assert out.exit_code == 2 and "--model" in out.output
    out = runner.invoke(app, ["reindex", str(tmp_path / "db"), "--embedder", "none"])
    assert out.exit_code != 0


def test_worker_runs_its_jobs_for_a_while_then_stops(tmp_path):
    db = str(tmp_path / "db")
    MemoryOS.open_sync(db, embedder=None).add_sync(Scope("sam"), [Fact(subject="Sam", summary="Sam owns a red kayak")] * 1)
    added = runner.invoke(app, ["jobs", "add", "consolidate", "--db", db, "--user", "sam", "--every", "1", "--embedder", "none"])
    assert added.exit_code == 0, added.output
    out = runner.invoke(app, ["worker", "--db", db, "--embedder", "none", "--duration", "3", "--log-level", "WARNING"])
    assert out.exit_code == 0 and "worker stopped after" in out.output
    assert int(flat(out.output).split("worker stopped after ")[1].split()[0]) >= 1


def test_error_paths_of_init_export_rotate_reflect_consolidate_and_worker(tmp_path):
    missing = str(tmp_path / "missing")
    for args, message in [
        (["init", str(tmp_path / "db"), "--user", "", "--embedder", "none"], "user_id must not be empty"),
        (["export", str(tmp_path / "x.jsonl"), "--db", missing, "--user", "sam"], "no memos store"),
        (["vault", "rotate-key", "--db", missing], "no memos store"),
        (["reflect", "--db", str(tmp_path / "db"), "--user", "", "--embedder", "none"], "user_id must not be empty"),
        (["consolidate", "--db", str(tmp_path / "db"), "--user", "bad\x00id", "--embedder", "none"], "control or NUL"),
        (["worker", "--db", str(tmp_path / "db"), "--embedder", "none", "--jobs-url", "nosuchdb://x", "--duration", "1"], "error"),
    ]:
        out = runner.invoke(app, args)
        assert out.exit_code != 0, args
        assert message in flat(out.output) or message == "error", (args, out.output)


def test_serve_gives_each_encode_call_one_blas_thread_unless_told_otherwise(tmp_path, embedder, monkeypatch):
    """A server's parallelism is its concurrent requests: by default each call of the local encoder
    runs on one BLAS thread; --encoder-threads (or MEMOS_ENCODER_THREADS) sets another count, 0
    leaves it to the encoder (the cores other processes leave idle)."""
    import os

    from memos.sentence_encoder import encode_threads

    monkeypatch.setattr("memos.embeddings._local", embedder)
    db = str(tmp_path / "db")
    assert runner.invoke(app, ["init", db]).exit_code == 0
    served: list[tuple[str | None, int]] = []
    monkeypatch.setattr("memos.serve.run", lambda config, **_: served.append((os.environ.get("MEMOS_ENCODER_THREADS"), encode_threads())))
    monkeypatch.setenv("MEMOS_ENCODER_THREADS", "-")  # restored after the test, whatever serve leaves
    monkeypatch.delenv("MEMOS_ENCODER_THREADS")
    assert runner.invoke(app, ["serve", "--db", db]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db, "--encoder-threads", "3"]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db], env={"MEMOS_ENCODER_THREADS": "2"}).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db, "--encoder-threads", "0"]).exit_code == 0
    assert served[:3] == [("1", 1), ("3", 3), ("2", 2)]
    assert served[3][0] is None and 1 <= served[3][1] <= (os.cpu_count() or 1)
    assert runner.invoke(app, ["serve", "--db", db, "--encoder-threads", "-1"]).exit_code != 0


def test_serve_caps_lancedbs_worker_threads_unless_told_otherwise(tmp_path, monkeypatch):
    """--store-threads (default 4; MEMOS_STORE_THREADS) reaches the served app's configuration,
    and each worker's through the environment it is spawned with."""
    from memos.serve.workers import app_from_env

    db = str(tmp_path / "db")
    assert runner.invoke(app, ["init", db]).exit_code == 0
    served: list[int] = []
    monkeypatch.setattr("memos.serve.run", lambda config, **_: served.append(config.store_threads))
    assert runner.invoke(app, ["serve", "--db", db, "--embedder", "none"]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db, "--embedder", "none", "--store-threads", "2"]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db, "--embedder", "none", "--store-threads", "0"]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db, "--embedder", "none"], env={"MEMOS_STORE_THREADS": "3"}).exit_code == 0
    assert served == [4, 2, 0, 3]
    assert runner.invoke(app, ["serve", "--db", db, "--store-threads", "-1"]).exit_code != 0
    made: list[int] = []
    monkeypatch.setattr("memos.serve.workers.create_app", lambda config: made.append(config.store_threads))
    monkeypatch.setenv("MEMOS_SERVE_DB", db)
    for value in ("0", "5", None):
        if value is None:
            monkeypatch.delenv("MEMOS_SERVE_STORE_THREADS")
        else:
            monkeypatch.setenv("MEMOS_SERVE_STORE_THREADS", value)
        app_from_env()
    assert made == [0, 5, 4]
