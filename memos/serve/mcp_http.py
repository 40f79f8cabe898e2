"""MCP over streamable HTTP at `/mcp`: MCP clients share one `memos serve` instead of each spawning `memos mcp`.

Every request carries an API key (`Authorization: Bearer mk_…`), checked as on `/v1`: an unknown
or revoked key gets 401 (a JSON-RPC error whose message says what to do), and the key's scope
decides which MCP server answers. Each key has its own server (the tools of `memos.mcp.server`,
built on its first request, writing with the key as actor), so nothing a client sends can reach
another scope. The servers are stateless and answer in JSON: every request stands alone, so any
process of `memos serve --workers N` (or behind a load balancer) can answer it and a revoked key
is refused on its next request. The servers' session managers run in a task group that the app's
lifespan holds (`McpEndpoint.running`); without the lifespan (an ASGI app driven by hand) `/mcp`
answers 503.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.requests import Request
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from memos.store.scope import Scope

from .deps import Caller, get_caller
from .errors import ApiError

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["MCP_PATH", "McpEndpoint"]

MCP_PATH = "/mcp"
MCP_SESSION = "mcp"
"""The session id of the scope the MCP tools write conversation state under (as `memos mcp` does)."""


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticates each request and hands it to its key's MCP server."""

    def __init__(self) -> None:
        self.available = importlib.util.find_spec("mcp") is not None
        self._managers: dict[tuple[Scope, str], StreamableHTTPSessionManager] = {}
        self._building = anyio.Lock()
        self._tasks: TaskGroup | None = None

    @asynccontextmanager
    async def running(self, _app: Any = None) -> AsyncIterator[None]:
        """The app's lifespan: the servers' session managers run inside it and stop with it."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                self._managers.clear()
                tasks.cancel_scope.cancel()

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if not self.available:
            await _refuse(send, 501, "MCP over HTTP needs the MCP SDK on the server: pip install 'memos-memory[mcp]'")
            return
        try:
            caller = await get_caller(Request(scope, receive))
        except ApiError as exc:
            await _refuse(send, exc.status, exc.message)
            return
        if self._tasks is None:
            await _refuse(send, 503, "MCP is not running: serve the app with its lifespan (memos serve, or uvicorn)")
            return
        manager = await self._manager(caller, self._tasks)
        await manager.handle_request(scope, receive, send)

    async def _manager(self, caller: Caller, tasks: TaskGroup) -> StreamableHTTPSessionManager:
        """The session manager of the caller's key, built and started on its first request."""
        actor = f"mcp:{caller.key.name or caller.key.key_id}"
        where = (caller.session_scope(MCP_SESSION), actor)
        if where not in self._managers:
            async with self._building:
                if where not in self._managers:
                    self._managers[where] = await _start_manager(caller, where[0], actor, tasks)
        return self._managers[where]


async def _start_manager(caller: Caller, scope: Scope, actor: str, tasks: TaskGroup) -> StreamableHTTPSessionManager:
    from mcp.server.transport_security import TransportSecuritySettings

    from memos.mcp.server import build_server

    server = await build_server(caller.memory, scope, actor=actor)
    # every request must carry a key, which a rebinding page cannot know: no Host/Origin allow-list
    # (the server is often behind a proxy, under a name of its own)
    server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    manager = server.session_manager
    await tasks.start(_run_manager, manager)
    return manager


async def _run_manager(manager: StreamableHTTPSessionManager, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    async with manager.run():
        task_status.started()
        await anyio.sleep_forever()


async def _refuse(send: Send, status: int, message: str) -> None:
    """A JSON-RPC error at an HTTP status: MCP clients show its message (a memos error body they would not)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="memos"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
