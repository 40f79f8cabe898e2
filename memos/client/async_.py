"""`AsyncClient`: the `MemoryOS` facade over HTTP, for a `memos serve` elsewhere.

The same methods, arguments, records and errors as the facade (`add`, `ingest`, `search` with
`k` or `budget_tokens`, `get`, `update`, `supersede`, `delete`, `history`), plus what in process
are helpers beside it: `core(scope)` (as `memos.context.core_memory.CoreMemory`), `export`
(`memos.portability.export_scope`) and `forget` (`forget_user`). So

    memory = await MemoryOS.open("memory")   ->   memory = AsyncClient("http://host:8077", key=KEY)

is the one line that changes. Every call names its scope in a header; the server acts in it
only if the API key may (its user; its agent, if the key is bound to one; any session) and
raises `ScopeError` otherwise. Arguments are checked here as the facade checks them, so bad
input raises the same error class before any request is sent. What the server decides instead
of the caller: the audit trail's actor (the key's name), a vault change's clearance (the key's).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, overload
from urllib.parse import quote

import httpx2

from memos import validation as check
from memos.exceptions import ConfigError, StoreUnavailableError, UnknownBlockError
from memos.ingest import Message
from memos.memtypes import CoreBlock, Episode, MemoryRecord
from memos.records import R, TypeRef
from memos.retrieval.ranking import Hit
from memos.store.history import HistoryEntry
from memos.store.scope import Scope, validate_record_id, validate_value

from . import _wire as wire

__all__ = ["INGEST_BATCH", "AsyncClient", "RemoteCore"]

INGEST_BATCH = 200
"""Turns per ingest request (the server's limit per request); `progress` is called after each."""


class AsyncClient:
    """The memory of a `memos serve` at `url`, through the API key `key`, with the facade's calls (all async)."""

    def __init__(self, url: str, *, key: str, types: Sequence[type[MemoryRecord]] = (), timeout: float = 60.0,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must be the server's http(s) address, e.g. 'http://127.0.0.1:8077', got {url!r}")
        if not isinstance(key, str) or not key:
            raise ConfigError("key must be an API key (an admin makes one with `memos keys create` or POST /admin/keys)")
        self.url = url.rstrip("/")
        self.registry = wire.Registry()
        self.registry.learn(types)
        self.http = httpx2.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout,
                                       transport=transport)

    async def close(self) -> None:
        """Close the connections."""
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the facade's calls ------------------------------------------------------------------

    async def add(self, scope: Scope, records: R | Iterable[R], *, actor: str = "user") -> list[R]:
        """Store one or many records in `scope` (one request: all are stored, or none); returns them as stored."""
        scope = check.check_scope(scope)
        validate_value(actor, "actor")
        items = check.check_records(records)
        if not items:
            return []
        self.registry.learn({type(r) for r in items})
        body = {"records": [{"store": r.memory_type, "fields": wire.record_fields(r, scope)} for r in items]}
        return [self.registry.record(r) for r in (await self.request("POST", "/v1/records", scope, json=body))["records"]]

    @overload
    async def get(self, scope: Scope, memory_type: type[R], record_id: str) -> R: ...
    @overload
    async def get(self, scope: Scope, memory_type: str, record_id: str) -> MemoryRecord: ...
    async def get(self, scope: Scope, memory_type: TypeRef, record_id: str) -> MemoryRecord:
        """One record by id (`RecordNotFoundError` if it is not in this scope)."""
        path = self._record_path(memory_type, record_id)
        result: MemoryRecord = self.registry.record(await self.request("GET", path, check.check_scope(scope)))
        return result

    @overload
    async def update(self, scope: Scope, memory_type: type[R], record_id: str, changes: dict[str, Any], *,
                     actor: str = "user", clearance: str = "high", approved_by: str | None = None) -> R: ...
    @overload
    async def update(self, scope: Scope, memory_type: str, record_id: str, changes: dict[str, Any], *,
                     actor: str = "user", clearance: str = "high", approved_by: str | None = None) -> MemoryRecord: ...
    async def update(self, scope: Scope, memory_type: TypeRef, record_id: str, changes: dict[str, Any], *, actor: str = "user",
                     clearance: str = "high", approved_by: str | None = None) -> MemoryRecord:
        """Change fields of a record; returns it updated. A vault item's secret or sensitivity changes
        within the key's clearance; `approved_by` (lowering one) needs the operator's approval on the server.
        The lifecycle fields are refused as `MemoryOS.update` refuses them, before a request is sent."""
        if approved_by is not None:
            raise ConfigError("over HTTP an approval is the operator's admin key in X-Memos-Approval, not a name: "
                              "lower a vault item's sensitivity with that header (docs/serving.md)")
        path = self._record_path(memory_type, record_id)
        changes = check.check_changes(changes)
        check.check_lifecycle_untouched(changes)
        result: MemoryRecord = self.registry.record(await self.request("PATCH", path, check.check_scope(scope),
                                                                     json=wire.jsonable(changes)))
        return result

    async def supersede(self, scope: Scope, memory_type: TypeRef, old_id: str, new: R, *, actor: str = "user") -> R:
        """Replace a record by a new one: the old closes its validity and links its successor."""
        scope = check.check_scope(scope)
        check.check_record(new)
        self.registry.learn([type(new)])
        body = wire.record_fields(new, scope)
        result: R = self.registry.record(await self.request("POST", self._record_path(memory_type, old_id) + "/supersede", scope,
                                                          json=body))
        return result

    async def delete(self, scope: Scope, memory_type: TypeRef, record_id: str, *, actor: str = "user") -> None:
        """Delete a record for real, its history included (`RecordNotFoundError` once nothing of it is left)."""
        await self.request("DELETE", self._record_path(memory_type, record_id), check.check_scope(scope))

    async def history(self, scope: Scope, record_id: str | None = None, *, limit: int | None = None) -> list[HistoryEntry]:
        """The audit trail of `scope` (or of one record in it), oldest first."""
        scope = check.check_scope(scope)
        limit = check.check_int(limit, "limit", low=0, high=2**31, optional=True)
        params: dict[str, Any] = {}
        if record_id is not None:
            params["record_id"] = validate_record_id(record_id)
        if limit:
            params["limit"] = limit
        return [wire.history_entry(e) for e in (await self.request("GET", "/v1/audit", scope, params=params))["entries"]]

    async def search(self, query: str, scope: Scope, types: Sequence[TypeRef] | None = None, k: int = 10,
                     budget_tokens: int | None = None, since: datetime | None = None, until: datetime | None = None,
                     tags: list[str] | None = None, include_inactive: bool = False, replies: bool = True,
                     empty: Sequence[str] = (), exclude: Collection[str] = ()) -> list[Hit]:
        """Hybrid search: the `k` best hits, or with `budget_tokens` the best that fit the budget when rendered.

        `empty` (stores the caller knows to be empty, an in-process shortcut) is not sent: the
        server finds out itself, with the same hits."""
        query, scope = check.check_query(query), check.check_scope(scope)
        body: dict[str, Any] = {
            "query": query, "k": check.check_int(k, "k", low=1, high=check.MAX_K), "budget_tokens": check.check_budget(budget_tokens),
            "since": check.check_time(since, "since"), "until": check.check_time(until, "until"), "tags": check.check_tags(tags),
            "include_inactive": check.check_bool(include_inactive, "include_inactive"), "replies": check.check_bool(replies, "replies"),
        }
        if isinstance(exclude, str | bytes) or not all(isinstance(i, str) for i in exclude):
            raise ConfigError(f"exclude must be a collection of record ids, got {exclude!r}")
        body["exclude"] = sorted(exclude)
        if types is not None:
            if isinstance(types, str | type) or not isinstance(types, Sequence):
                raise ConfigError(f"types must be a list of store names, got {types!r}")
            body["types"] = [wire.store_name(t) for t in types]
        answer = await self.request("POST", "/v1/search", scope, json=wire.jsonable(body))
        return [wire.hit_from(h, self.registry) for h in answer["hits"]]

    async def ingest(self, scope: Scope, messages: Iterable[Message | dict[str, Any]], *, actor: str = "ingest",
                     previous: Episode | None = None, progress: Callable[[int], None] | None = None) -> list[Episode]:
        """Store conversation turns as episodic records (raw mode), `INGEST_BATCH` a request;
        `progress(n)` is called as each batch of n turns is stored."""
        scope = check.check_scope(scope)
        validate_value(actor, "actor")
        if isinstance(messages, str | bytes | dict):
            raise ConfigError("messages must be a list of messages (dicts with speaker and text, or memos.Message)")
        pending = [m.model_dump(mode="json") if isinstance(m, Message) else wire.jsonable(m) for m in messages]
        stored: list[Episode] = []
        for start in range(0, len(pending), INGEST_BATCH):
            before = stored[-1] if stored else previous  # each batch goes on from the turn before it
            body = {"messages": pending[start:start + INGEST_BATCH], "previous_id": before.id if before is not None else None}
            batch = [self.registry.record(e) for e in (await self.request("POST", "/v1/ingest", scope, json=body))["episodes"]]
            stored += batch
            if progress is not None:
                progress(len(batch))
        return stored

    # --- beside the facade in process: core blocks, export, forget ----------------------------

    def core(self, scope: Scope) -> RemoteCore:
        """The core blocks of `scope`'s agent, as `CoreMemory(memory, scope)` in process."""
        return RemoteCore(self, check.check_scope(scope))

    async def export(self, scope: Scope) -> list[str]:
        """`scope` as memos-export/1 JSON lines (`memos.portability.export_scope`; vault secrets stay ciphertext)."""
        response = await self._send("GET", "/v1/export", check.check_scope(scope))
        return [line for line in response.text.splitlines() if line]

    async def forget(self, user_id: str) -> dict[str, int]:
        """Delete everything of `user_id` (`memos.portability.forget_user`): the key must be that user's, user-wide."""
        user_id = validate_value(user_id, "user_id")
        removed: dict[str, int] = (await self.request("DELETE", "/v1/memory", Scope(user_id), params={"confirm": user_id}))["removed"]
        return removed

    # --- the one place a request is sent -----------------------------------------------------

    def _record_path(self, memory_type: TypeRef, record_id: str) -> str:
        return f"/v1/stores/{wire.store_name(memory_type)}/{validate_record_id(record_id)}"

    async def request(self, method: str, path: str, scope: Scope, **options: Any) -> Any:
        """One call of the HTTP API in `scope` (docs/serving.md lists them): its JSON answer, or the memos error it stands for."""
        return (await self._send(method, path, scope, **options)).json()

    async def _send(self, method: str, path: str, scope: Scope, **options: Any) -> httpx2.Response:
        try:
            response = await self.http.request(method, path, headers=wire.scope_header(scope), **options)
        except httpx2.TransportError as exc:
            raise StoreUnavailableError(f"no answer from the memos server at {self.url} ({type(exc).__name__}: {exc}); "
                                        "a write may or may not have happened: read it back before repeating it") from exc
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            raise wire.error_from(response.status_code, body)
        return response


class RemoteCore:
    """The core blocks of one scope's agent over HTTP: `CoreMemory`'s calls (the actor is the key's)."""

    def __init__(self, client: AsyncClient, scope: Scope) -> None:
        self.client = client
        self.scope = scope

    async def blocks(self) -> list[CoreBlock]:
        """Every block this agent sees (the defaults are made on first use)."""
        return [self._block(b) for b in (await self._call("GET", "/v1/core"))["blocks"]]

    async def get(self, label: str) -> CoreBlock:
        """The block named `label` (`UnknownBlockError` if there is none)."""
        blocks = await self.blocks()
        for block in blocks:
            if block.label == label:
                return block
        known = ", ".join(repr(b.label) for b in blocks) or "none"
        raise UnknownBlockError(f"there is no core block {label!r}; the blocks are {known}")

    async def append(self, label: str, text: str, *, actor: str = "user") -> CoreBlock:
        """Add `text` on a new line at the end of the block."""
        return self._block(await self._call("POST", f"/v1/core/{self._label(label)}/append", json={"text": text}))

    async def replace(self, label: str, old: str, new: str, *, actor: str = "user") -> CoreBlock:
        """Replace the exact text `old` (every occurrence) by `new`."""
        return self._block(await self._call("POST", f"/v1/core/{self._label(label)}/replace", json={"old": old, "new": new}))

    async def rethink(self, label: str, value: str, *, actor: str = "user") -> CoreBlock:
        """Rewrite the whole block."""
        return self._block(await self._call("PUT", f"/v1/core/{self._label(label)}", json={"value": value}))

    def _block(self, data: dict[str, Any]) -> CoreBlock:
        block: CoreBlock = self.client.registry.record(data["record"])
        return block

    @staticmethod
    def _label(label: object) -> str:
        return quote(validate_value(label, "label"), safe="")

    async def _call(self, method: str, path: str, **options: Any) -> Any:
        return await self.client.request(method, path, self.scope, **options)
