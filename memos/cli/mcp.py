"""`memos mcp`: serve a store's memory over MCP (stdio)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from ._app import DbOption, UserOption, app, embedder_choice, fail, guarded


@app.command()
@guarded
def mcp(
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str | None, typer.Option(help="Agent id of the scope.")] = None,
    embedder: Annotated[str, typer.Option(help="'local', 'none' (full-text only) or a pydantic-ai embedding model.")] = "local",
) -> None:
    """Serve one user's memory to MCP clients over stdio (search, add, core blocks, conversation search)."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ModuleNotFoundError:
        fail("`memos mcp` needs the MCP SDK: pip install 'memos-memory[mcp]' (from a clone: pip install -e '.[mcp]')")
    from memos.mcp.server import serve

    asyncio.run(serve(db, user, agent, embedder=embedder_choice(embedder)))
