"""`memos bench embedder` measures the encoder alone, without the storage layer installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHECK = textwrap.dedent("""
    import json, sys
    from memos.bench.embedder import main
    main(sys.argv[1:])
    print(json.dumps(sorted(m for m in ("lancedb", "pyarrow", "pydantic", "pydantic_ai", "typer") if m in sys.modules)))
""")


def test_the_bench_runs_on_random_weights_without_importing_the_storage_layer(tmp_path):
    from memos.embeddings import local_model_dir

    env = {**os.environ, "MEMOS_ENCODER_WORKERS": ""}
    model = tmp_path / "model"
    export = subprocess.run([sys.executable, "-m", "memos.bench.embedder", "--export-model", str(model)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert export.returncode == 0, export.stderr[-2000:]
    assert not (model / "model.safetensors").exists() and (model / "model.shapes.json").exists()
    assert (model / "tokenizer.json").read_bytes() == (local_model_dir() / "tokenizer.json").read_bytes()
    report_file = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-c", CHECK, "--model-dir", str(model), "--random-weights", "--limit", "40",
                          "--passes", "1", "--call", "20", "--workers", "1,2", "--json", str(report_file)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []  # nothing of the storage layer (or the CLI)
    report = json.loads(report_file.read_text())
    assert report["texts"] == 40 and report["random_weights"] is True
    assert [(r["workers"], r["threads"]) for r in report["rows"]] == [(1, 1), (2, 1)]
    assert all(r["texts_per_s"] > 0 for r in report["rows"])
    assert report["rows"][1]["max_abs_diff"] <= 1e-6  # the pool's random-weight vectors are the single process's


def test_the_cli_command_reads_a_locomo_file(tmp_path):
    locomo = tmp_path / "locomo.json"
    turns = [{"speaker": "Ann", "dia_id": f"D1:{i}", "text": f"I planted {i} tomatoes"} for i in range(12)]
    locomo.write_text(json.dumps([{"sample_id": "s", "conversation": {"speaker_a": "Ann", "speaker_b": "Bo", "session_1": turns}}]))
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "memos.cli", "bench", "embedder", "--dataset", str(locomo), "--passes", "1",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["texts"] == 12 and report["rows"][0]["device"] == "cpu"
    missing = subprocess.run([sys.executable, "-m", "memos.cli", "bench", "embedder", "--dataset", str(tmp_path / "nope.json")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "does not exist" in missing.stdout + missing.stderr


def test_the_remote_stub_bench_reports_throughput_retries_and_nothing_lost(tmp_path):
    """`memos bench embedder --remote-stub`: both phases through the stub, 429s retried, every text
    (and every ingested turn) with its own vector."""
    from memos.bench.embedder import main

    out = tmp_path / "remote.json"  # in this process: the CLI's command hands the same arguments to `main`
    main(["--remote-stub", "--limit", "300", "--latency-ms", "5", "--batch", "16", "--rate-429", "0.1", "--retry-after", "0.05",
          "--dim", "16", "--in-flight", "4", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["stub"] == {"latency_ms": 5.0, "rate_429": 0.1, "retry_after": 0.05, "retry_after_ms": None, "dim": 16,
                              "floats_only": False, "batch": 16}
    assert report["in_flight"] == 4 and report["call"] == "all"
    embed, ingest = report["embed"], report["ingest"]
    assert embed["texts"] == 300 and embed["lost"] == 0 and embed["texts_per_s"] > 0
    assert embed["batches"] == 19 and embed["http_429"] >= 1 and embed["retries"] == embed["http_429"]
    assert embed["requests"] == embed["batches"] + embed["retries"] and 1 <= embed["max_in_flight_seen"] <= 4
    assert embed["client_cpu_s"] > 0 and embed["stub_cpu_s"] >= 0
    assert ingest["turns"] == 300 and ingest["lost"] == 0 and ingest["turns_per_s"] > 0 and ingest["http_429"] >= 1


def test_lost_counts_a_missing_vector_and_one_of_another_text():
    from memos.bench.openai_stub import stub_vector
    from memos.bench.remote_embedder import _lost

    texts = ["bees", "honey", "hive"]
    assert _lost(texts, [stub_vector(t, 16) for t in texts], 16) == 0
    assert _lost(texts, [stub_vector("honey", 16), stub_vector("bees", 16), stub_vector("hive", 16)], 16) == 2
    assert _lost(texts, [stub_vector("bees", 16), None], 16) == 2
