"""A newcomer's first hour: what the installed package is called, the CLI's edges, and a local
model server (a loopback OpenAI-compatible stub, `tests/openai_stub.py`) through `memos chat`,
`memos demo` and the Python API.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pydantic_ai.models
import pytest
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.cli import app
from memos.memtypes import Fact

from openai_stub import REPLY, serve_stub

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def local(monkeypatch, embedder, tmp_path):
    """The CLI on the shared embedder, with a private vault key."""
    monkeypatch.setattr("memos.embeddings._local", embedder)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path / "db"


# -- installed names ------------------------------------------------------------------------

def test_the_distribution_installs_one_top_level_name_ours():
    # every installed copy (a RECORD; not an egg-info a source build may leave in the checkout)
    installed = [d for d in importlib.metadata.distributions(name="memos-memory") if d.read_text("RECORD")]
    assert installed
    for dist in installed:
        assert dist.read_text("top_level.txt").split() == ["memos"]
        # its files sit under memos/, its dist-info, the console script or (editable installs) the
        # finder that maps memos.* onto the repository's folders
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        assert {t for t in tops if not (t == "memos" or t.startswith(("memos_memory", "__editable__", "__pycache__")))} == set()
        for finder in [f for f in dist.files or [] if str(f).startswith("__editable__") and str(f).endswith("_finder.py")]:
            source = Path(finder.locate()).read_text()
            mapping = source.split("MAPPING: dict[str, str] = ", 1)[1].split("\n", 1)[0]
            assert set(eval(mapping)) == {"memos", "memos.agents", "memos.memtypes", "memos.prompts"}  # noqa: S307
    # and what a wheel would carry: only the memos package and its subpackages
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "memos" or p.startswith("memos.") for p in config["packages"])
    assert all(p == "memos" or p.startswith("memos.") for p in config["package-dir"])


# -- the CLI's edges ------------------------------------------------------------------------

def test_search_on_a_mistyped_store_says_so_and_creates_nothing(tmp_path):
    out = runner.invoke(app, ["search", "kayak", "--db", str(tmp_path / "typo")])
    assert out.exit_code == 2 and "no memos store at" in flat(out.output) and "memos init" in out.output
    assert not (tmp_path / "typo").exists()


def test_add_remembers_a_fact_and_search_filters_by_time(local):
    db = str(local)
    out = runner.invoke(app, ["add", "Sam owns a red kayak", "--db", db, "--user", "sam", "--subject", "Sam", "--json"])
    assert out.exit_code == 0, out.output
    added = json.loads(out.stdout)
    assert added["store"] == "semantic" and "red kayak" in added["text"]
    note = runner.invoke(app, ["add", "Paddled around the bay", "--db", db, "--user", "sam", "--type", "episodic"])
    assert note.exit_code == 0 and "stored episodic" in flat(note.output)
    hits = json.loads(runner.invoke(app, ["search", "kayak", "--db", db, "--user", "sam", "--json"]).stdout)
    assert added["id"] in [h["id"] for h in hits]
    past = json.loads(runner.invoke(app, ["search", "kayak", "--db", db, "--user", "sam", "--until", "2001-01-01", "--json"]).stdout)
    future = json.loads(runner.invoke(app, ["search", "kayak", "--db", db, "--user", "sam", "--since", "2999-01-01", "--json"]).stdout)
    assert past == [] and future == []
    bad = runner.invoke(app, ["add", "x", "--db", db, "--type", "vault"])
    assert bad.exit_code == 2 and "semantic, episodic, procedural, resource" in flat(bad.output)


def test_inspect_context_message_is_a_probe_and_uses_chats_agent(local):
    db = str(local)
    chat = runner.invoke(app, ["chat", "--model", "test", "--db", db, "--user", "sam", "-m", "I keep bees in Porto"])
    assert chat.exit_code == 0, chat.output
    mem = MemoryOS.open_sync(db, embedder=None)
    before = mem.counts_sync(Scope("sam"))
    out = runner.invoke(app, ["inspect", "context", "--db", db, "--user", "sam", "--message", "where are my bees?", "--json"])
    assert out.exit_code == 0, out.output
    turns = json.loads(out.stdout)["turns"]
    assert any("I keep bees in Porto" in t for t in turns) and "where are my bees?" in turns[-1]
    assert MemoryOS.open_sync(db, embedder=None).counts_sync(Scope("sam")) == before  # nothing was stored
    plain = runner.invoke(app, ["inspect", "context", "--db", db, "--user", "sam", "--json"])
    assert plain.exit_code == 0 and not any("where are my bees?" in t for t in json.loads(plain.stdout)["turns"])


def test_chat_help_and_unknown_commands_never_reach_the_model(local):
    db = str(local)
    out = runner.invoke(app, ["chat", "--model", "test", "--db", db, "-m", "/help", "-m", "/nope", "-m", "hello"])
    assert out.exit_code == 0, out.output
    text = flat(out.output)
    assert "/context" in text and "unknown command /nope" in text and text.count("(test model) noted.") == 1
    episodes = MemoryOS.open_sync(db, embedder=None).list_sync(Scope("default"), "episodic", limit=None)
    assert [e.summary for e in episodes] == ["hello", "(test model) noted."]


def test_reingesting_a_document_keeps_one_copy_and_a_changed_one_replaces_it(local, tmp_path):
    db = str(local)
    doc = tmp_path / "notes.md"
    doc.write_text("# Bees\n\nThe hive by the fig tree swarmed in May.\n")
    assert runner.invoke(app, ["ingest", str(doc), "--db", db]).exit_code == 0
    again = runner.invoke(app, ["ingest", str(doc), "--db", db])
    assert again.exit_code == 0 and "already stored unchanged" in flat(again.output)
    mem = MemoryOS.open_sync(db, embedder=None)
    assert mem.counts_sync(Scope("default"))["resource"] == 1
    doc.write_text("# Bees\n\nThe hive by the fig tree swarmed in June.\n")
    changed = runner.invoke(app, ["ingest", str(doc), "--db", db])
    assert changed.exit_code == 0 and "replacing the 1 chunks" in flat(changed.output)
    [chunk] = MemoryOS.open_sync(db, embedder=None).list_sync(Scope("default"), "resource")
    assert "June" in chunk.content


def test_forget_an_unknown_user_says_so(local):
    db = str(local)
    MemoryOS.open_sync(db, embedder=None).add_sync(Scope("sam"), Fact(subject="Sam", summary="Sam keeps bees"))
    out = runner.invoke(app, ["forget", "--user", "sma", "--db", db, "--yes"])
    assert out.exit_code == 1 and "no memories of user 'sma'" in flat(out.output) and "'sam'" in out.output
    assert MemoryOS.open_sync(db, embedder=None).counts_sync(Scope("sam"))["semantic"] == 1


def test_reindex_takes_db_like_every_command_and_import_and_reindex_show_progress(local, tmp_path):
    db = str(local)
    MemoryOS.open_sync(db, embedder=None).add_sync(Scope("sam"), [Fact(subject="Sam", summary=f"fact {i}") for i in range(5)])
    out = runner.invoke(app, ["reindex", "--db", db])
    assert out.exit_code == 0 and "re-embedded 5 records" in flat(out.output) and "re-embedding" in out.output
    old = runner.invoke(app, ["reindex", db])
    assert old.exit_code == 0 and "deprecated; use `memos reindex --db" in flat(old.output)
    missing = runner.invoke(app, ["reindex", "--db", str(tmp_path / "typo")])
    assert missing.exit_code == 2 and "no memos store" in missing.output
    export = tmp_path / "sam.jsonl"
    assert runner.invoke(app, ["export", str(export), "--db", db, "--user", "sam"]).exit_code == 0
    imported = runner.invoke(app, ["import", str(export), "--db", str(tmp_path / "db2")])
    assert imported.exit_code == 0 and "importing sam.jsonl" in imported.output and "imported 5 records" in flat(imported.output)


def test_mcp_without_its_extra_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # as if the SDK were not installed
    out = runner.invoke(app, ["mcp", "--db", str(tmp_path / "db")])
    assert out.exit_code == 2 and "pip install 'memos-memory[mcp]'" in flat(out.output)


def test_demo_with_the_test_model_runs(local, tmp_path):
    out = runner.invoke(app, ["demo", "--model", "test", "--steps", "2", "--path", str(tmp_path / "demo"), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert len(report["steps"]) == 2 and all(s["reply"] == "(test model) noted." for s in report["steps"])


def test_a_missing_api_key_is_one_line(local, monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = runner.invoke(app, ["chat", "--model", "openai:gpt-4o-mini", "--db", str(local), "-m", "hi"])
    assert out.exit_code == 2 and "OPENAI_API_KEY" in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_demo_piped_into_head_ends(tmp_path):
    """`memos demo | head -3`: once head has its lines, the demo stops (it used to hang forever)."""
    proc = subprocess.Popen([sys.executable, "-m", "memos.cli", "demo", "--steps", "6"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120", "TMPDIR": str(tmp_path)})
    assert proc.stdout is not None
    for _ in range(3):
        proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=240) in (0, 1)


# -- a local model server (chat completions) ------------------------------------------------

@pytest.fixture
def stub(monkeypatch):
    """A loopback OpenAI-compatible server; model requests allowed for this test (loopback only)."""
    pytest.importorskip("openai")
    monkeypatch.setattr(pydantic_ai.models, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    with serve_stub() as server:
        yield server


def test_chat_with_a_local_server_by_model_string_and_by_base_url(local, stub, monkeypatch):
    db = str(local)
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    out = runner.invoke(app, ["chat", "--model", "openai-chat:llama3.2", "--db", db, "-m", "I keep bees"])
    assert out.exit_code == 0, out.output
    assert REPLY in out.output and stub.requests[0]["path"] == "/v1/chat/completions"
    assert stub.requests[0]["body"]["model"] == "llama3.2"
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("OLLAMA_BASE_URL", stub.url)
    out = runner.invoke(app, ["chat", "--model", "ollama:qwen3", "--db", db, "-m", "hello again"])
    assert out.exit_code == 0 and REPLY in out.output, out.output
    monkeypatch.delenv("OLLAMA_BASE_URL")
    out = runner.invoke(app, ["chat", "--model", "mistral", "--base-url", stub.url, "--db", db, "-m", "third"])
    assert out.exit_code == 0 and REPLY in out.output, out.output
    assert [r["body"]["model"] for r in stub.requests if "tools" not in r["body"] or not any(
        t["function"]["name"].startswith("final_result") for t in r["body"]["tools"])][-2:] == ["qwen3", "mistral"]
    assert all(r["path"] == "/v1/chat/completions" for r in stub.requests)


def test_a_responses_model_string_against_a_chat_only_server_names_the_fix(local, stub, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    out = runner.invoke(app, ["chat", "--model", "openai:llama3.2", "--db", str(local), "-m", "hi"])
    assert out.exit_code == 2, out.output
    text = flat(out.output)
    assert "answered 404" in text and "'openai-chat:llama3.2'" in text and "Traceback" not in out.output
    assert stub.requests[-1]["path"] == "/v1/responses"


def test_the_python_api_with_a_local_server(mem, stub, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    agent = mem.agent("openai-chat:llama3.2", Scope("sam", "local"), manager_model="openai-chat:llama3.2")
    assert agent.chat_sync("Hi! I'm Sam and I keep bees.") == REPLY
    agent.flush_sync()
    assert [r["path"] for r in stub.requests] == ["/v1/chat/completions"] * len(stub.requests) and len(stub.requests) >= 2


def test_demo_with_a_local_model_exits_cleanly(tmp_path):
    """`memos demo --model <server's model>` in its own process: exit 0 (it aborted with exit 134,
    "terminate called without an active exception", when a manager run was still embedding at exit)."""
    pytest.importorskip("openai")
    with serve_stub() as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "local", "COLUMNS": "200",
               "TMPDIR": str(tmp_path)}  # the demo's default store is a fresh temp dir, kept for `memos inspect`
        run = subprocess.run([sys.executable, "-m", "memos.cli", "demo", "--model", "openai-chat:llama3.2", "--steps", "2"],
                             capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "terminate called" not in run.stderr and "Recall from memory" in run.stdout


# -- benchmarks a newcomer can reproduce ------------------------------------------------------

def _locomo_sample(sample_id: str, text: str, question: str) -> dict:
    turns = [{"speaker": "Ana", "dia_id": "D1:1", "text": text}, {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice!"}]
    return {"sample_id": sample_id, "conversation": {"speaker_a": "Ana", "speaker_b": "Ben", "session_1": turns,
                                                     "session_1_date_time": "1:56 pm on 8 May, 2023"},
            "qa": [{"question": question, "answer": "x", "evidence": ["D1:1"], "category": 4}]}


def test_bench_retrieval_says_where_locomo_comes_from_and_takes_samples(local, tmp_path):
    out = runner.invoke(app, ["bench", "retrieval", str(tmp_path / "locomo10.json")])
    assert out.exit_code == 2 and "github.com/snap-research/locomo" in flat(out.output) and "not shipped" in out.output
    assert "snap-research/locomo" in flat(runner.invoke(app, ["bench", "retrieval", "--help"]).output)
    data = tmp_path / "mini.json"
    data.write_text(json.dumps([_locomo_sample("conv-a", "I adopted a greyhound called Comet", "What dog did Ana adopt?"),
                                _locomo_sample("conv-b", "I sold my old piano", "What did Ana sell?")]))
    report = runner.invoke(app, ["bench", "retrieval", str(data), "--sample", "conv-b", "--json", str(tmp_path / "r.json")])
    assert report.exit_code == 0, report.output
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["conversations"] == 1 and result["questions"] == 1 and result["turns"] == 2
    wrong = runner.invoke(app, ["bench", "retrieval", str(data), "--sample", "conv-z"])
    assert wrong.exit_code == 2 and "no conversation conv-z" in flat(wrong.output) and "conv-a, conv-b" in wrong.output
