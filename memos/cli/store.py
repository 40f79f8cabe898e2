"""Store commands: ingest, search, reindex."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from .._sync import run_sync
from ..os import MemoryOS
from ..scope import Scope
from ._app import DbOption, JsonOption, UserOption, app, console, emit_json, fail, guarded


def _read_messages(path: Path) -> list[dict]:
    if not path.exists():
        fail(f"{path} does not exist")
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    fail(f"{path}:{n}: not valid JSON ({exc.msg})")
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{path}: not valid JSON ({exc.msg}); give a .jsonl of messages or a JSON list")
    if not isinstance(data, list):
        fail(f"{path}: expected a JSON list of messages")
    return data


@app.command()
@guarded
def ingest(
    file: Annotated[Path, typer.Argument(help="JSONL (or JSON list) of messages: {speaker|role, text|content, timestamp?, id?}.")],
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str | None, typer.Option(help="Agent id of the scope.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id of the scope.")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Messages per write.")] = 256,
) -> None:
    """Store conversation turns as episodic memories (raw mode, no model)."""
    rows = _read_messages(file)
    scope = Scope(user, agent, session)
    mem = MemoryOS.open_sync(db)
    with Progress(console=console) as progress:
        task = progress.add_task(f"ingesting {file.name}", total=len(rows))
        for start in range(0, len(rows), batch):
            mem.ingest_sync(scope, rows[start : start + batch])
            progress.advance(task, len(rows[start : start + batch]))
    console.print(f"stored {len(rows)} turns in {db} for scope {scope}")


@app.command()
@guarded
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str | None, typer.Option(help="Agent id of the scope.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id of the scope.")] = None,
    types: Annotated[list[str] | None, typer.Option("--type", "-t", help="Limit to these stores.")] = None,
    k: Annotated[int, typer.Option("-k", min=1, max=1000)] = 10,
    budget: Annotated[int | None, typer.Option(help="Pack hits into this many tokens.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Hybrid search over a scope's memories."""
    mem = MemoryOS.open_sync(db)
    hits = mem.search_sync(query, Scope(user, agent, session), types=types, k=k, budget_tokens=budget)
    if as_json:
        emit_json([{"store": h.memory_type, "id": h.id, "score": h.score, "text": h.text or h.record.render(),
                    "source_ids": h.source_ids, "parts": h.parts} for h in hits])
        return
    for h in hits:
        typer.echo(f"{h.score:.4f}  {h.memory_type:<10} {h.text or h.record.render()}")


@app.command()
@guarded
def reindex(
    db: Annotated[Path, typer.Argument(help="The memos store to re-embed.")],
    embedder: Annotated[str, typer.Option(help="'local' or a pydantic-ai embedding model string.")] = "local",
) -> None:
    """Re-embed every record (after changing embedders, or to add vectors to a full-text-only store)."""
    mem = MemoryOS.open_sync(db, embedder=None)
    done = run_sync(mem.reindex(embedder))
    console.print(f"re-embedded {done} records in {db} with {mem.embedder.name}")
