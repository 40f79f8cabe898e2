"""What `memos.client` sends and reads back: requests from facade arguments, records, hits and
history entries from JSON, and memos' own exception classes from error bodies. Pure: no I/O.

The server names the class of each of memos' errors (`"exception"` in its error body); the
client raises that class with the server's message, so `except RecordNotFoundError` reads the
same over HTTP as in process. Errors of the HTTP layer map by their `type`: a refused field or
limit is `InvalidFilterError` (as the facade's own bound checks), a refused record
`InvalidRecordError`, an unknown key `ConfigError`, a server that cannot be reached or answers
5xx `StoreUnavailableError` / `MemoryOSError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic_core import to_jsonable_python

from memos import exceptions as ex
from memos.crypto import VaultAccessError, VaultKeyError
from memos.memtypes import BUILTIN_TYPES, MemoryRecord
from memos.retrieval.ranking import Hit
from memos.store.history import HistoryEntry
from memos.store.scope import Scope

__all__ = ["SCOPE_HEADER", "Registry", "error_from", "history_entry", "hit_from", "jsonable", "record_fields", "scope_header", "store_name"]

SCOPE_HEADER = "X-Memos-Scope"
"""The header that names the scope of a call (the server checks it against the API key)."""

_SERVER_SET = ("id", "user_id", "agent_id", "session_id", "text", "created_at", "updated_at", "access_count", "last_accessed")
_EXCEPTIONS: dict[str, type[ex.MemosError]] = {
    cls.__name__: cls for cls in (*(getattr(ex, name) for name in ex.__all__), VaultAccessError, VaultKeyError)
}
_BY_TYPE: dict[str, type[ex.MemosError]] = {
    "invalid_request": ex.InvalidFilterError, "invalid_record": ex.InvalidRecordError, "confirm": ex.InvalidFilterError,
    "unknown_store": ex.UnknownMemoryTypeError, "not_found": ex.RecordNotFoundError, "unauthorized": ex.ConfigError,
    "key_revoked": ex.ConfigError, "agent_key": ex.ScopeError, "body_too_large": ex.InvalidRecordError,
    "no_clearance": VaultAccessError, "approval_required": VaultAccessError, "admin_disabled": ex.ConfigError,
}


def scope_header(scope: Scope) -> dict[str, str]:
    """The header that names `scope` (ASCII JSON: any id, Chinese included, survives a header)."""
    return {SCOPE_HEADER: json.dumps({"user_id": scope.user_id, "agent_id": scope.agent_id, "session_id": scope.session_id})}


def store_name(ref: object) -> str:
    """A store's name from a name or a record class (what the facade's `TypeRef` allows)."""
    if isinstance(ref, type) and issubclass(ref, MemoryRecord) and "memory_type" in vars(ref):
        return ref.memory_type
    if isinstance(ref, str):
        return ref
    raise ex.UnknownMemoryTypeError(ref, [t.memory_type for t in BUILTIN_TYPES])


def record_fields(record: MemoryRecord, scope: Scope) -> dict[str, Any]:
    """The fields of a new record to send: the server sets ids, scope, text and times, as the
    facade does; a scope field that names another scope is refused as the facade refuses it."""
    for name, value in scope.stamp().items():
        current = getattr(record, name)
        if current and current != value:
            raise ex.InvalidRecordError(f"record {record.id} has {name}={current!r} but is written in scope {scope}")
    if "id" in record.model_fields_set:
        raise ex.InvalidRecordError(f"record id {record.id!r} was set by hand; over HTTP the server gives every new record "
                                    "its id (an id chosen by a client could probe other users' ids): leave it unset")
    return record.model_dump(mode="json", exclude=set(_SERVER_SET))


def jsonable(value: Any) -> Any:
    """Arguments (dates, records, messages) as JSON values."""
    return to_jsonable_python(value)


@dataclass
class Registry:
    """The record classes a client turns JSON into: the built-in types, the `types` given, and
    any class it has sent a record of."""

    types: dict[str, type[MemoryRecord]] = field(default_factory=lambda: {t.memory_type: t for t in BUILTIN_TYPES})

    def learn(self, classes: Iterable[type[MemoryRecord]]) -> None:
        for cls in classes:
            if not (isinstance(cls, type) and issubclass(cls, MemoryRecord)) or "memory_type" not in vars(cls):
                raise ex.ConfigError(f"{cls!r} is not a concrete MemoryRecord subclass (set memory_type)")
            self.types[cls.memory_type] = cls

    def record(self, data: Mapping[str, Any]) -> Any:
        """A record from the server's JSON (its `memory_type` and `rendered` are not fields)."""
        name = data.get("memory_type")
        cls = self.types.get(str(name))
        if cls is None:
            raise ex.ConfigError(f"the server returned a {name!r} record, a type this client does not know; "
                                 "pass its class: Client(url, key=..., types=[MyRecord])")
        return cls.model_validate({k: v for k, v in data.items() if k not in ("memory_type", "rendered")})


def hit_from(data: Mapping[str, Any], registry: Registry) -> Hit:
    return Hit(memory_type=data["store"], record=registry.record(data["record"]), score=data["score"],
               parts=dict(data["parts"]), text=data["text"], tokens=data["tokens"],
               attached=[hit_from(a, registry) for a in data.get("attached", [])])


def history_entry(data: Mapping[str, Any]) -> HistoryEntry:
    return HistoryEntry(**{**data, "at": datetime.fromisoformat(data["at"])})


def error_from(status: int, body: object) -> ex.MemosError:
    """The memos error an HTTP error response stands for."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"type": "http_error", "message": f"the server answered {status} without a memos error body"}
    kind, message = str(error.get("type", "")), str(error.get("message", "")) or f"HTTP {status}"
    cls = _EXCEPTIONS.get(str(error.get("exception"))) or _BY_TYPE.get(kind)
    if cls is None:
        cls = ex.StoreUnavailableError if status in (502, 503, 504) else ex.MemoryOSError if status >= 500 else ex.ConfigError
    exc = cls.__new__(cls)  # the server's message as is: some classes build theirs from other arguments
    Exception.__init__(exc, message)
    return exc
