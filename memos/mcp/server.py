"""An MCP server over a memos store: any MCP client can search and write one scope's memory.

    memos mcp --db memory --user alice [--agent assistant]

The scope is fixed by the server's options; a client cannot choose another user. With
`--agent`, the tools see that agent's records and the user's shared ones (written without an
agent, e.g. by `memos ingest` without `--agent`); without it, the shared records alone, and
writes are shared (`memos.store.scope`). The tools
are the agents' own memory tools (same validation, same errors), exposed over stdio with the
official `mcp` SDK: `memory_search`, `memory_add`, `core_block_read`, `core_memory_append`,
`core_memory_replace`, `core_memory_rethink`, `conversation_search`. Misuse comes back as an
MCP tool error whose text says what to fix; nothing is changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic_ai import ModelRetry

from memos.context.session import MemorySession
from memos.memory import MemoryOS
from memos.store.scope import Scope

__all__ = ["EXPOSED_TOOLS", "build_server", "serve"]

EXPOSED_TOOLS = {"memory_search": "memory_search", "memory_insert": "memory_add", "conversation_search": "conversation_search",
                 "core_memory_append": "core_memory_append", "core_memory_replace": "core_memory_replace",
                 "core_memory_rethink": "core_memory_rethink"}
"""Agent tool name -> MCP tool name (vault tools are not exposed: reveal needs an interactive approval)."""


def _wrap(function: Any, name: str, description: str) -> Any:
    async def call(**kwargs: Any) -> str:
        try:
            return await function(**kwargs)
        except ModelRetry as exc:
            raise ToolError(str(exc)) from None

    call.__name__ = name
    call.__doc__ = description
    # what inspect.signature (and so the MCP schema) reads: the wrapped tool's parameters
    call.__signature__ = __import__("inspect").signature(function)  # type: ignore[attr-defined]  # PEP 362 attribute typeshed omits
    call.__annotations__ = dict(getattr(function, "__annotations__", {}))
    return call


async def build_server(memory: MemoryOS, scope: Scope, *, actor: str = "mcp") -> MCPServer:
    """An MCP server whose tools act on `scope` of `memory` (its writes' history names `actor`)."""
    from memos.agents.deps import MemoryDeps
    from memos.agents.tools import memory_toolset

    session = await MemorySession.open(memory, scope)
    tools = memory_toolset(MemoryDeps(session, actor=actor), reveal=False).tools
    server = MCPServer(name="memos", instructions=f"Long-term memory of user {scope.user_id!r} (memos).")
    for agent_name, mcp_name in EXPOSED_TOOLS.items():
        tool = tools[agent_name]
        server.tool(name=mcp_name, description=tool.description)(_wrap(tool.function, mcp_name, tool.description or ""))

    @server.tool(name="core_block_read", description="Read the core memory blocks (label, value, used/limit characters).")
    async def core_block_read(label: str | None = None) -> str:
        blocks = await session.core.blocks()
        chosen = [b for b in blocks if label in (None, "", b.label)]
        if label and not chosen:
            raise ToolError(f"there is no core block {label!r}; the blocks are {[b.label for b in blocks]}")
        return "\n\n".join(f"<{b.label} chars={len(b.value)}/{b.limit}>\n{b.value}" for b in chosen)

    return server


async def serve(db: str | Path, user: str, agent: str | None = None, session: str = "mcp", embedder: Any = "local") -> None:
    """Run the server on stdio until the client disconnects."""
    memory = await MemoryOS.open(db, embedder=embedder)
    server = await build_server(memory, Scope(user, agent or "", session))
    await server.run_stdio_async()
