"""The command line says what it did: k hits for `-k`, a version, what an empty search or graph
looked at, an import that stores each turn once, store names whole at 80 columns, and a
serving recipe that runs as pasted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from memos import __version__
from memos.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
DIALOGUE = [("ana", "How is the new job going?"), ("ben", "Busy, I lead the data team now."),
            ("ana", "Did you see the ferry timetable?"), ("ben", "Yes, the ferry leaves at nine."),
            ("ana", "What about the job interview for Lea?"), ("ben", "She starts at the job in June.")]


def _cli(db: str, *args: str):
    out = runner.invoke(app, [*args, "--db", db])
    assert out.exit_code == 0, out.output
    return out


def _chat(tmp_path: Path) -> Path:
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"speaker": s, "text": t, "timestamp": f"2024-05-01T10:0{i}:00", "id": f"D{i}"}) + "\n"
                            for i, (s, t) in enumerate(DIALOGUE)))
    return chat


def test_a_k_search_returns_k_hits_each_with_the_reply_it_got(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db = str(tmp_path / "db")
    _cli(db, "ingest", str(_chat(tmp_path)), "--user", "u")
    hits = json.loads(_cli(db, "search", "new job", "--user", "u", "-k", "2", "--json").stdout)
    assert len(hits) == 2
    replies = [a for h in hits for a in h["attached"]]
    assert replies and all(a["parts"].keys() & {"reply_to", "exchange", "refers_to"} for a in replies)
    text = _cli(db, "search", "new job", "--user", "u", "-k", "2").stdout.splitlines()
    assert sum(not line.startswith(" ") for line in text) == 2 and any("↳" in line for line in text)


def test_version():
    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0 and out.stdout.strip() == f"memos {__version__}"


def test_an_empty_search_or_graph_of_an_unknown_user_says_what_it_looked_at(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db = str(tmp_path / "db")
    _cli(db, "add", "Ann keeps bees", "--user", "ann")
    out = _cli(db, "search", "bees", "--user", "nobody")
    assert out.stdout == "" and "no hits for 'bees': nothing is stored for user nobody" in out.stderr
    out = _cli(db, "inspect", "graph", "--user", "nobody")
    assert out.stdout == "" and "the graph of user nobody is empty: no entities or relations; nothing is stored for user nobody" \
        in " ".join(out.stderr.split())


def test_ingesting_the_same_file_twice_stores_each_turn_once(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db, chat = str(tmp_path / "db"), _chat(tmp_path)
    extra = tmp_path / "ok.jsonl"  # two identical turns without a time in one file are two turns
    extra.write_text('{"speaker": "ana", "text": "ok"}\n{"speaker": "ana", "text": "ok"}\n')

    def turns() -> int:
        return json.loads(_cli(db, "inspect", "stores", "--user", "u", "--json").stdout)["u"]["episodic"]

    assert "stored 6 turns" in _cli(db, "ingest", str(chat), "--user", "u").stderr
    again = _cli(db, "ingest", str(chat), "--user", "u")
    assert "all 6 turns of chat.jsonl are already stored" in " ".join(again.stderr.split()) and turns() == 6
    _cli(db, "ingest", str(extra), "--user", "u")
    _cli(db, "ingest", str(extra), "--user", "u")
    assert turns() == 8
    _cli(db, "ingest", str(chat), "--user", "u", "--agent", "helper")  # another scope holds its own copy
    assert "stored 6 turns" in _cli(db, "ingest", str(chat), "--user", "u", "--allow-duplicates").stderr
    assert turns() == 20


def test_store_names_are_whole_at_80_columns(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    monkeypatch.setenv("COLUMNS", "80")
    db = str(tmp_path / "db")
    for user in ("alice", "bob", "carol", "dave", "erin", "frank"):
        _cli(db, "add", f"{user} keeps bees", "--user", user)
    table = _cli(db, "inspect", "stores").stdout
    assert max(map(len, table.splitlines())) <= 80 and "…" not in table
    for name in ("core", "episodic", "semantic", "procedural", "resource", "vault", "entity", "relation"):
        assert re.search(rf"│ {name} +│", table), table


def test_the_serving_recipe_starts_the_server_last_in_the_foreground():
    [block] = [b for b in re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "serving.md").read_text(), flags=re.S)
               if "memos serve" in b and "keys create" in b]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands[-1].startswith("memos serve") and not commands[-1].endswith("&")  # it blocks: nothing after it runs
    assert any(c.startswith("memos keys create") for c in commands[:-1])
