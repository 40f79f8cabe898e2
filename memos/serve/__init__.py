"""memos served: an HTTP API for many app servers and a web view to watch memory form.

    memos serve --db memory --admin-key "$MEMOS_ADMIN_KEY"      # http://127.0.0.1:8077/ui

A face over the same `MemoryOS` facade as the CLI and the MCP server (FastAPI + uvicorn, the
`memos-memory[serve]` extra). Modules: `app` (configuration, callers, limits), `tenancy` (API
keys bound to a scope), `errors` (one JSON error shape), `events` (live updates),
`_routes_memory` / `_routes_view` / `_routes_admin` (the endpoints), `static/` (the web view:
plain HTML, CSS and JS, no build step).
"""

from __future__ import annotations

from typing import Any

from .app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app", "run"]


def run(config: ServeConfig, *, host: str = "127.0.0.1", port: int = 8077, log_level: str = "warning", **uvicorn_options: Any) -> None:
    """Serve `config`'s store on host:port until interrupted (one process; run several on one store to scale out)."""
    import uvicorn

    uvicorn.run(create_app(config), host=host, port=port, log_level=log_level, **uvicorn_options)
