"""`memos init` and `memos inspect stores|core|record|context` (jobs: see `memos.cli.jobs`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Column, Table

from memos._sync import run_sync
from memos.store.scope import Scope

from ._app import DbOption, JsonOption, UserOption, app, console, embedder_choice, emit_json, fail, guarded, note_unseen, open_existing
from .jobs import inspect_app

if TYPE_CHECKING:
    from memos.memory import MemoryOS

out = Console()
AgentOpt = Annotated[str | None, typer.Option(help="Agent id of the scope.")]
EmbedderOpt = Annotated[str, typer.Option(help="'local', 'none' or a pydantic-ai embedding model.")]


def _open(db: Path, embedder: str = "none") -> MemoryOS:
    return open_existing(db, embedder=embedder_choice(embedder))


@app.command()
@guarded
def init(
    db: Annotated[Path, typer.Argument(help="Where to create the store (a directory or LanceDB URI).")] = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str, typer.Option(help="Agent id for the default core blocks.")] = "assistant",
    embedder: EmbedderOpt = "local",
) -> None:
    """Create a store with its tables, vault key and default core blocks, and say what to do next."""
    from memos.context.core_memory import CoreMemory
    from memos.memory import MemoryOS

    memory = MemoryOS.open_sync(db, embedder=embedder_choice(embedder))
    blocks = run_sync(CoreMemory(memory, Scope(user, agent)).blocks())
    memory.cipher()
    console.print(f"created {db}: stores {', '.join(memory.type_names)}; core blocks {[b.label for b in blocks]}; "
                  f"vault key {memory.key_file}")
    console.print(f"next: memos chat --db {db} --user {user} --model openai:gpt-4o-mini   ·   memos inspect stores --db {db}")


@inspect_app.command("stores")
@guarded
def stores(db: DbOption = Path("memos-data"), user: Annotated[str | None, typer.Option("--user", "-u")] = None,
           as_json: JsonOption = False) -> None:
    """Records per store, per user (or for one user)."""
    memory = _open(db)
    users = [user] if user else sorted({r["user_id"] for name in memory.type_names
                                        for r in run_sync(memory.storage.rows(name, None, columns=["user_id"]))})
    counts = {u: memory.counts_sync(Scope(u)) for u in users}
    if as_json:
        emit_json(counts)
        return
    # one row per store, one column per user: a store's name is never cut, however narrow the terminal
    if not users:
        console.print(f"no records in {db}")
        return
    table = Table("store", *(Column(u, justify="right") for u in users))
    table.columns[0].min_width = max(map(len, memory.type_names))
    table.columns[0].no_wrap = True
    for name in memory.type_names:
        table.add_row(name, *(str(counts[u][name]) for u in users))
    out.print(table)


@inspect_app.command("core")
@guarded
def core(db: DbOption = Path("memos-data"), user: UserOption = "default", agent: AgentOpt = None, as_json: JsonOption = False) -> None:
    """The core blocks of a user's agent, with used/limit characters."""
    from memos.context.core_memory import CoreMemory

    memory = _open(db)
    blocks = run_sync(CoreMemory(memory, Scope(user, agent)).blocks())
    if as_json:
        emit_json([{"label": b.label, "value": b.value, "used": len(b.value), "limit": b.limit, "read_only": b.read_only} for b in blocks])
        return
    for b in blocks:
        out.print(f"[bold]{b.label}[/bold] {len(b.value)}/{b.limit}{' (read-only)' if b.read_only else ''}\n{b.value}\n")


@inspect_app.command("record")
@guarded
def record(record_id: Annotated[str, typer.Argument(help="The record id.")], db: DbOption = Path("memos-data"),
           user: UserOption = "default", as_json: JsonOption = False) -> None:
    """One record (any store) of a user, with its history."""
    memory = _open(db)
    scope = Scope(user)
    found = None
    for name in memory.type_names:
        try:
            found = memory.get_sync(scope, name, record_id)
            break
        except LookupError:
            continue
    if found is None:
        fail(f"no record {record_id!r} for user {user!r}")
    history = memory.history_sync(scope, record_id)
    if as_json:
        emit_json({"store": found.memory_type, "record": found.model_dump(mode="json"),
                   "history": [{"op": e.op, "at": e.at, "actor": e.actor, "note": e.note} for e in history]})
        return
    out.print(f"[bold]{found.memory_type}[/bold] {found.id}: {found.render()}")
    for e in history:
        out.print(f"  {e.at:%Y-%m-%d %H:%M:%S}  {e.op:<10} by {e.actor}{'  ' + e.note if e.note else ''}")


@inspect_app.command("context")
@guarded
def context(
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str, typer.Option(help="Agent id of the scope (as `memos chat`).")] = "assistant",
    session: Annotated[str, typer.Option(help="Session id.")] = "default",
    message: Annotated[str | None, typer.Option(help="Compile as if this message had just arrived (nothing is stored).")] = None,
    budget: Annotated[int, typer.Option(min=256)] = 4000,
    embedder: EmbedderOpt = "local",
    as_json: JsonOption = False,
) -> None:
    """The compiled context of a scope, with a token bar per section."""
    memory = _open(db, embedder)
    sess = memory.session_sync(Scope(user, agent, session), budget=budget)
    if not sess.context and not message:
        fail(f"session {session!r} of user {user!r} and agent {agent!r} has no turns yet; pass --message to compile for one")
    ctx = run_sync(sess.preview(message) if message else sess.compile())
    if not ctx.sections.get("memories"):
        note_unseen(memory, sess.retrieval_scope, "memories")
    if as_json:
        emit_json({"sections": ctx.sections, "total": ctx.total_tokens, "budget": ctx.budget, "system_prompt": ctx.system_prompt,
                   "turns": [t.render() for t in ctx.recent_turns]})
        return
    for name, tokens in ctx.sections.items():
        bar = "█" * round(40 * tokens / ctx.budget)
        out.print(f"{name:>12} {tokens:>6}  [cyan]{bar}[/cyan]")
    out.print(f"{'total':>12} {ctx.total_tokens:>6} / {ctx.budget}")

