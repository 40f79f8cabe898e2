"""`memos demo` and `memos chat` run offline, within budget, and keep the vault secret out of the store."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from memos.cli import app
from memos.demo import load_script, run_demo

runner = CliRunner()


async def test_the_demo_pages_within_budget_recalls_and_scrubs_the_secret(tmp_path: Path, embedder):
    script = load_script()
    result = await run_demo(tmp_path / "mem", budget=1200, embedder=embedder)
    assert len(result.steps) == sum(len(s["turns"]) for s in script["sessions"]) // 2
    assert max(s.tokens for s in result.steps) <= 1200
    assert sum(s.evicted for s in result.steps) > 20 and any(s.pressure for s in result.steps)
    assert any(s.paged_in for s in result.steps)
    assert sum(a.found for a in result.answers) >= len(result.answers) - 1
    # judged on what it shows: a k=3 search's three hits (a reply is part of the hit it answers)
    assert all(len(a.answer) == 3 for a in result.answers)
    assert all(a.found == any(a.expect.lower() in hit.lower() for hit in a.answer) for a in result.answers)
    assert result.counts["episodic"] == 60 and result.counts["vault"] == 1
    secret = script["vault"][0]["secret"].encode()
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert leaked == []


def test_demo_cli_runs_a_few_steps(tmp_path: Path):
    out = runner.invoke(app, ["demo", "--steps", "8", "--budget", "600", "--path", str(tmp_path / "m")])
    assert out.exit_code == 0, out.output
    assert "s1·08" in out.output and "Recall from memory" in out.output and "evicted" in out.output


def test_demo_cli_error_for_a_missing_script(tmp_path: Path):
    out = runner.invoke(app, ["demo", "--script", str(tmp_path / "nope.json"), "--path", str(tmp_path / "m")])
    assert out.exit_code == 2 and "not found; pass --script FILE" in " ".join(out.output.split())


def test_chat_cli_with_the_offline_test_model(tmp_path: Path):
    out = runner.invoke(app, ["chat", "--model", "test", "--db", str(tmp_path / "m"), "--user", "sam",
                              "-m", "hello there", "-m", "what did I say?"])
    assert out.exit_code == 0, out.output
    assert out.output.count("(test model) noted.") == 2
