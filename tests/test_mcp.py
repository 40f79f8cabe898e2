"""A real MCP client session against `memos mcp` over stdio."""

from __future__ import annotations

import os
import sys

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memos import MemoryOS, Scope
from memos.memtypes import Fact


async def test_an_mcp_client_lists_tools_searches_and_adds(tmp_path):
    db = tmp_path / "db"
    mem = await MemoryOS.open(db, embedder=None)
    await mem.add(Scope("alice"), Fact(subject="Alice", summary="Alice's bike is a green Brompton"))
    await mem.add(Scope("bob"), Fact(subject="Bob", summary="Bob's bike is a red Brompton"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "memos.cli", "mcp", "--db", str(db), "--user", "alice",
                                                                       "--embedder", "none"],
                                   env={**os.environ, "LANCE_LOG": "error"})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"memory_search", "memory_add", "core_block_read", "core_memory_append", "conversation_search"} <= names
        assert "vault_reveal" not in names
        found = await client.call_tool("memory_search", {"query": "Brompton bike"})
        text = found.content[0].text
        assert "green Brompton" in text and "red" not in text  # the server's scope only
        added = await client.call_tool("memory_add", {"store": "semantic", "fields": {"subject": "Alice", "summary": "Alice rides to work"}})
        assert not added.is_error and "saved semantic" in added.content[0].text
        bad = await client.call_tool("memory_add", {"store": "recipes", "fields": {}})
        assert bad.is_error and "unknown store" in bad.content[0].text
        blocks = await client.call_tool("core_block_read", {})
        assert "<persona" in blocks.content[0].text
    facts = {f.summary for f in await (await MemoryOS.open(db, embedder=None)).list(Scope("alice"), "semantic")}
    assert facts == {"Alice's bike is a green Brompton", "Alice rides to work"}
