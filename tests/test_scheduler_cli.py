"""The job commands and the runnable example, end to end (offline)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.cli import app
from memos.memtypes import Fact

ROOT = Path(__file__).resolve().parent.parent


def test_jobs_commands_schedule_run_and_show(tmp_path):
    db = str(tmp_path / "db")
    mem = MemoryOS.open_sync(db, embedder=None)
    alice = Scope("alice")
    mem.add_sync(alice, [Fact(subject="alice", summary="likes tea"), Fact(subject="alice", summary="likes tea")])
    runner = CliRunner()
    added = runner.invoke(app, ["jobs", "add", "consolidate", "--db", db, "--user", "alice", "--every", "600", "--embedder", "none"])
    assert added.exit_code == 0, added.output
    paused = runner.invoke(app, ["jobs", "pause", "consolidate", "--db", db, "--user", "alice"])
    assert paused.exit_code == 0, paused.output
    ran = runner.invoke(app, ["consolidate", "--path", db, "--user", "alice", "--embedder", "none", "--json"])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["merged"] == 1
    shown = runner.invoke(app, ["inspect", "jobs", "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    [job] = data["jobs"]
    assert job["id"] == "consolidate:alice:*:*" and job["paused"] and job["every_seconds"] == 600
    [run] = data["runs"]
    assert run["job"] == "consolidate" and run["merged"] == 1 and run["actor"] == "cli"
    listed = runner.invoke(app, ["jobs", "list", "--db", db])
    assert listed.exit_code == 0 and "consolidate:alice:*:*" in listed.stdout and "paused" in listed.stdout
    raw = runner.invoke(app, ["reflect", "--db", db, "--user", "alice", "--embedder", "none", "--json"])
    assert raw.exit_code == 0 and json.loads(raw.stdout)["skipped"].startswith("raw mode")
    bad = runner.invoke(app, ["jobs", "remove", "reflect", "--db", db, "--user", "alice"])
    assert bad.exit_code == 2 and "no reflect job" in bad.output


def test_example_runs_offline_with_a_scripted_model(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("scheduled_reflection", ROOT / "examples" / "scheduled_reflection.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    totals = example.main(["--steps", "14", "--db", str(tmp_path / "db")])
    assert totals == {"turns": 14, "insights": 4, "merged": 2, "superseded": 1, "errors": 0}
    out = capsys.readouterr().out
    assert "[superseded] user: user lives in Porto" in out and "cites 6 records" in out
