"""Store commands: ingest, search, reindex."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from memos._sync import run_sync
from memos.store.scope import Scope

from ._app import DbOption, JsonOption, UserOption, app, console, emit_json, fail, guarded, note_empty, open_existing


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


def _is_locomo(path: Path) -> bool:
    if path.suffix.lower() != ".json":
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError:
        return False
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "conversation" in data[0]


def _ingest_document(path: Path, db: Path, scope: Scope) -> None:
    from memos.documents import resources_from_text
    from memos.memory import MemoryOS
    from memos.memtypes import Resource

    raw = path.read_bytes()
    if b"\x00" in raw[:4096]:
        fail(f"{path} looks binary; convert it to text first (memos stores text documents)")
    chunks = resources_from_text(path.name, raw.decode("utf-8", errors="replace"), uri=str(path.resolve()))
    if not chunks:
        fail(f"{path} is empty")
    mem = MemoryOS.open_sync(db)
    uri = chunks[0].uri
    stored = [r for r in mem.list_sync(scope, Resource, limit=None) if r.uri == uri]
    if [r.content for r in sorted(stored, key=lambda r: r.chunk_index)] == [c.content for c in chunks]:
        console.print(f"{path.name} is already stored unchanged in {db} for scope {scope} ({len(chunks)} chunks); nothing to do")
        return
    for old in stored:  # the document changed: its new chunks replace the old ones
        mem.delete_sync(scope, "resource", old.id, actor="ingest")
    if stored:
        console.print(f"replacing the {len(stored)} chunks stored earlier from {path.name}")
    with Progress(console=console) as progress:
        task = progress.add_task(f"ingesting {path.name}", total=len(chunks))
        for start in range(0, len(chunks), 64):
            mem.add_sync(scope, chunks[start : start + 64], actor="ingest")
            progress.advance(task, len(chunks[start : start + 64]))
    console.print(f"stored {path.name} as {len(chunks)} resource chunks in {db} for scope {scope}")


@app.command()
@guarded
def ingest(
    file: Annotated[Path, typer.Argument(help="Messages (.jsonl / .json: {speaker|role, text|content, timestamp?, id?}), a LOCOMO .json, or a text document.")],
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str | None, typer.Option(help="Agent id of the scope.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id of the scope.")] = None,
    batch: Annotated[int | None, typer.Option(min=1, help="Deprecated: ingest writes in its own batches (embedding the next while writing one).")] = None,
    allow_duplicates: Annotated[bool, typer.Option("--allow-duplicates", help="Store every turn even if this scope holds it already from an earlier import.")] = False,
) -> None:
    """Store a file: messages (JSONL / JSON list) or a LOCOMO file as episodic turns, or a text
    document (.txt, .md, ...) as chunked resource memory. Raw mode: no model.

    Importing is idempotent: a turn already stored in the scope by an earlier import (same
    speaker, time, text and message id) is skipped (`memos.import_keys`)."""
    from memos.memory import MemoryOS

    scope = Scope(user, agent, session)
    if not file.exists():
        fail(f"{file} does not exist")
    if file.suffix.lower() not in (".json", ".jsonl"):
        _ingest_document(file, db, scope)
        return
    if _is_locomo(file):
        from memos.bench.locomo import load_locomo

        conversations = load_locomo(file, categories=())
        rows = [m.model_dump(by_alias=False) for c in conversations for m in c.messages]
        console.print(f"LOCOMO file: {len(conversations)} conversations, {len(rows)} turns")
    else:
        rows = _read_messages(file)
    if batch is not None:
        console.print("[yellow]note:[/yellow] --batch is deprecated and ignored: ingest writes in its own batches")
    mem = MemoryOS.open_sync(db)
    skipped = 0
    if not allow_duplicates:
        from memos.import_keys import unstored_turns

        episodes, skipped = run_sync(unstored_turns(mem, scope, rows))
        if not episodes:
            console.print(f"all {len(rows)} turns of {file.name} are already stored in {db} for scope {scope}; nothing to do "
                          "(--allow-duplicates stores them again)")
            return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               TextColumn("[progress.data.speed]{task.fields[rate]}"),
               TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"ingesting {file.name}", total=len(rows) - skipped, rate="")

        def stored(n: int) -> None:  # called once a batch is written: only stored turns count
            progress.advance(task, n)
            speed = progress.tasks[task].speed
            progress.update(task, rate=f"{speed:,.0f} turns/s" if speed else "")

        if allow_duplicates:
            mem.ingest_sync(scope, rows, progress=stored)
        else:
            mem.store_turns_sync(scope, episodes, actor="ingest", progress=stored)
    again = f"; {skipped} turns were already stored and were skipped" if skipped else ""
    console.print(f"stored {len(rows) - skipped} turns in {db} for scope {scope}{again}")


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
    since: Annotated[datetime | None, typer.Option(help="Only memories from this time on (e.g. 2024-05-01).")] = None,
    until: Annotated[datetime | None, typer.Option(help="Only memories up to this time (past facts included).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Hybrid search over a scope's memories."""
    mem = open_existing(db, embedder="local")
    scope = Scope(user, agent, session)
    hits = mem.search_sync(query, scope, types=types, k=k, budget_tokens=budget, since=_aware(since), until=_aware(until))
    if not hits:  # say what was searched and why nothing came back (on stderr: stdout stays the hits)
        note_empty(mem, scope, f"no hits for {query!r}")
    if as_json:
        emit_json([{"store": h.memory_type, "id": h.id, "score": h.score, "text": h.text or h.record.render(),
                    "source_ids": h.source_ids, "parts": h.parts,
                    "attached": [{"id": a.id, "text": a.record.render(), "source_ids": a.source_ids, "parts": a.parts}
                                 for a in h.attached]} for h in hits])
        return
    for h in hits:  # a turn's reply or exchange is part of its hit: indented under it
        first, *rest = h.lines()
        typer.echo(f"{h.score:.4f}  {h.memory_type:<10} {first}")
        for line in rest:
            typer.echo(f"{'':<18}{line}")


