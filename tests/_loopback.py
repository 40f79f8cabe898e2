"""`memos serve`'s app under a real uvicorn on 127.0.0.1 in a thread of the test process (no second interpreter to start)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2
import uvicorn

from memos.bench.serve import free_port
from memos.serve import ServeConfig, create_app

__all__ = ["LoopbackServer"]


class LoopbackServer:
    """`memos serve`'s app under a real uvicorn on 127.0.0.1, in a thread of the test process
    (its own event loop, which opens the store; the lifespan runs as in `memos serve`)."""

    def __init__(self, db: str, wrap: Callable[[Any], Any] | None = None) -> None:
        self.admin_key = "admin-" + secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(ServeConfig(uri=db, embedder=None, admin_key=self.admin_key))
        if wrap is not None:  # an ASGI middleware around the whole app
            app = wrap(app)
        self.uvicorn = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.uvicorn.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(30)

    def make_key(self, user_id: str, **options: Any) -> str:
        r = httpx2.post(self.url + "/admin/keys", json={"user_id": user_id, **options}, headers={"Authorization": f"Bearer {self.admin_key}"}, timeout=30)
        r.raise_for_status()
        return r.json()["token"]
