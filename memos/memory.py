"""`MemoryOS`: the facade over the typed stores, retrieval and the audit trail.

Everything a user, an agent's tools or a background job does to memory goes through here,
always inside one `Scope`. Every mutation appends to history. Vault secrets are encrypted
before they reach a table and come back redacted; only `reveal` decrypts (`memos.vault`).
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import ValidationError

from memos.jobs.merging import (
    MERGE,
    SUPERSEDE,
    merge_note,
    merged_marks,
    superseded_marks,
)
from memos.retrieval.ranking import Hit, RankingPolicy
from memos.retrieval.search import SearchRequest, search
from memos.store.history import HistoryEntry, history_row
from memos.store.lancedb.opening import open_storage
from memos.store.lancedb.storage import META, Storage
from memos.store.read_cache import FORGET, ReadCache
from memos.store.scope import Scope, Where, validate_record_id, validate_value

from . import validation as check
from ._sync import check_sync_twins, sync_classmethod_twin, sync_twin
from .embeddings import LOCAL_BATCH, TextEmbedder, resolve_embedder
from .exceptions import (
    ConfigError,
    DuplicateIdError,
    InvalidRecordError,
    RecordChangedError,
    RecordNotFoundError,
    UnknownMemoryTypeError,
)
from .ingest import Message, episodes_from_messages
from .memtypes import BUILTIN_TYPES, Episode, MemoryRecord, new_id
from .model_backend import MemoryAgent, ModelBackend
from .telemetry import span
from .tokens import Tokenizer, tokenizer_for
from .vault import Vault, default_key_file

if TYPE_CHECKING:
    from memos.context.session import MemorySession
    from memos.graph.entities import EntityGraph
    from memos.jobs.scheduler import MemoryScheduler

__all__ = ["DEFAULT_BACKEND", "MemoryOS", "ScopedMemory", "default_key_file"]

log = logging.getLogger("memos")
R = TypeVar("R", bound=MemoryRecord)
TypeRef = str | type[MemoryRecord]

_IMMUTABLE = check.IMMUTABLE_FIELDS
_BOOKKEEPING = {"status", "valid_from", "valid_to", "superseded_by", "source_ids", "tags", "importance",
                "access_count", "last_accessed"}
OCC_ATTEMPTS = 20
"""How often a user's update is re-applied to a record another writer changed meanwhile."""
INGEST_CHUNK = LOCAL_BATCH
"""Turns `ingest` embeds and writes at once: one call of the local encoder, which pads less the
more texts a call holds; `memos ingest` of LOCOMO dev ran at 105-107 turns/s 256 at a time and
116-119 at 1,024."""


def _default_clock() -> datetime:
    return datetime.now(UTC)


DEFAULT_BACKEND = "memos.agents.backend:PydanticAIBackend"
"""The model backend a `MemoryOS` opened without `backend=` uses (module:class, built on first use):
the agents sit a floor above the facade, which names them here instead of importing them."""