@app.command()
@guarded
def reindex(
    store: Annotated[Path | None, typer.Argument(help="Deprecated: use --db.", show_default=False)] = None,
    db: DbOption = Path("memos-data"),
    embedder: Annotated[str, typer.Option(help="'local', a pydantic-ai embedding model string, or 'test' (pydantic-ai's TestEmbeddingModel, for tests).")] = "local",
) -> None:
    """Re-embed every record (after changing embedders, or to add vectors to a full-text-only store)."""
    if store is not None:
        console.print(f"[yellow]note:[/yellow] `memos reindex {store}` is deprecated; use `memos reindex --db {store}`")
        db = store
    mem = open_existing(db, embedder=None)
    with Progress(console=console) as progress:
        task = progress.add_task("re-embedding", total=None)
        done = run_sync(mem.reindex(embedder, progress=lambda n, total: progress.update(task, completed=n, total=total)))
    console.print(f"re-embedded {done} records in {db} with {mem.embedder.name}")


ADDABLE = {"semantic": "a fact (--subject names who or what it is about)", "episodic": "an event",
           "procedural": "a how-to", "resource": "a note or document (--title)"}


@app.command()
@guarded
def add(
    text: Annotated[str, typer.Argument(help="What to remember.")],
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str | None, typer.Option(help="Agent id of the scope.")] = None,
    store: Annotated[str, typer.Option("--type", "-t", help="semantic (default), episodic, procedural or resource.")] = "semantic",
    subject: Annotated[str | None, typer.Option(help="Who or what a fact is about (semantic; default: the user).")] = None,
    title: Annotated[str | None, typer.Option(help="Title of a resource (default: the text's start).")] = None,
    importance: Annotated[float, typer.Option(min=0.0, max=1.0, help="0-1: how much it matters.")] = 0.5,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="Tags (repeatable).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Remember one thing now: a fact, an event, a how-to or a note (raw mode: no model)."""
    from memos.memtypes import Episode, Fact, MemoryRecord, Procedure, Resource

    record: MemoryRecord
    if store == "semantic":
        record = Fact(subject=subject or user, summary=text, importance=importance, tags=tags or [])
    elif store == "episodic":
        record = Episode(summary=text, actor=user, event_type="observation", importance=importance, tags=tags or [])
    elif store == "procedural":
        record = Procedure(summary=text, importance=importance, tags=tags or [])
    elif store == "resource":
        record = Resource(title=title or text[:60], content=text, summary=text[:200], resource_type="other",
                          importance=importance, tags=tags or [])
    else:
        fail(f"memos add stores into {', '.join(ADDABLE)}; not {store!r}")
    from memos.memory import MemoryOS

    mem = MemoryOS.open_sync(db)
    [stored] = mem.add_sync(Scope(user, agent), record, actor="cli")
    if as_json:
        emit_json({"store": stored.memory_type, "id": stored.id, "text": stored.render()})
        return
    console.print(f"stored {stored.memory_type} {stored.id} in {db} for user {user!r}: {stored.render()}")


def _aware(value: datetime | None) -> datetime | None:
    """A time typed on the command line without a zone is taken as UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value
