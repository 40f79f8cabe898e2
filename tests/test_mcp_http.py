"""The official MCP client against `/mcp` of a real `memos serve` on loopback: the key decides the scope."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
from _loopback import LoopbackServer
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("mcp-http") / "db"
    db.mkdir()
    with LoopbackServer(str(db)) as running:
        yield running


@asynccontextmanager
async def Mcp(url: str, token: str) -> AsyncIterator[ClientSession]:  # noqa: N802 - read like the client classes it wraps
    """An initialized MCP client session over streamable HTTP with one API key."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http, \
            streamable_http_client(url + "/mcp", http_client=http) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


def text(result) -> str:
    return "\n".join(part.text for part in result.content)


def messages(exc: BaseException) -> str:
    """Every message in an exception and the groups it is nested in (the client raises from task groups)."""
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(messages(e) for e in exc.exceptions)
    return str(exc)


async def test_a_client_lists_the_tools_adds_and_searches_memory(server):
    async with Mcp(server.url, server.make_key("carol")) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"memory_search", "memory_add", "core_block_read", "core_memory_append", "conversation_search"} <= names
        assert "vault_reveal" not in names
        added = await client.call_tool("memory_add", {"store": "semantic", "fields": {"subject": "Carol", "summary": "Carol's bike is a blue Brompton"}})
        assert not added.is_error and "saved semantic" in text(added)
        found = await client.call_tool("memory_search", {"query": "Brompton bike"})
        assert "blue Brompton" in text(found)
        bad = await client.call_tool("memory_add", {"store": "recipes", "fields": {}})
        assert bad.is_error and "unknown store" in text(bad)
        assert "<persona" in text(await client.call_tool("core_block_read", {}))


async def test_two_users_keys_each_see_only_their_own_memory(server):
    alice, bob = server.make_key("alice"), server.make_key("bob")
    async with Mcp(server.url, alice) as as_alice, Mcp(server.url, bob) as as_bob:
        await as_alice.call_tool("memory_add", {"store": "semantic", "fields": {"subject": "Alice", "summary": "Alice's bike is a green Brompton"}})
        await as_bob.call_tool("memory_add", {"store": "semantic", "fields": {"subject": "Bob", "summary": "Bob's bike is a red Brompton"}})
        await as_alice.call_tool("core_memory_append", {"label": "human", "text": "Alice likes tea"})
        seen_by_alice = text(await as_alice.call_tool("memory_search", {"query": "Brompton bike"}))
        seen_by_bob = text(await as_bob.call_tool("memory_search", {"query": "Brompton bike"}))
        assert "green Brompton" in seen_by_alice and "red" not in seen_by_alice
        assert "red Brompton" in seen_by_bob and "green" not in seen_by_bob
        assert "Alice likes tea" not in text(await as_bob.call_tool("core_block_read", {"label": "human"}))
    # the writes landed in each key's user, as the HTTP API sees them
    for token, user, summary in ((alice, "alice", "Alice's bike is a green Brompton"), (bob, "bob", "Bob's bike is a red Brompton")):
        records = httpx2.get(server.url + "/v1/stores/semantic", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()["records"]
        assert [(r["user_id"], r["summary"]) for r in records] == [(user, summary)]


async def test_an_unknown_missing_or_revoked_key_gets_401(server):
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({"Authorization": "Bearer mk_not_a_key"}, {}):
        r = httpx2.post(server.url + "/mcp", json=hello, headers={**accept, **headers}, timeout=30)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert "API key" in r.json()["error"]["message"]
    with pytest.raises(BaseException) as refused:  # the official client says why
        async with Mcp(server.url, "mk_not_a_key"):
            pass
    assert "unknown or revoked" in messages(refused.value)
    token = server.make_key("dave")
    async with Mcp(server.url, token) as client:
        assert not (await client.call_tool("core_block_read", {})).is_error
        admin = {"Authorization": f"Bearer {server.admin_key}"}
        keys = httpx2.get(server.url + "/admin/keys", params={"user_id": "dave"}, headers=admin, timeout=30).json()["keys"]
        assert httpx2.delete(server.url + f"/admin/keys/{keys[0]['key_id']}", headers=admin, timeout=30).status_code < 300
        r = httpx2.post(server.url + "/mcp", json=hello, headers={**accept, "Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code == 401
        with pytest.raises(BaseException) as refused:
            await client.call_tool("core_block_read", {})
        assert "unknown or revoked" in messages(refused.value)
