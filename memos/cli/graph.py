"""`memos inspect graph`: an entity's neighbourhood, or a user's whole graph, as text, Mermaid or DOT."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from memos._sync import run_sync
from memos.exceptions import RecordNotFoundError
from memos.store.scope import Scope

from ._app import DbOption, JsonOption, UserOption, console, emit_json, fail, guarded, open_existing
from .jobs import inspect_app


@inspect_app.command("graph")
@guarded
def graph(
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    entity: Annotated[str | None, typer.Option(help="Show this entity's neighbourhood (name or alias).")] = None,
    at: Annotated[str | None, typer.Option(help="Relations true at this ISO date (default: now).")] = None,
    fmt: Annotated[Literal["text", "mermaid", "dot"], typer.Option("--format", help="text, mermaid or dot.")] = "text",
    as_json: JsonOption = False,
) -> None:
    """Entities and relations of a user: what is true now (or at --at), drawn as text, Mermaid or DOT."""
    from memos.graph.entities import to_dot, to_mermaid

    memory = open_existing(db, embedder=None)
    scope = Scope(user)
    when = None
    if at:
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            fail(f"--at {at!r} is not an ISO date (e.g. 2024-05-01)")
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if entity:
        try:
            hood = run_sync(memory.graph.neighbourhood(scope, entity, at=when))
        except RecordNotFoundError as exc:
            fail(str(exc))
        entities, relations = [hood.entity, *hood.neighbours], hood.relations
    else:
        entities = run_sync(memory.graph.entities(scope))
        relations = run_sync(memory.graph.relations(scope, at=when))
    if not entities and not relations:  # say what was looked at, on stderr (stdout stays the graph)
        held = sum(run_sync(memory.counts(scope)).values())
        console.print(escape(f"the graph of user {user} is empty: no entities or relations"
                             + (f" among the user's {held} records" if held else f"; nothing is stored for user {user}")), soft_wrap=True)
    if as_json:
        emit_json({"entities": [e.model_dump(mode="json", exclude={"text"}) for e in entities],
                   "relations": [r.model_dump(mode="json", exclude={"text"}) for r in relations]})
    elif fmt == "mermaid":
        typer.echo(to_mermaid(entities, relations))
    elif fmt == "dot":
        typer.echo(to_dot(entities, relations))
    else:
        for e in entities:
            typer.echo(f"{e.render()}  [{len(e.mentions)} mentions]")
        for r in relations:
            typer.echo(f"  {r.render()}")
