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

A shared server meets an unbounded number of keys, so at most `max_servers` servers live at once:
a key that needs one past that stops the least recently used server with no request in flight
(a revoked key's server ages out the same way), and the stopped key's next request builds it again.
"""

from __future__ import annotations

import importlib.util
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.requests import Request
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from memos.keyed_locks import KeyedLocks
from memos.store.scope import Scope

from .deps import Caller, get_caller
from .errors import ApiError

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["MAX_SERVERS", "MCP_PATH", "McpEndpoint"]

MCP_PATH = "/mcp"
MCP_SESSION = "mcp"
"""The session id of the scope the MCP tools write conversation state under (as `memos mcp` does)."""
MAX_SERVERS = 64
"""Keys' MCP servers one process keeps running at once. It trades memory for rebuilds: a server
holds its key's open memory session (a few hundred KiB), and a key whose server was stopped waits
for a new one (a read of the store) on its next request. 64 is more keys than one process serves
in the same moment, and keeps the servers to tens of MiB however many keys have ever connected."""

_Where = tuple[Scope, str]
"""A key's MCP server is decided by its session scope and actor."""
K = TypeVar("K", bound=Hashable)


@dataclass
class _Live:
    """A started session manager, the scope that stops it, and its requests in flight (never stopped while any)."""

    manager: StreamableHTTPSessionManager
    stop: anyio.CancelScope
    in_flight: int = 0


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticates each request and hands it to its key's MCP server."""

    def __init__(self, max_servers: int = MAX_SERVERS) -> None:
        if max_servers < 1:
            raise ValueError(f"max_servers must be at least 1, not {max_servers}")
        self.available = importlib.util.find_spec("mcp") is not None
        self.max_servers = max_servers
        """Servers kept at once; past it, idle ones stop least recently used first (busy ones never)."""
        self._live: OrderedDict[_Where, _Live] = OrderedDict()  # least recently used first
        self._building: KeyedLocks[_Where] = KeyedLocks()  # per key: a build awaits the store, other keys' need not wait
        self._tasks: TaskGroup | None = None

    @property
    def servers(self) -> int:
        """Servers running now (past `max_servers` only while every one has a request in flight)."""
        return len(self._live)

    @asynccontextmanager
    async def running(self, _app: Any = None) -> AsyncIterator[None]:
        """The app's lifespan: the servers' session managers run inside it and stop with it."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                self._live.clear()
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
        live = await self._checkout(caller, self._tasks)
        try:
            await live.manager.handle_request(scope, receive, send)
        finally:
            live.in_flight -= 1
            self._trim()  # servers kept past the bound while all were busy

    async def _checkout(self, caller: Caller, tasks: TaskGroup) -> _Live:
        """The caller's key's server, counted in flight; built and started if its key has none."""
        actor = f"mcp:{caller.key.name or caller.key.key_id}"
        where = (caller.session_scope(MCP_SESSION), actor)
        live = self._take(where)
        if live is None:
            async with self._building.hold(where):  # concurrent first requests of a key build one server
                live = self._take(where)
                if live is None:
                    manager, stop = await _start_manager(caller, where[0], actor, tasks)
                    live = self._live[where] = _Live(manager, stop, in_flight=1)
                    self._trim()
        return live

    def _take(self, where: _Where) -> _Live | None:
        """The key's server if it runs, counted in flight at once (no await between: it cannot be stopped first)."""
        live = self._live.get(where)
        if live is not None:
            live.in_flight += 1
            self._live.move_to_end(where)
        return live

    def _trim(self) -> None:
        if len(self._live) <= self.max_servers:
            return
        for where in _idle_overflow({w: live.in_flight for w, live in self._live.items()}, self.max_servers):
            self._live.pop(where).stop.cancel()


def _idle_overflow(in_flight: Mapping[K, int], bound: int) -> list[K]:
    """Which to stop so that at most `bound` remain: the first idle ones of `in_flight` (least
    recently used first). Busy ones are never chosen, so this may leave more than `bound`."""
    excess = len(in_flight) - bound
    if excess <= 0:
        return []
    return [k for k, busy in in_flight.items() if not busy][:excess]


async def _start_manager(caller: Caller, scope: Scope, actor: str, tasks: TaskGroup) -> tuple[StreamableHTTPSessionManager, anyio.CancelScope]:
    """A new server for the key, its session manager started in `tasks`, and the scope that stops it."""
    from mcp.server.transport_security import TransportSecuritySettings

    from memos.mcp.server import build_server

    server = await build_server(caller.memory, scope, actor=actor)
    # every request must carry a key, which a rebinding page cannot know: no Host/Origin allow-list
    # (the server is often behind a proxy, under a name of its own)
    server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    manager = server.session_manager
    stop = await tasks.start(_run_manager, manager)
    return manager, stop


async def _run_manager(manager: StreamableHTTPSessionManager, *,
                       task_status: TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED) -> None:
    # cancelling `stop` leaves run() as the lifespan's end would; a manager runs once, so a key whose
    # server was stopped gets a new one
    with anyio.CancelScope() as stop:
        async with manager.run():
            task_status.started(stop)
            await anyio.sleep_forever()


async def _refuse(send: Send, status: int, message: str) -> None:
    """A JSON-RPC error at an HTTP status: MCP clients show its message (a memos error body they would not)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="memos"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
