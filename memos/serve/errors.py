"""How a failure reaches an HTTP client: `{"error": {"type", "message"}}`, never a stack trace.

One of memos' own errors also names its class (`"exception": "RecordNotFoundError"`), so a
client (`memos.client`) raises the same class an in-process call would.

memos' own errors (`memos.exceptions`) map to a status by kind: a caller's mistake is 4xx with
the message that names the fix, a missing record 404, a vault refusal 403, an unavailable
store 503, and one with too many calls waiting 503 with a Retry-After header (`memos.batching`). Request validation failures name each bad field and what it must be. Anything
else is logged here with its traceback and reaches the client as a bare 500.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memos import exceptions as ex
from memos.crypto import VaultAccessError, VaultKeyError

__all__ = ["ApiError", "error_body", "install_error_handlers", "status_of"]

log = logging.getLogger("memos.serve")

# most specific first: the first class an error is an instance of decides
_STATUS: list[tuple[type[BaseException], int, str]] = [
    (ex.UnknownMemoryTypeError, 404, "unknown_store"),
    (ex.RecordNotFoundError, 404, "not_found"),
    (ex.UnknownBlockError, 404, "unknown_block"),
    (ex.BlockLimitError, 422, "block_limit"),
    (ex.ReadOnlyBlockError, 409, "read_only_block"),
    (ex.TextNotFoundError, 422, "text_not_found"),
    (ex.EmbeddingDimensionError, 409, "embedder_mismatch"),
    (ex.ScopeError, 403, "scope_not_allowed"),
    (ex.InvalidFilterError, 400, "invalid_filter"),
    (ex.InvalidRecordError, 422, "invalid_record"),
    (ex.ConfigError, 400, "bad_request"),
    (VaultAccessError, 403, "vault_refused"),
    (VaultKeyError, 503, "vault_key"),
    (ex.BudgetError, 422, "budget"),
    (ex.StoreUnavailableError, 503, "store_unavailable"),
    (ex.OverloadedError, 503, "overloaded"),
    (ex.CoreMemoryError, 422, "core_memory"),
    (ex.RecordSupersededError, 409, "record_superseded"),
    (ex.RecordChangedError, 409, "record_changed"),
    (ex.MemoryOSError, 500, "memory_error"),
]


class ApiError(Exception):
    """An error the API raises itself, with its status, type and a message naming the fix."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def status_of(exc: ex.MemosError) -> tuple[int, str]:
    """The HTTP status and error type of one of memos' errors."""
    for cls, status, kind in _STATUS:
        if isinstance(exc, cls):
            return status, kind
    return 400, "bad_request"


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


def _field_message(error: dict[str, Any]) -> str:
    where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path"))
    return f"{where or 'body'}: {error.get('msg', 'invalid')}"


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every failure the one JSON shape."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.kind, exc.message), status_code=exc.status)

    @app.exception_handler(ex.MemosError)
    async def _memos(request: Request, exc: ex.MemosError) -> JSONResponse:
        status, kind = status_of(exc)
        if isinstance(exc, ex.OverloadedError):  # refused before any of it was taken: the client retries
            return JSONResponse(error_body(kind, str(exc)), status_code=status, headers={"Retry-After": str(math.ceil(exc.retry_after))})
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return JSONResponse(error_body(kind, str(exc), exception=type(exc).__name__), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())[:20]
        message = "; ".join(_field_message(e) for e in errors) or "the request is not valid"
        fields = [{"field": ".".join(str(p) for p in e.get("loc", ())), "problem": str(e.get("msg", ""))} for e in errors]
        return JSONResponse(error_body("invalid_request", f"fix the request: {message}", fields=fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no such endpoint {request.url.path}; the API is described at /openapi.json and /docs"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see /openapi.json"
        return JSONResponse(error_body(kind, message), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse(error_body("internal", "the server failed on this request; it is logged on the server"),
                            status_code=500)
