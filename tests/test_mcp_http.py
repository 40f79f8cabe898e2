"""The official MCP client against `/mcp` of a real `memos serve` on loopback: the key decides the
scope. The last tests drive one `McpEndpoint` in-process to see how many keys' servers it keeps."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from _loopback import LoopbackServer
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memos.serve import ServeConfig, create_app
from memos.serve.mcp_http import McpEndpoint

ADMIN = "admin-key-for-tests-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("mcp-http") / "db"
    db.mkdir()
    with LoopbackServer(str(db)) as running:
        yield running


@asynccontextmanager
async def Mcp(url: str, token: str, app: Any = None) -> AsyncIterator[ClientSession]:  # noqa: N802 - read like the client classes it wraps
    """An initialized MCP client session over streamable HTTP with one API key (to the ASGI `app` if given)."""
    transport = None if app is None else httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120, transport=transport) as http, \
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


class Endpoint:
    """One `McpEndpoint` of a bound of our choosing, in front of a real app's store and keys, as an
    ASGI app (the transport returns once the endpoint is done with a request, so the count of its
    servers is settled when a response arrives); it notes the count as each response starts."""

    def __init__(self, mem, max_servers: int) -> None:
        self.app = create_app(ServeConfig(memory=mem, admin_key=ADMIN))
        self.endpoint = McpEndpoint(max_servers=max_servers)
        self.at_responses: list[int] = []

    async def __call__(self, scope, receive, send) -> None:
        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                self.at_responses.append(self.endpoint.servers)
            await send(message)
        await self.endpoint({**scope, "app": self.app}, receive, sending)

    async def keys(self, *users: str) -> list[str]:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app), base_url="http://memos") as http:
            made = [await http.post("/admin/keys", json={"user_id": u}, headers={"Authorization": f"Bearer {ADMIN}"}) for u in users]
        return [r.json()["token"] for r in made]


def managers_running(caplog) -> int:
    """Session managers the SDK logged starting, less those it logged stopping."""
    said = [r.getMessage() for r in caplog.records if r.name == "mcp.server.streamable_http_manager"]
    return said.count("StreamableHTTP session manager started") - said.count("StreamableHTTP session manager shutting down")


async def test_at_most_max_servers_run_and_a_stopped_keys_server_comes_back_in_its_scope(mem, caplog):
    """Bound 2, three keys in turn: after every request at most two servers run (and the SDK saw the
    least recently used one's manager stop); the first key's next request gets a new server that
    finds its own memory and no other key's."""
    caplog.set_level(logging.INFO, logger="mcp.server.streamable_http_manager")
    served = Endpoint(mem, max_servers=2)
    ann, ben, cat = await served.keys("ann", "ben", "cat")
    async with served.endpoint.running():
        for token, name, boat in ((ann, "Ann", "Osprey"), (ben, "Ben", "Kestrel"), (cat, "Cat", "Merlin")):
            async with Mcp("http://memos", token, app=served) as client:
                added = await client.call_tool("memory_add", {"store": "semantic", "fields": {"subject": name, "summary": f"{name}'s boat is the {boat}"}})
                assert not added.is_error, text(added)
            assert served.endpoint.servers <= 2 and max(served.at_responses) <= 2
        with anyio.fail_after(10):  # a stopped manager leaves run() when its task next runs
            while managers_running(caplog) != 2:
                await anyio.sleep(0.01)
        assert served.endpoint.servers == 2
        async with Mcp("http://memos", ann, app=served) as client:
            found = text(await client.call_tool("memory_search", {"query": "boat"}))
        assert "Ann's boat is the Osprey" in found and "Kestrel" not in found and "Merlin" not in found
        assert served.endpoint.servers == 2 and max(served.at_responses) <= 2


async def test_a_request_in_flight_is_never_stopped_and_the_bound_holds_again_after(mem):
    """Bound 1: while ann's request is in flight (its server is reading a body the test holds back),
    ben's first request gets a server of its own rather than stop ann's; ann's request then
    completes and saves, and once no request is in flight one server is left."""
    served = Endpoint(mem, max_servers=1)
    ann, ben = await served.keys("ann", "ben")
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "memory_add", "arguments": {"store": "semantic", "fields": {"subject": "Ann", "summary": "Ann's boat is the Osprey"}}}}
    reading, release = anyio.Event(), anyio.Event()
    asked = 0

    async def receive() -> dict:
        nonlocal asked
        asked += 1
        if asked > 1:  # the body was whole: a client that stays connected
            await anyio.sleep_forever()
        reading.set()
        await release.wait()
        return {"type": "http.request", "body": json.dumps(call).encode(), "more_body": False}

    answer: list[dict] = []

    async def send(message) -> None:
        answer.append(message)

    headers = [(b"host", b"memos"), (b"authorization", f"Bearer {ann}".encode()), (b"content-type", b"application/json"),
               (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", b"2025-06-18")]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mcp", "raw_path": b"/mcp", "root_path": "", "query_string": b"", "headers": headers,
             "server": ("memos", 80), "client": ("127.0.0.1", 1)}
    async with served.endpoint.running():
        with anyio.fail_after(60):
            async with anyio.create_task_group() as requests:
                requests.start_soon(served, scope, receive, send)
                await reading.wait()  # ann's request is in flight in its server
                assert served.endpoint.servers == 1
                async with Mcp("http://memos", ben, app=served) as client:
                    assert "<persona" in text(await client.call_tool("core_block_read", {}))
                assert served.at_responses and set(served.at_responses) == {2}  # past the bound while ann's was in flight
                release.set()
        start, body = answer[0], b"".join(m.get("body", b"") for m in answer[1:])
        assert start["status"] == 200, body
        result = json.loads(body)
        assert result["id"] == 7 and not result["result"]["isError"] and "saved semantic" in result["result"]["content"][0]["text"]
        assert served.endpoint.servers == 1
        async with Mcp("http://memos", ann, app=served) as client:
            assert "Ann's boat is the Osprey" in text(await client.call_tool("memory_search", {"query": "boat"}))