@check_sync_twins
class MemoryOS:
    """An agent's whole memory: core, episodic, semantic, procedural, resource and vault stores.

    Open one with `await MemoryOS.open(path)` (or `MemoryOS.open_sync(path)`); every method has
    a `*_sync` twin (listed at the end of the class).
    """

    def __init__(
        self,
        storage: Storage,
        embedder: TextEmbedder | None,
        types: dict[str, type[MemoryRecord]],
        tokenizer: Tokenizer,
        clock: Callable[[], datetime],
        ranking: RankingPolicy,
        vault_key_file: Path | None,
        backend: ModelBackend | None = None,
    ) -> None:
        self.storage = storage
        self.embedder = embedder
        self.types = types
        self.tokenizer = tokenizer
        self.clock = clock
        self.ranking = ranking
        self.vault_key_file = vault_key_file
        self._backend: ModelBackend | None = backend
        self._scheduler: MemoryScheduler | None = None
        self.vault = Vault(self, vault_key_file)
        """The secrets: encryption at rest, reveal, key rotation, scrubbing (`memos.vault`)."""
        self._drawn: set[str] = set()  # ids `draw_ids` handed out and no add has used yet
        self.entity_links = False
        """Raw-mode ingestion links each turn to the entities it names (`memos.graph.entities`,
        `memos.graph.extraction`). Off by default: on LOCOMO it did not move evidence recall
        (README, entity graph); the graph's own entities and relations are used either way."""

    @classmethod
    async def open(
        cls,
        uri: str | Path = "memos-data",
        *,
        embedder: Any = "local",
        types: Sequence[type[MemoryRecord]] = (),
        model: str | None = None,
        clock: Callable[[], datetime] | None = None,
        ranking: RankingPolicy | None = None,
        vault_key_file: str | Path | None = None,
        storage_options: dict[str, str] | None = None,
        backend: ModelBackend | None = None,
    ) -> MemoryOS:
        """Open or create the memory at `uri` (a directory, or any LanceDB URI such as s3://...).

        `embedder`: "local" (default, offline MiniLM), None for full-text-only, a pydantic-ai
        embedding model string or `Embedder`. `types`: extra memory types (MemoryRecord
        subclasses). `model`: the serving model's name, which picks the token encoding.
        `backend`: what reflection, conflict judgement and `agent` ask of a model
        (`memos.model_backend.ModelBackend`); None: memos' pydantic-ai agents, loaded on first use.
        """
        if not isinstance(uri, str | Path) or not str(uri):
            raise ConfigError(f"uri must be a directory path or a LanceDB URI string, got {uri!r}")
        if model is not None and not isinstance(model, str):
            raise ConfigError(f"model must be the serving model's name (a string, e.g. 'openai:gpt-4o') or None, got {type(model).__name__}")
        registry: dict[str, type[MemoryRecord]] = {}
        for record_type in (*BUILTIN_TYPES, *types):
            if not (isinstance(record_type, type) and issubclass(record_type, MemoryRecord)) or "memory_type" not in vars(record_type):
                raise ConfigError(f"{record_type!r} is not a concrete MemoryRecord subclass (set memory_type)")
            other = registry.get(record_type.memory_type)
            if other is not None and other is not record_type:
                raise ConfigError(f"two memory types are named {record_type.memory_type!r}: {other.__name__} and {record_type.__name__}")
            registry[record_type.memory_type] = record_type
        resolved = await resolve_embedder(embedder)
        storage = await open_storage(str(uri), list(registry.values()), resolved, storage_options)
        key_file = Path(vault_key_file) if vault_key_file else None
        return cls(storage, resolved if storage.embedder_name else None, registry, tokenizer_for(model),
                   clock or _default_clock, ranking or RankingPolicy(), key_file, backend)

    # --- types and scopes ----------------------------------------------------------------

    @property
    def type_names(self) -> list[str]:
        """Names of every registered memory type."""
        return list(self.types)

    @property
    def searchable_types(self) -> list[str]:
        """The stores a search covers by default: those whose type declares `searched_by_default`
        (all but core, whose blocks are always in the prompt)."""
        return [name for name, record_type in self.types.items() if record_type.searched_by_default]

    @property
    def turn_type(self) -> str:
        """The store that holds conversation turns (the recall log): the type declaring `holds_turns`."""
        return next(name for name, record_type in self.types.items() if record_type.holds_turns)

    @property
    def graph(self) -> EntityGraph:
        """The entity graph of this memory (`memos.graph.entities.EntityGraph`): entities, relations, links."""
        from memos.graph.entities import EntityGraph

        return EntityGraph(self)

    def record_type(self, ref: TypeRef) -> type[MemoryRecord]:
        """The record class of a memory type, by name or class."""
        name = ref.memory_type if isinstance(ref, type) and issubclass(ref, MemoryRecord) else ref
        if not isinstance(name, str) or name not in self.types:
            raise UnknownMemoryTypeError(name, self.type_names)
        return self.types[name]

    def scoped(self, scope: Scope | str, **ids: str) -> ScopedMemory:
        """A view of this memory bound to one scope: `mem.scoped("alice").search("...")`."""
        return ScopedMemory(self, scope if isinstance(scope, Scope) else Scope(scope, **ids))

    # --- writes --------------------------------------------------------------------------

    async def add(self, scope: Scope, records: R | Iterable[R], *, actor: str = "user") -> list[R]:
        """Store one or many records in `scope` (embedded and indexed in batches); returns them.

        A record's id must not be used by any other record in the database (`DuplicateIdError`);
        leave it unset for a fresh one. A secret field's value must not appear in the record's
        other fields (`InvalidRecordError`)."""
        return await self._add(scope, records, actor=actor)

    async def _add(self, scope: Scope, records: R | Iterable[R], *, actor: str, behind: bool = False) -> list[R]:
        """`add`; `behind`: the records are journaled and queued with their history and shared-table
        rows, written to their tables a moment later (`memos.store.lancedb.write_behind`: a chat's turns); on a
        store without a journal their own rows commit at once and the rest is queued."""
        check.check_scope(scope)
        validate_value(actor, "actor")
        items = check.check_records(records)
        for record in items:
            self.record_type(type(record))
            check.check_secret_not_exposed(record, {f: getattr(record, f) for f in record.secret_fields})
        await self._check_ids_free(items)
        now = self.clock()
        prepared: dict[str, list[R]] = {}
        for record in items:
            self.record_type(type(record))
            for field, value in scope.stamp().items():
                current = getattr(record, field)
                if current and current != value:
                    raise InvalidRecordError(f"record {record.id} has {field}={current!r} but is written in scope {scope}")
            stamped = self._revalidate(record, {**scope.stamp(), "created_at": now, "updated_at": now})
            prepared.setdefault(stamped.memory_type, []).append(self._seal(stamped))
        # every text of the call embedded in one batch before anything is written: an embedder
        # failure leaves the stores as they were
        vectors = iter(await self._vectors([r.index_text() for group in prepared.values() for r in group]))
        planned = {name: [next(vectors) for _ in group] for name, group in prepared.items()}
        if behind and not any(r.secret_fields for r in items):  # journaled now, written a moment later
            with span("memos.add", memory_type=",".join(prepared), records=len(items), user_id=scope.user_id, actor=actor):
                rows = {name: self._rows(name, group, planned[name]) for name, group in prepared.items()}
                if self.storage.hold(rows, self._history_rows(
                        [r for group in prepared.values() for r in group], "add", actor, before=None)):
                    return [self._redact(r) for group in prepared.values() for r in group]
        history: list[dict[str, Any]] = []  # one history commit for every store written (fewer commits)
        mirror = self.storage.search.gathering()  # one commit to the shared search table too

        async def write(name: str, group: list[MemoryRecord]) -> None:
            with span("memos.add", memory_type=name, records=len(group), user_id=scope.user_id, actor=actor):
                await self._write(name, group, "add", actor, before=None, history=history, vectors=planned[name])

        with mirror:  # the stores' commits overlap (one table each); all have ended before the audit
            written = await asyncio.gather(*(write(name, group) for name, group in prepared.items()), return_exceptions=True)
        # the stores that committed are audited (and mirrored) even when another one failed
        if behind and not any(isinstance(outcome, BaseException) for outcome in written):
            self.storage.behind.queue(history, mirror.rows)
            mirror.rows, audited = [], None
        else:
            audited, _ = await asyncio.gather(self.storage.append_history(history), mirror.flush(), return_exceptions=True)
        for outcome in (*written, audited):
            if isinstance(outcome, BaseException):
                raise outcome
        for record in items:
            clear = [getattr(record, f) for f in record.secret_fields if getattr(record, f)]
            if clear and record.source_ids:
                await self.vault.scrub_sources(scope, record, clear)
        return [self._redact(r) for group in prepared.values() for r in group]

    @overload
    async def update(self, scope: Scope, memory_type: type[R], record_id: str, changes: dict[str, Any], *,
                     actor: str = "user") -> R: ...
    @overload
    async def update(self, scope: Scope, memory_type: str, record_id: str, changes: dict[str, Any], *,
                     actor: str = "user") -> MemoryRecord: ...
    async def update(self, scope: Scope, memory_type: TypeRef, record_id: str, changes: dict[str, Any], *, actor: str = "user") -> MemoryRecord:
        """Change fields of a record; returns the updated record.

        The write is conditional on the version read: if another writer (a job, another process)
        changed the record meanwhile, the changes are applied again to the fresh record; if it
        was deleted, `RecordNotFoundError`. An update is never overwritten by a stale copy."""
        check.check_scope(scope)
        changes = check.check_changes(changes)
        validate_value(actor, "actor")
        record_type = self.record_type(memory_type)
        bad = set(changes) & _IMMUTABLE
        unknown = set(changes) - set(record_type.model_fields)
        if bad or unknown:
            raise InvalidRecordError(f"cannot update {sorted(bad | unknown)} of a {record_type.memory_type} record; "
                                     f"updatable fields: {sorted(set(record_type.model_fields) - _IMMUTABLE)}")

        async def attempt() -> MemoryRecord:
            record = await self._load(scope, memory_type, record_id)
            revised = self._revalidate(record, {**changes, "updated_at": self.stamp(record)})
            if record.secret_fields:
                check.check_secret_not_exposed(revised, {f: self.vault.clear_value(revised, f, changes) for f in record.secret_fields})
            updated = self._seal(revised, fresh=set(changes))
            await self._write(updated.memory_type, [updated], "update", actor, before={record.id: record})
            return self._redact(updated)

        return await self._optimistic(attempt)

    async def supersede(self, scope: Scope, memory_type: TypeRef, old_id: str, new: R, *, actor: str = "user") -> R:
        """Replace a record by a new one: the old closes its validity and links its successor."""
        check.check_scope(scope)
        check.check_record(new)
        old = await self._load(scope, memory_type, old_id)
        if type(new) is not type(old):
            raise InvalidRecordError(f"a {old.memory_type} record can only be superseded by another {old.memory_type} record")
        now = self.clock()
        if new.valid_from is None:
            new = self._revalidate(new, {"valid_from": now})
        [added] = await self.add(scope, new, actor=actor)

        async def close(old: MemoryRecord | None = old) -> None:
            old = old or await self._load(scope, memory_type, old_id)
            closed = self._revalidate(old, {**superseded_marks(added.id, now), "updated_at": self.stamp(old)})
            await self._write(old.memory_type, [closed], SUPERSEDE, actor, before={old.id: old}, vectors_from=old)

        try:
            await close()
        except RecordChangedError:  # changed since it was read: close the fresh copy
            await self._optimistic(lambda: close(None))
        return added

    async def merge_into(self, scope: Scope, memory_type: TypeRef, record_id: str, survivor_id: str, *, actor: str = "user",
                         reason: str = "duplicate") -> MemoryRecord:
        """Merge a record into another that says the same (`memos.jobs.merging`): it is archived,
        linked to `survivor_id` and tagged `merged`, in history as op "merge". Its text and
        vector are kept. Re-applied to a record another writer changed meanwhile."""
        check.check_scope(scope)
        validate_record_id(survivor_id)
        validate_value(actor, "actor")

        async def attempt() -> MemoryRecord:
            record = await self._load(scope, memory_type, record_id)
            marked = await self.restamp(record, merged_marks(record, survivor_id), op=MERGE, actor=actor,
                                        note=merge_note(survivor_id, reason))
            return self._redact(marked)

        return await self._optimistic(attempt)

    async def archive(self, scope: Scope, memory_type: TypeRef, record_id: str, *, actor: str = "user", note: str | None = None) -> MemoryRecord:
        """Take a record out of retrieval without deleting it (status "archived")."""
        check.check_scope(scope)
        validate_value(actor, "actor")
        if note is not None:
            check.check_text(note, "note", limit=10_000)

        async def attempt() -> MemoryRecord:
            record = await self._load(scope, memory_type, record_id)
            archived = self._revalidate(record, {"status": "archived", "updated_at": self.stamp(record)})
            await self._write(record.memory_type, [archived], "archive", actor, before={record.id: record}, vectors_from=record, note=note)
            return self._redact(archived)

        return await self._optimistic(attempt)

    async def delete(self, scope: Scope, memory_type: TypeRef, record_id: str, *, actor: str = "user") -> None:
        """Delete a record for real, its history included (right to be forgotten)."""
        check.check_scope(scope)
        record = await self._load(scope, memory_type, record_id)
        where = Where(scope).id_in([record.id]).build()
        await self.storage.delete_rows(record.memory_type, where)
        await self.storage.delete_history(Where(scope).eq("record_id", record.id).build())

    # --- reads ---------------------------------------------------------------------------

    @overload
    async def get(self, scope: Scope, memory_type: type[R], record_id: str) -> R: ...
    @overload
    async def get(self, scope: Scope, memory_type: str, record_id: str) -> MemoryRecord: ...
    async def get(self, scope: Scope, memory_type: TypeRef, record_id: str) -> MemoryRecord:
        """One record by id (RecordNotFoundError if it is not in this scope)."""
        check.check_scope(scope)
        return self._redact(await self._load(scope, memory_type, record_id))

    async def history(self, scope: Scope, record_id: str | None = None, *, limit: int | None = None) -> list[HistoryEntry]:
        """The audit trail of `scope` (or of one record in it), oldest first."""
        check.check_scope(scope)
        limit = check.check_int(limit, "limit", low=0, high=2**31, optional=True)
        where = Where(scope)
        if record_id is not None:
            where.eq("record_id", validate_record_id(record_id))
        entries = await self.storage.history_rows(where.build())
        return entries[-limit:] if limit else entries

    async def counts(self, scope: Scope, *, status: str | None = "active", cached: bool = False) -> dict[str, int]:
        """Number of records per store in `scope`.

        `cached`: a store whose table has not changed since the last `check_versions` (or has
        only had records added by this process) is not counted again."""
        check.check_scope(scope)
        if status is not None:
            check.check_statuses(status)
        statuses = (status,) if status else None
        where = Where(scope).status_in(statuses).build()
        known = {name: self.reads.get(("count", name, scope, status)) if cached else FORGET for name in self.types}
        missing = [name for name, value in known.items() if value is FORGET]
        at = {name: await self.storage.label(name) for name in missing}
        counted = await asyncio.gather(*(self.storage.count(name, where) for name in missing))  # one round trip
        for name, value in zip(missing, counted, strict=True):
            known[name] = value
            self.reads.put(("count", name, scope, status), name, value, _count_added(scope, statuses), at=at[name])
        return known

    @overload
    async def list_in(self, scopes: Sequence[Scope], memory_type: type[R], *,
                      status: str | Sequence[str] | None = "active", cached: bool = False) -> list[R]: ...
    @overload
    async def list_in(self, scopes: Sequence[Scope], memory_type: str, *,
                      status: str | Sequence[str] | None = "active", cached: bool = False) -> list[MemoryRecord]: ...
    async def list_in(self, scopes: Sequence[Scope], memory_type: TypeRef, *,
                      status: str | Sequence[str] | None = "active", cached: bool = False) -> list[Any]:
        """Records of one store in any of `scopes` (e.g. an agent's own core blocks and its user's
        shared ones), in one read, oldest first by their time field (`cached` as for `counts`)."""
        record_type = self.record_type(memory_type)
        statuses = (status,) if isinstance(status, str) else tuple(status or ())
        key = ("list_in", record_type.memory_type, tuple(scopes), statuses)
        if cached and (found := self.reads.get(key)) is not FORGET:
            return list(found)
        either = " OR ".join(f"({Where(s).build()})" for s in scopes)
        where = Where().raw(f"({either})").status_in(statuses).build()
        table = self.storage.type_table(record_type.memory_type)
        at = await self.storage.label(record_type.memory_type)
        rows = await self.storage.rows(record_type.memory_type, where)
        records = [self._redact(r) for r in sorted((table.to_record(r) for r in rows), key=lambda r: (r.event_time(), r.id))]
        self.reads.put(key, record_type.memory_type, records, _unless_added(scopes, statuses), at=at)
        return list(records)

    @property
    def reads(self) -> ReadCache:
        """Reads remembered at table versions (`memos.store.read_cache`): what `cached=True` reads use."""
        return self.storage.reads

    async def check_versions(self) -> None:
        """Look at every table's version (one storage call); reads with `cached=True` after it
        reuse what was read before and has not changed since. A step calls it once, first."""
        self.reads.check(await self.storage.versions())

    # --- for the kernel's own services (session, jobs, portability): public, so none reaches around

    @overload
    async def get_many(self, scope: Scope, memory_type: type[R], ids: Sequence[str], *,
                       status: str | Sequence[str] | None = None) -> list[R]: ...
    @overload
    async def get_many(self, scope: Scope, memory_type: str, ids: Sequence[str], *,
                       status: str | Sequence[str] | None = None) -> list[MemoryRecord]: ...
    async def get_many(self, scope: Scope, memory_type: TypeRef, ids: Sequence[str], *,
                       status: str | Sequence[str] | None = None) -> list[Any]:
        """Records by id in one read, in the order of `ids`; an id not in `scope` (or not of
        `status`) is left out."""
        if not ids:
            return []
        name = self.record_type(memory_type).memory_type
        statuses = (status,) if isinstance(status, str) else tuple(status or ())
        rows = await self.storage.rows(name, Where(scope).id_in(list(ids)).status_in(statuses).build())
        table = self.storage.type_table(name)
        by_id = {r["id"]: self._redact(table.to_record(r)) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    async def restamp(self, record: MemoryRecord, changes: dict[str, Any], *, op: str, actor: str,
                      note: str | None = None) -> MemoryRecord:
        """Change bookkeeping fields of `record` (as read): status, validity, links, provenance,
        tags, importance, access counts. Its text does not change, so its stored vector is kept
        and nothing is re-embedded (a job without an embedder cannot strip vectors). In history as `op`.

        Written only if the stored record is still the version given: `RecordChangedError` if
        another writer changed or deleted it since (the caller re-reads and re-decides, or skips)."""
        content = set(changes) - _BOOKKEEPING
        if content:
            raise InvalidRecordError(f"restamp changes bookkeeping fields only; use update for {sorted(content)}")
        self.record_type(type(record))
        if record.secret_fields:
            # records leave the kernel redacted (secret fields blank): the change is made on the
            # stored copy, so restamping what a read returned never writes a blank over a secret
            try:
                stored = await self._load(Scope(record.user_id), record.memory_type, record.id)
            except RecordNotFoundError:
                raise RecordChangedError(record.memory_type, [record.id], 0) from None
            if stored.updated_at != record.updated_at:
                raise RecordChangedError(record.memory_type, [record.id], 0)
            record = stored
        changed = self._revalidate(record, {**changes, "updated_at": self.stamp(record)})
        await self._write(record.memory_type, [changed], op, actor, before={record.id: record}, vectors_from=record, note=note)
        return changed

    async def stored_vectors(self, scope: Scope, memory_type: TypeRef, *, status: str = "active") -> dict[str, list[float]]:
        """id -> stored vector of the records of one store in `scope` (empty without an embedder)."""
        name = self.record_type(memory_type).memory_type
        if self.storage.embedder_name is None:
            return {}
        rows = await self.storage.rows(name, Where(scope).status_in((status,)).build(), columns=["id", "vector"])
        return {r["id"]: r["vector"] for r in rows if r.get("vector") is not None}

    async def embed_documents(self, texts: list[str]) -> list[list[float] | None]:
        """Vectors for `texts` with this memory's embedder (None each in full-text-only mode)."""
        return await self._vectors(texts)

    @staticmethod
    def associated_data(record: MemoryRecord) -> bytes:
        """What a secret of `record` is bound to when encrypted (its store, id and user)."""
        return Vault.associated_data(record)

    @property
    def uri(self) -> str:
        """Where this memory is stored (a directory or a LanceDB URI)."""
        return self.storage.uri

    async def stored_in(self, scope: Scope, memory_type: TypeRef) -> list[MemoryRecord]:
        """Every record of one store in `scope`, any status, as stored: secret fields are the
        ciphertext (what an export carries). Never hand these to a model."""
        name = self.record_type(memory_type).memory_type
        table = self.storage.type_table(name)
        return [table.to_record(row) for row in await self.storage.rows(name, Where(check.check_scope(scope)).build())]

    async def put_stored(self, memory_type: TypeRef, records: Sequence[MemoryRecord]) -> None:
        """Write records as they are: ids kept (a record already stored under its id is replaced),
        secret fields as given (already ciphertext), embedded here. No history row is written:
        this restores what an export carried, and its history comes with it (`restore_history`)."""
        name = self.record_type(memory_type).memory_type
        table = self.storage.type_table(name)
        vectors = await self._vectors([r.index_text() for r in records])
        await self.storage.upsert_rows(name, [table.to_row(r.model_copy(update={"text": r.search_text()}), v)
                                              for r, v in zip(records, vectors, strict=True)])

    async def raw_history(self, scope: Scope | None = None, *, ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """History rows as stored (before/after as JSON text): every row of `scope`, or of all
        scopes, narrowed to the rows with these `ids` when given."""
        where = Where(check.check_scope(scope) if scope is not None else None)
        if ids is not None:
            if not ids:
                return []
            where.id_in(list(ids))
        return await self.storage.raw_history(where.build() or "true")

    async def restore_history(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write history rows as given (an import's audit trail), replacing rows with the same id."""
        await self.storage.rewrite_history(list(rows))

    async def id_owners(self, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The store and user holding each of `ids`, in any store (an id held by none is left out)."""
        owners: dict[str, tuple[str, str]] = {}
        for start in range(0, len(ids), 1000):
            chunk = list(ids[start : start + 1000])
            for name in self.types:
                for row in await self.storage.rows(name, Where().id_in(chunk).build(), columns=["id", "user_id"]):
                    owners[row["id"]] = (name, row["user_id"])
        return owners

    async def erase(self, scope: Scope) -> dict[str, int]:
        """Delete every record and history row of `scope` for real, in every store. Returns how
        many were removed per store (and "history"). Old table versions and index entries still
        hold them until `purge` (which drops those versions and builds every index again);
        `memos.portability.forget_user` erases, then purges."""
        where = Where(check.check_scope(scope)).build()
        assert where is not None
        removed: dict[str, int] = {}
        for name in self.types:
            removed[name] = await self.storage.count(name, where)
            await self.storage.delete_rows(name, where)
        removed["history"] = len(await self.storage.raw_history(where))
        await self.storage.delete_history(where)
        return removed

    async def purge(self) -> bool:
        """Drop every old table version now (`Storage.purge_old_versions`); False if it was deferred."""
        return await self.storage.purge_old_versions()

    async def added_since(self, scope: Scope, memory_type: TypeRef, since: datetime | None) -> list[MemoryRecord]:
        """Active records of one store in `scope` added after `since` (their `created_at`; all
        when None), oldest first by when they were added."""
        name = self.record_type(memory_type).memory_type
        where = Where(check.check_scope(scope)).status_in(("active",)).time_range(
            "created_at", since + timedelta(microseconds=1) if since else None, None)
        table = self.storage.type_table(name)
        records = sorted((table.to_record(r) for r in await self.storage.rows(name, where.build())), key=lambda r: (r.created_at, r.id))
        return [self._redact(r) for r in records]

    async def job_rows(self, scope: Scope | None = None, *, kind: str | None = None) -> list[HistoryEntry]:
        """The history rows of background runs (`record_job`), oldest first: of `scope` (all when
        None), of one `kind` when given."""
        where = Where(check.check_scope(scope) if scope is not None else None).eq("op", "job")
        if kind:
            where.eq("record_id", kind)
        return await self.storage.history_rows(where.build())

    async def refresh(self) -> None:
        """Look at every table's latest version now (`Storage.refresh`): a long job sees other processes' writes."""
        await self.storage.refresh()

    async def maintain(self, *, min_rows: int | None = None) -> dict[str, Any]:
        """Compact every table and build the indexes it needs (`memos.store.lancedb.maintenance.maintain`)."""
        from memos.store.lancedb.maintenance import maintain

        return await maintain(self.storage, min_rows=min_rows)

    async def record_job(self, scope: Scope, kind: str, outcome: dict[str, Any], *, actor: str, note: str) -> None:
        """Append a background run's outcome to history (`op="job"`): what `memos inspect jobs` shows."""
        await self.storage.append_history([{
            "id": new_id(), "at": self.clock().astimezone(UTC), "op": "job", "memory_type": "job", "record_id": kind,
            "actor": actor, **scope.stamp(), "before": None, "after": json.dumps(outcome, default=str), "note": note,
        }])

    async def state(self, *, cached: bool = False) -> dict[str, str]:
        """The store's small key/value state (session and reflection state), read at once
        (`cached` as for `counts`)."""
        if cached and (found := self.reads.get(("state",))) is not FORGET:
            return dict(found)
        at = await self.storage.label(META)
        values = await self.storage.get_meta()
        self.reads.put(("state",), META, values, _state_added, at=at)
        return dict(values)

    async def set_state(self, key: str, value: str, *, behind: bool = False) -> None:
        """Write one state entry. `behind`: journaled now and written with the next batch of a
        chat's turns (`memos.store.lancedb.write_behind`; a session's own state), where the store has a journal."""
        if not (behind and self.storage.hold_state({key: value})):
            await self.storage.set_meta(key, value)

    async def delete_state(self, keys: list[str]) -> None:
        """Remove state entries (forgetting a user)."""
        await self.storage.delete_meta(keys)

    async def search(
        self,
        query: str,
        scope: Scope,
        types: Sequence[TypeRef] | None = None,
        k: int = 10,
        budget_tokens: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        tags: list[str] | None = None,
        include_inactive: bool = False,
        replies: bool = True,
        empty: Sequence[str] = (),
        exclude: Collection[str] = (),
    ) -> list[Hit]:
        """Hybrid search (vector + full-text, fused by rank, weighted by recency and importance).

        `types` defaults to `searchable_types`: every store but core (core blocks are always in
        the prompt; name "core" to search them too).

        Returns the `k` best hits, or with `budget_tokens` the best hits that fit the budget
        when rendered. Each hit carries its store, score parts and provenance. In a top-k
        search, a conversation turn that asks a question brings the reply it got right behind
        it (`replies`, an extra hit marked `reply_to`), and a statement and the answer to the
        follow-up question it drew bring each other (marked `exchange`; `memos.retrieval.replies`).

        `empty`: stores the caller knows hold no active record in `scope` (a chat step passes
        what its counts found): their queries are skipped.

        `exclude`: record ids left out of the candidates before they are ranked, as if they were
        not stored (a chat step's turns in context, the newest of which may be committing).
        """
        query, scope = check.check_query(query), check.check_scope(scope)
        k = check.check_int(k, "k", low=1, high=check.MAX_K)
        budget_tokens = check.check_budget(budget_tokens)
        tags, since, until = check.check_tags(tags), check.check_time(since, "since"), check.check_time(until, "until")
        check.check_bool(include_inactive, "include_inactive")
        check.check_bool(replies, "replies")
        if types is not None:
            _check_store_list(types, "types", Sequence)  # ordered: the stores are searched in this order
        _check_store_list(empty, "empty", Sequence | set | frozenset)
        if isinstance(exclude, str | bytes) or not all(isinstance(i, str) for i in exclude):
            raise ConfigError(f"exclude must be a collection of record ids, got {exclude!r}")
        names = [self.record_type(t).memory_type for t in (types or self.searchable_types)]
        statuses = _search_statuses(include_inactive, since, until)
        request = SearchRequest(
            query=query, scope=scope, types=names, k=k, budget_tokens=budget_tokens, since=since, until=until,
            tags=tags, statuses=statuses, policy=self.ranking, replies=replies,
            empty=frozenset(self.record_type(t).memory_type for t in empty) if statuses == ("active",) else frozenset(),
            exclude=frozenset(exclude),
        )
        with span("memos.search", user_id=scope.user_id, stores=len(names), k=k, budget_tokens=budget_tokens) as current:
            hits = await search(self.storage, self.embedder, request, self.clock(), self.tokenizer.count)
            current.set_attribute("hits", len(hits))
        for hit in hits:
            hit.record = self._redact(hit.record)  # ciphertext never leaves the kernel either
        return hits

    async def ingest(self, scope: Scope, messages: Iterable[Message | dict[str, Any]], *, actor: str = "ingest",
                     previous: Episode | None = None) -> list[Episode]:
        """Store conversation turns as episodic records (raw mode: no model), batched.

        Each turn is also found by the words of the turn before it (`previous` for the first)."""
        validate_value(actor, "actor")
        return await self.store_turns(scope, self.turn_episodes(scope, messages, previous=previous), actor=actor)

    def draw_ids(self, n: int) -> list[str]:
        """`n` fresh record ids (`new_id()`) for records this process adds later: a session names
        its next turns in its saved state before they exist. `add` does not look them up in every
        table as it does ids set by a caller (they are uuid4s no one else has); once used, an id
        is looked up again like any other."""
        ids = [new_id() for _ in range(n)]
        self._drawn.update(ids)
        return ids

    def turn_episodes(self, scope: Scope, messages: Iterable[Message | dict[str, Any]], *,
                      previous: Episode | None = None, ids: Sequence[str | None] = ()) -> list[Episode]:
        """The episodes `ingest` stores for `messages` (checked, stamped with the scope and now,
        their ids assigned), stored by `store_turns`; nothing is written here. A session knows its
        turn's id before the turn is stored, so it saves its state beside the turn's own commits.
        `ids`: ids from `draw_ids` for the first episodes (None: a fresh one)."""
        check.check_scope(scope)
        if isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable):
            raise InvalidRecordError(f"messages must be a list of messages (dicts or Message), got {type(messages).__name__}")
        if previous is not None and not isinstance(previous, Episode):
            raise InvalidRecordError(f"previous must be an Episode or None, got {type(previous).__name__}")
        try:
            episodes = episodes_from_messages(messages, scope, self.clock(), previous=previous)
            return [e.model_copy(update={"id": i}) if i else e for e, i in itertools.zip_longest(episodes, ids[: len(episodes)])]
        except ValidationError as exc:
            raise InvalidRecordError(f"a message cannot be stored as an episode: {check.describe_errors(exc)}") from None

    async def store_turns(self, scope: Scope, episodes: Sequence[Episode], *, actor: str = "ingest",
                          behind: bool = False) -> list[Episode]:
        """Store the episodes `turn_episodes` built (batched; in raw mode linked to the entities
        they name, when `entity_links` is on); returns them. `behind`: they are journaled and written
        to their tables in batches a moment later (`memos.store.lancedb.write_behind`: a chat's turns)."""
        episodes = list(episodes)
        for start in range(0, len(episodes), INGEST_CHUNK):
            chunk = episodes[start : start + INGEST_CHUNK]
            await self._add(scope, chunk, actor=actor, behind=behind)
            if self.entity_links and "entity" in self.types:  # raw-mode entity links (memos.graph.entities)
                await self.graph.link(scope, chunk, actor=actor)
        return episodes

    # --- maintenance ---------------------------------------------------------------------

    async def reindex(self, embedder: Any = "local", *, progress: Callable[[int, int], None] | None = None) -> int:
        """Re-embed every record with `embedder` (e.g. after changing embedders); returns rows done.

        `progress(done, total)` is called as records are embedded."""
        new = await resolve_embedder(embedder)
        if new is None:
            raise ConfigError("reindex needs an embedder")
        from memos.store.lancedb.reindex import rebuild_tables

        done = await rebuild_tables(self.storage, new, progress)
        self.embedder = new
        return done

    def scheduler(self, *, model: Any = None, mode: str = "thread", jobs_url: str | None = None,
                  clock: Callable[[], datetime] | None = None) -> MemoryScheduler:
        """The background job scheduler of this store, run in this process (created and started on first call).

        Jobs persist in `<store>.jobs.sqlite`; add them per scope with
        `mem.scheduler().add("reflect", scope, every=timedelta(minutes=30))`. `model` is what
        reflection and consolidation use (None: raw mode); the jobs it runs use this open memory.
        `mode="manual"` runs nothing by itself: call `run_due()` after moving the clock (tests).
        See `memos.jobs.scheduler`.
        """
        from memos.jobs.scheduler import MemoryScheduler

        current = self._scheduler
        if current is None or not current.running:
            current = self._scheduler = MemoryScheduler(self.uri, jobs_url=jobs_url, clock=clock or self.clock, mode=mode,
                                                        memory=self, model=model).start()
        return current

    @property
    def backend(self) -> ModelBackend:
        """What reflection, conflict judgement and `agent` ask of a model: the backend given to
        `open`, else `DEFAULT_BACKEND` (memos' pydantic-ai agents), resolved on first use by its
        name, so `import memos` and raw mode never load pydantic-ai and nothing below the agents
        imports them."""
        if self._backend is None:
            module, _, name = DEFAULT_BACKEND.partition(":")
            self._backend = backend = getattr(importlib.import_module(module), name)()
            return backend
        return self._backend

    def agent(self, model: Any, scope: Scope | str, **options: Any) -> MemoryAgent:
        """A ready chat agent (`memos.agents.chat.ChatAgent`) over `scope`: `await agent.chat("hi")` or `chat_sync`.

        `model` is any pydantic-ai model or model string; options: budget, manager_model,
        manage_every, approve, usage_limits, instructions. Its conversation resumes after a restart.
        """
        return self.backend.chat_agent(self, scope if isinstance(scope, Scope) else Scope(scope), model, **options)

    async def session(self, scope: Scope, **options: Any) -> MemorySession[MemoryOS]:
        """The working context of `scope` (`memos.context.session.MemorySession`), resumed from the store."""
        from memos.context.session import MemorySession

        return await MemorySession.open(self, check.check_scope(scope), **options)

    # --- internals -----------------------------------------------------------------------

    async def _check_ids_free(self, records: list[MemoryRecord]) -> None:
        """Ids set explicitly must be unused in every table (one `id IN (...)` query per table).

        Ids left to `new_id()` are fresh uuid4s and are not looked up, so bulk ingest pays nothing."""
        explicit = [r.id for r in records if "id" in r.model_fields_set and r.id not in self._drawn]
        self._drawn.difference_update(r.id for r in records)
        for start in range(0, len(explicit), 1000):
            chunk = explicit[start : start + 1000]
            for name in self.storage.memory_types():
                taken = await self.storage.rows(name, Where().id_in(chunk).build(), columns=["id"], limit=1)
                if taken:
                    raise DuplicateIdError(taken[0]["id"])

    def stamp(self, record: MemoryRecord) -> datetime:
        """The `updated_at` of a new version of `record`: now, and always later than the version
        read, so the next conditional write can tell the two apart even under a stopped clock."""
        return max(self.clock(), record.updated_at + timedelta(microseconds=1))

    @staticmethod
    async def _optimistic(attempt: Callable[[], Any]) -> Any:
        """Run a read-modify-write until it commits on the version it read (`OCC_ATTEMPTS` tries)."""
        for tries in range(OCC_ATTEMPTS):
            try:
                return await attempt()
            except RecordChangedError:
                if tries == OCC_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _revalidate(self, record: R, changes: dict[str, Any]) -> R:
        data = {**record.model_dump(), **changes}
        try:
            return type(record).model_validate(data)
        except ValidationError as exc:
            raise InvalidRecordError(f"invalid {record.memory_type} record: {exc}") from None

    async def _load(self, scope: Scope, memory_type: TypeRef, record_id: str) -> MemoryRecord:
        name = self.record_type(memory_type).memory_type
        where = Where(check.check_scope(scope)).id_in([validate_record_id(record_id)]).build()
        rows = await self.storage.rows(name, where, limit=1)
        if not rows:
            raise RecordNotFoundError(f"no {name} record {record_id!r} in scope {scope}")
        return self.storage.type_table(name).to_record(rows[0])

    def _seal(self, record: R, fresh: set[str] | None = None) -> R:
        """Encrypt secret fields that hold clear text (`Vault.seal`) and set `text` from search_text()."""
        sealed = self.vault.seal(record, fresh)
        return sealed.model_copy(update={"text": sealed.search_text()})

    def _redact(self, record: R) -> R:
        return self.vault.redact(record)

    # --- the vault: `memos.vault.Vault` does the work ------------------------------------

    def cipher(self) -> Any:
        """The vault cipher (the key is loaded, or created, on first use; `Vault.cipher`)."""
        return self.vault.cipher()

    @property
    def key_file(self) -> Path:
        """The vault key file (`Vault.key_file`): the one passed to `open`, else the store's own."""
        return self.vault.key_file

    async def rotate_vault_key(self, new_key: bytes | None = None) -> int:
        """Re-encrypt every vault secret (all users) under a new key; returns the secrets re-encrypted
        (`Vault.rotate_key`: crash-safe, an interrupted rotation is finished by running it again)."""
        return await self.vault.rotate_key(new_key, attempts=OCC_ATTEMPTS)

    async def reveal(self, scope: Scope, record_id: str, *, approved_by: str, clearance: str = "high") -> str:
        """Decrypt a vault item's secret. Callers must have obtained approval; it is logged (without the value).

        `clearance` ("low" / "medium" / "high") is the most sensitive level this caller may see:
        an item above it is refused (`VaultAccessError`) and the refusal is logged too (`Vault.reveal`).
        """
        return await self.vault.reveal(scope, record_id, approved_by=approved_by, clearance=clearance)

    async def stored(self, scope: Scope, memory_type: TypeRef, record_id: str) -> MemoryRecord:
        """One record as stored, secret fields still encrypted (the vault decrypts from it; never
        hand it to a model). `RecordNotFoundError` if it is not in `scope`."""
        return await self._load(scope, memory_type, record_id)

    async def _write(
        self, name: str, records: list[MemoryRecord], op: str, actor: str, *,
        before: dict[str, MemoryRecord] | None, vectors_from: MemoryRecord | None = None, note: str | None = None,
        history: list[dict[str, Any]] | None = None, vectors: list[list[float] | None] | None = None,
    ) -> None:
        """Write `records` to store `name` and audit them (into `history` when given: the caller
        appends those rows itself, once for several stores). `vectors`: already embedded."""
        if vectors is None and vectors_from is not None:
            vectors = await self._stored_vectors(name, [vectors_from.id])
        elif vectors is None:
            vectors = await self._vectors([r.index_text() for r in records])
        rows = self._rows(name, records, vectors)
        if op == "add":
            await self.storage.add_rows(name, rows)
        else:  # only the version that was read is replaced; a deleted record stays deleted
            assert before is not None, f"a {op} must name the versions it read"
            await self.storage.update_rows(name, rows, {r.id: before[r.id].updated_at for r in records})
        audit = self._history_rows(records, op, actor, before=before, note=note)
        if history is not None:
            history.extend(audit)
        else:
            await self.storage.append_history(audit)

    def _rows(self, name: str, records: Sequence[MemoryRecord], vectors: Sequence[list[float] | None]) -> list[dict[str, Any]]:
        """The table rows of `records` in store `name`, with their vectors."""
        table = self.storage.type_table(name)
        return [table.to_row(r, v) for r, v in zip(records, vectors, strict=True)]

    def _history_rows(self, records: Sequence[MemoryRecord], op: str, actor: str, *,
                      before: dict[str, MemoryRecord] | None, note: str | None = None) -> list[dict[str, Any]]:
        """The history rows of `op` on `records` (each `before` the version it replaced)."""
        now = self.clock()
        return [history_row(op, r, actor, _audit(before.get(r.id)) if before else None, _audit(r), max(now, r.updated_at), note)
                for r in records]

    async def _vectors(self, texts: list[str]) -> list[list[float] | None]:
        """One vector per text; a text that occurs several times is embedded once."""
        if self.embedder is None:
            return [None] * len(texts)
        distinct = list(dict.fromkeys(texts))
        if len(distinct) == len(texts):
            return list(await self.embedder.embed_documents(texts))
        by_text = dict(zip(distinct, await self.embedder.embed_documents(distinct), strict=True))
        return [by_text[t] for t in texts]

    async def _stored_vectors(self, name: str, ids: list[str]) -> list[list[float] | None]:
        rows = await self.storage.rows(name, Where().id_in(ids).build(), columns=["id", "vector"])
        by_id = {r["id"]: r["vector"] for r in rows}
        return [by_id.get(i) for i in ids]

    # `list` comes last: below it, the class body's annotations would read `list` as this method
    @overload
    async def list(self, scope: Scope, memory_type: type[R], *, status: str | Sequence[str] | None = "active",
                   tags: list[str] | None = None, since: datetime | None = None, until: datetime | None = None,
                   limit: int | None = 100) -> list[R]: ...
    @overload
    async def list(self, scope: Scope, memory_type: str, *, status: str | Sequence[str] | None = "active",
                   tags: list[str] | None = None, since: datetime | None = None, until: datetime | None = None,
                   limit: int | None = 100) -> list[MemoryRecord]: ...
    async def list(
        self,
        scope: Scope,
        memory_type: TypeRef,
        *,
        status: str | Sequence[str] | None = "active",
        tags: list[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = 100,
    ) -> list[Any]:
        """Records of one store in `scope`, oldest first by their time field."""
        check.check_scope(scope)
        record_type = self.record_type(memory_type)
        statuses = check.check_statuses(status)
        tags, since, until = check.check_tags(tags), check.check_time(since, "since"), check.check_time(until, "until")
        limit = check.check_int(limit, "limit", low=0, high=2**31, optional=True)
        where = Where(scope).status_in(statuses).tags_any(tags).time_range(record_type.time_field, since, until).build()
        table = self.storage.type_table(record_type.memory_type)
        rows = await self.storage.rows(record_type.memory_type, where)
        records = sorted((table.to_record(r) for r in rows), key=lambda r: (r.event_time(), r.id))
        return [self._redact(r) for r in (records[:limit] if limit is not None else records)]

    # --- the synchronous twins (`memos._sync`) -------------------------------------------

    open_sync = sync_classmethod_twin(open)
    add_sync = sync_twin(add)
    update_sync = sync_twin(update)
    supersede_sync = sync_twin(supersede)
    merge_into_sync = sync_twin(merge_into)
    archive_sync = sync_twin(archive)
    delete_sync = sync_twin(delete)
    get_sync = sync_twin(get)
    history_sync = sync_twin(history)
    counts_sync = sync_twin(counts)
    list_in_sync = sync_twin(list_in)
    check_versions_sync = sync_twin(check_versions)
    get_many_sync = sync_twin(get_many)
    restamp_sync = sync_twin(restamp)
    stored_vectors_sync = sync_twin(stored_vectors)
    embed_documents_sync = sync_twin(embed_documents)
    stored_in_sync = sync_twin(stored_in)
    put_stored_sync = sync_twin(put_stored)
    raw_history_sync = sync_twin(raw_history)
    restore_history_sync = sync_twin(restore_history)
    id_owners_sync = sync_twin(id_owners)
    erase_sync = sync_twin(erase)
    purge_sync = sync_twin(purge)
    added_since_sync = sync_twin(added_since)
    job_rows_sync = sync_twin(job_rows)
    refresh_sync = sync_twin(refresh)
    maintain_sync = sync_twin(maintain)
    record_job_sync = sync_twin(record_job)
    state_sync = sync_twin(state)
    set_state_sync = sync_twin(set_state)
    delete_state_sync = sync_twin(delete_state)
    search_sync = sync_twin(search)
    ingest_sync = sync_twin(ingest)
    store_turns_sync = sync_twin(store_turns)
    reindex_sync = sync_twin(reindex)
    session_sync = sync_twin(session)
    rotate_vault_key_sync = sync_twin(rotate_vault_key)
    reveal_sync = sync_twin(reveal)
    stored_sync = sync_twin(stored)
    list_sync = sync_twin(list)


def _check_store_list(value: object, what: str, kinds: Any) -> None:
    """A collection (of `kinds`) of store names or record types; a lone name is the usual slip."""
    if isinstance(value, str | type) or not isinstance(value, kinds):
        raise ConfigError(f"{what} must be a list of store names, got {value!r}")


def _search_statuses(include_inactive: bool, since: datetime | None, until: datetime | None) -> tuple[str, ...]:
    """A query about a past window also sees facts superseded since (they were true then); archived stays out."""
    if include_inactive:
        return ("active", "superseded", "archived")
    return ("active", "superseded") if since is not None or until is not None else ("active",)


def _count_added(scope: Scope, statuses: tuple[str, ...] | None) -> Callable[[int, Sequence[dict[str, Any]]], int]:
    """A remembered count carried past an add: plus the added rows it counts."""
    def rule(count: int, added: Sequence[dict[str, Any]]) -> int:
        return count + sum(1 for r in added if scope.contains(r["user_id"], r["agent_id"], r["session_id"])
                           and (statuses is None or r.get("status") in statuses))
    return rule


def _unless_added(scopes: Sequence[Scope], statuses: tuple[str, ...]) -> Callable[[Any, Sequence[dict[str, Any]]], Any]:
    """Remembered records carried past an add that none of the added rows joins (else forgotten)."""
    def rule(records: Any, added: Sequence[dict[str, Any]]) -> Any:
        joins = any(any(s.contains(r["user_id"], r["agent_id"], r["session_id"]) for s in scopes)
                    and (not statuses or r.get("status") in statuses) for r in added)
        return FORGET if joins else records
    return rule


def _state_added(values: dict[str, str], added: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The remembered state carried past this process's own state writes."""
    return {**values, **{r["key"]: r["value"] for r in added}}


def _audit(record: MemoryRecord | None) -> dict[str, Any] | None:
    """A record as history keeps it: no vector; secret fields only as stored (ciphertext)."""
    return None if record is None else record.model_dump(mode="json")


_UNSCOPED = {"record_type", "scoped", "cipher", "open", "scheduler", "agent", "restamp", "embed_documents",
             "associated_data", "state", "set_state", "delete_state", "check_versions", "stamp", "put_stored",
             "raw_history", "restore_history", "id_owners", "purge", "job_rows", "refresh", "maintain"}
"""Facade methods that take no scope: a scoped view passes them through unchanged."""


class ScopedMemory:
    """`MemoryOS` bound to one scope: the same methods without the scope argument."""

    def __init__(self, memory: MemoryOS, scope: Scope) -> None:
        self.memory = memory
        self.scope = scope

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.memory, name)
        if not callable(method) or name.removesuffix("_sync") in _UNSCOPED:
            return method
        scope = self.scope

        def bound(*args: Any, **kwargs: Any) -> Any:
            if name.startswith("search"):  # search(query, scope, ...) takes the scope second
                return method(args[0] if args else kwargs.pop("query"), scope, *args[1:], **kwargs)
            return method(scope, *args, **kwargs)

        bound.__name__ = name
        bound.__doc__ = method.__doc__
        return bound
