"""The app of one worker process of `memos serve --workers N` (uvicorn spawns each and calls `app_from_env`)."""

from __future__ import annotations

import json
import os

from fastapi import FastAPI

from .app import ServeConfig, create_app
from .deps import MAX_PENDING

__all__ = ["app_from_env"]


def app_from_env() -> FastAPI:
    """A worker's app, configured by the variables `memos serve` set before spawning it."""
    embedder = os.environ.get("MEMOS_SERVE_EMBEDDER", "local")
    return create_app(ServeConfig(
        uri=os.environ["MEMOS_SERVE_DB"], embedder=None if embedder.lower() == "none" else embedder,
        admin_key=os.environ.get("MEMOS_ADMIN_KEY") or None, model=os.environ.get("MEMOS_SERVE_MODEL") or None,
        extract=os.environ.get("MEMOS_SERVE_EXTRACT", "1") != "0",
        storage_options=json.loads(os.environ.get("MEMOS_SERVE_OPTIONS") or "{}") or None,
        max_pending=int(os.environ.get("MEMOS_SERVE_MAX_PENDING") or MAX_PENDING),
        encoder_threads=int(threads) if (threads := os.environ.get("MEMOS_SERVE_ENCODER_THREADS")) else None,
        store_threads=int(os.environ.get("MEMOS_SERVE_STORE_THREADS") or ServeConfig.store_threads),
    ))
