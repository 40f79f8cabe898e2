"""The ASGI app: the routers, the body limit and the health check over one store.

`create_app(ServeConfig(uri=...))` builds a FastAPI app over one `MemoryOS` (opened on the
first request, on the server's own event loop, since LanceDB handles belong to the loop that
opened them). Every `/v1` route acts in the scope of the caller's API key (`Caller`); `/admin`
routes need the admin key; `/ui` is the web view; `/mcp` serves the same memory to MCP clients
(`mcp_http`); `/openapi.json` describes it all and `/docs` renders that.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import FastAPI, Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from memos.sentence_encoder import THREADS_ENV, set_encode_threads

from .deps import STORE_THREADS_ENV, Caller, ServeConfig, ServerState, get_caller, get_state, require_admin
from .errors import error_body, install_error_handlers
from .mcp_http import MCP_PATH, McpEndpoint
from .schemas import HealthOut

__all__ = ["BodyLimit", "Caller", "ServeConfig", "ServerState", "cap_store_threads", "create_app", "get_caller", "get_state", "require_admin"]


class BodyLimit:
    """ASGI middleware: refuse a body past `limit` bytes (413) before a route reads any of it.

    The bytes that arrive are counted, whatever Content-Length says or when there is none (a
    chunked body): the body is read here, at most `limit` bytes kept, and handed to the route
    only once it is known to fit."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was whole: nothing to answer
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:  # the server drops the rest of the body as it arrives
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            return whole.pop() if whole else await receive()  # then what comes after the body (a disconnect)

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        message = (f"the request body is over {self.limit:,} bytes; send fewer records per request "
                   "or split a long document into several resource records")
        await _send_json(send, 413, error_body("body_too_large", message))


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


DRAIN_SECONDS = 30.0
"""How long a stopping server waits for running extraction jobs (the rest are recorded as failed)."""


@contextlib.contextmanager
def _encoder_threads(threads: int | None) -> Iterator[None]:
    """`ServeConfig.encoder_threads` in the environment, which `memos.sentence_encoder.encode_threads`
    reads on every call, while the app runs; what was there before, after."""
    before = os.environ.get(THREADS_ENV)
    if threads is None and before is not None:  # the environment says
        yield
        return
    set_encode_threads(1 if threads is None else threads)
    try:
        yield
    finally:
        set_encode_threads(0)
        if before is not None:
            os.environ[THREADS_ENV] = before


def cap_store_threads(threads: int) -> None:
    """At most `threads` worker threads in LanceDB's runtimes in this process (and the processes it
    spawns, which inherit the environment). By default LanceDB runs one worker thread per core in
    every process, and a server's many small concurrent queries keep them all waking and spinning:
    on 16 cores (docs/benchmarks.md, issue 37), 100 clients, no embedder, capping them at 4 took the
    server's CPU an operation from 20.6 to 8.3 ms (one process) and 16.4 to 8.7 ms (two), and
    served 279 -> 296 and 453 -> 506 operations a second; on 4 cores or fewer it changes nothing.
    LanceDB reads these variables when it starts its runtimes, at the first table opened in the
    process: a process that opened one before keeps what it has. A `TOKIO_WORKER_THREADS` already
    set wins; 0 leaves LanceDB's default."""
    if threads <= 0 or STORE_THREADS_ENV in os.environ:
        return
    count = str(min(threads, os.cpu_count() or 1))
    os.environ[STORE_THREADS_ENV] = count
    os.environ.setdefault("LANCE_CPU_THREADS", count)  # Lance's pool for compute


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: ServerState = app.state.memos
    with _encoder_threads(state.config.encoder_threads):
        async with app.state.mcp.running(app):
            try:
                yield
                await state.extractions.drain(DRAIN_SECONDS)
            finally:
                state.bus.close()


def create_app(config: ServeConfig | None = None) -> FastAPI:
    """The memos HTTP API and web view over one store."""
    from . import _routes_admin, _routes_facade, _routes_memory, _routes_view

    config = config or ServeConfig()
    if config.memory is None:  # the store opens in this app, after this: LanceDB's runtimes start then
        cap_store_threads(config.store_threads)
    mcp = McpEndpoint()
    app = FastAPI(
        title="memos", version="1",
        summary="An operating-system-style memory for LLM agents, served: typed stores, search, core blocks, chat.",
        description="Every /v1 call acts in the scope of its API key (`Authorization: Bearer <key>`). "
                    "Errors are JSON: {\"error\": {\"type\", \"message\"}}; the message says what to fix.",
        docs_url=None, redoc_url=None,  # their pages load scripts from a CDN: /docs is the package's own page
        lifespan=_lifespan,
    )
    app.state.memos = ServerState(config)
    app.state.mcp = mcp
    install_error_handlers(app)
    app.include_router(_routes_memory.router)
    app.include_router(_routes_facade.router)
    app.include_router(_routes_view.router)
    app.include_router(_routes_admin.router)
    app.router.routes.append(Route(MCP_PATH, mcp, include_in_schema=False))  # an ASGI app: MCP over streamable HTTP, any method
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)

    @app.get("/healthz", tags=["server"], response_model=HealthOut, summary="Liveness: the store opens and answers.")
    async def healthz(request: Request) -> dict[str, Any]:
        memory, _ = await get_state(request).ready()
        return {"ok": True, "stores": memory.type_names}

    return app
