"""`MemoryOS`: the facade over the typed stores, retrieval and the audit trail.

Everything a user, an agent's tools or a background job does to memory goes through here,
always inside one `Scope`. Every mutation appends to history. Vault secrets are encrypted
before they reach a table and come back redacted; only `reveal` decrypts (`memos.vault`).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from memos.context.block_labels import check_successor
from memos.jobs.merging import SUPERSEDE, superseded_marks
from memos.retrieval.ranking import Hit, RankingPolicy
from memos.retrieval.search import SearchRequest, search
from memos.store.history import HistoryEntry
from memos.store.lancedb.deletion import delete_record, finish_deletes
from memos.store.lancedb.opening import open_storage
from memos.store.lancedb.storage import Storage
from memos.store.scope import Scope, Where, validate_record_id, validate_value

from . import validation as check
from ._sync import check_sync_twins, sync_classmethod_twin, sync_twin
from .embeddings import TextEmbedder, resolve_embedder
from .exceptions import (
    ConfigError,
    InvalidRecordError,
    RecordChangedError,
    RecordNotFoundError,
    RecordSupersededError,
    UnknownMemoryTypeError,
)
from .ingest import Message
from .memtypes import BUILTIN_TYPES, Episode, MemoryRecord
from .model_backend import MemoryAgent, ModelBackend
from .passages import delete_passages
from .records import OCC_ATTEMPTS, R, TypeRef
from .services import KernelServices
from .telemetry import span
from .tokens import Tokenizer, tokenizer_for
from .vault import Vault, default_key_file

if TYPE_CHECKING:
    from memos.context.session import MemorySession
    from memos.graph.entities import EntityGraph
    from memos.jobs.scheduler import MemoryScheduler

__all__ = ["DEFAULT_BACKEND", "MemoryOS", "ScopedMemory", "default_key_file"]

log = logging.getLogger("memos")


def _default_clock() -> datetime:
    return datetime.now(UTC)


DEFAULT_BACKEND = "memos.agents.backend:PydanticAIBackend"
"""The model backend a `MemoryOS` opened without `backend=` uses (module:class, built on first use):
the agents sit a floor above the facade, which names them here instead of importing them."""

@check_sync_twins
class MemoryOS(KernelServices):
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
        await finish_deletes(storage)  # a delete a stopped process cut short (memos.store.lancedb.deletion)
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
        other fields (`InvalidRecordError`); a core block's label must be free in `scope` (`DuplicateBlockError`).
        A new record is not superseded already (`check_not_superseded`)."""
        return await self._add(scope, records, actor=actor)

    @overload
    async def update(self, scope: Scope, memory_type: type[R], record_id: str, changes: dict[str, Any], *,
                     actor: str = "user", clearance: str = "high", approved_by: str | None = None) -> R: ...
    @overload
    async def update(self, scope: Scope, memory_type: str, record_id: str, changes: dict[str, Any], *,
                     actor: str = "user", clearance: str = "high", approved_by: str | None = None) -> MemoryRecord: ...
    async def update(self, scope: Scope, memory_type: TypeRef, record_id: str, changes: dict[str, Any], *, actor: str = "user",
                     clearance: str = "high", approved_by: str | None = None) -> MemoryRecord:
        """Change fields of a record; returns the updated record.

        The write is conditional on the version read: if another writer (a job, another process)
        changed the record meanwhile, the changes are applied again to the fresh record; if it
        was deleted, `RecordNotFoundError`. An update is never overwritten by a stale copy.

        A vault item's secret and sensitivity change only within the caller's `clearance`, and
        its sensitivity is lowered only with `approved_by`, as for `reveal` (`Vault.check_change`:
        a refusal is audited and raises `VaultAccessError`).

        The lifecycle fields (status, superseded_by, source_ids, valid_to; and valid_from of a
        superseded record) are refused with `InvalidRecordError` naming the operation that changes
        them: `supersede`, `merge_into`, `archive` or `delete`."""
        return await self._change(scope, memory_type, record_id, changes, actor=actor, clearance=clearance,
                                  approved_by=approved_by, lifecycle=False)

    async def supersede(self, scope: Scope, memory_type: TypeRef, old_id: str, new: R, *, actor: str = "user") -> R:
        """Replace a record by a new one: the old closes its validity and links its successor."""
        check.check_scope(scope)
        check.check_record(new)
        async with self.exclusive(f"supersede\x1f{validate_record_id(old_id)}"):  # one successor a record, whoever asks at once
            old = _supersedable(await self._load(scope, memory_type, old_id), new)
            now = self.clock()
            new = new if new.valid_from is not None else self._revalidate(new, {"valid_from": now})
            owner = Scope(old.user_id, old.agent_id or None, old.session_id or None)  # the successor is where the old one was
            [added] = await self._add(owner, new, actor=actor, superseding=old.status == "active")  # its label (_supersedable)

            async def close(old: MemoryRecord | None = old) -> None:
                old = old or await self._load(scope, memory_type, old_id)
                closed = self._revalidate(old, {**superseded_marks(added.id, now), "updated_at": self.stamp(old)})
                await self._write(old.memory_type, [closed], SUPERSEDE, actor, before={old.id: old}, vectors_from=old)

            undo = functools.partial(self.delete, owner, added.memory_type, added.id, actor=actor)
            try:
                await close()
            except RecordChangedError:  # changed since it was read (an update): close the fresh copy; deleted: no successor stays
                await self._optimistic(lambda: _or_undo(close(None), undo))
            return added

    async def delete(self, scope: Scope, memory_type: TypeRef, record_id: str, *, actor: str = "user") -> None:
        """Delete a record for real, its history included (right to be forgotten).

        Crash-safe (`memos.store.lancedb.deletion`): a delete cut short is finished by the next open, maintenance
        or a retry, which succeeds while anything of the record is left in `scope`;
        `RecordNotFoundError` once nothing is."""
        check.check_scope(scope)
        name = self.record_type(memory_type).memory_type
        await delete_passages(self.storage, scope, name, [validate_record_id(record_id)])  # first: none outlives its turn
        if not await delete_record(self.storage, scope, name, validate_record_id(record_id)):
            raise RecordNotFoundError(f"no {name} record {record_id!r} in scope {scope}")

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

    # --- for the kernel's own services (session, jobs, portability): public, so none reaches around

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
        now: datetime | None = None,
    ) -> list[Hit]:
        """Hybrid search (vector + full-text, fused by rank, weighted by recency and importance).

        `types` defaults to `searchable_types`: every store but core (core blocks are always in
        the prompt; name "core" to search them too).

        Returns the `k` best hits, or with `budget_tokens` the best hits that fit the budget
        when rendered. Each hit carries its store, score parts and provenance. In a top-k
        search, a conversation turn that asks a question carries the reply it got (`replies`:
        in `hit.attached`, marked `reply_to`; still k hits), and a statement and the answer to
        the follow-up question it drew carry each other (marked `exchange`; `memos.retrieval.replies`).

        `empty`: stores the caller knows hold no active record in `scope` (a chat step passes
        what its counts found): their queries are skipped.

        `exclude`: record ids left out of the candidates before they are ranked, as if they were
        not stored (a chat step's turns in context, the newest of which may be committing).
        `now`: when the question is asked (default: the clock); "last week" and recency count from it.
        """
        query, scope = check.check_query(query), check.check_scope(scope)
        k = check.check_int(k, "k", low=1, high=check.MAX_K)
        budget_tokens = check.check_budget(budget_tokens)
        tags, since, until = check.check_tags(tags), check.check_time(since, "since"), check.check_time(until, "until")
        now = check.check_time(now, "now")
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
            hits = await self.searches.run(search(self.storage, self.embedder, request, now or self.clock(), self.tokenizer.count))
            current.set_attribute("hits", len(hits))
        for hit in hits:
            hit.record = self._redact(hit.record)  # ciphertext never leaves the kernel either
        return hits

    async def ingest(self, scope: Scope, messages: Iterable[Message | dict[str, Any]], *, actor: str = "ingest",
                     previous: Episode | None = None, progress: Callable[[int], None] | None = None) -> list[Episode]:
        """Store conversation turns as episodic records (raw mode: no model), batched.

        Each turn is also found by the words of the turn before it (`previous` for the first).
        `progress(n)` is called as each batch of n turns is stored."""
        validate_value(actor, "actor")
        return await self.store_turns(scope, self.turn_episodes(scope, messages, previous=previous), actor=actor,
                                      progress=progress)

    # --- maintenance ---------------------------------------------------------------------

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
        """The working context of `scope` (`memos.context.session.MemorySession`), resumed; options: `MemorySession.open`'s."""
        from memos.context.session import MemorySession
        return await MemorySession.open(self, check.check_scope(scope),
                                        **check.check_options(MemorySession.open, options, "MemoryOS.session"))

    # --- internals -----------------------------------------------------------------------

    # --- the vault: `memos.vault.Vault` does the work ------------------------------------

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
    delete_sync = sync_twin(delete)
    get_sync = sync_twin(get)
    history_sync = sync_twin(history)
    search_sync = sync_twin(search)
    ingest_sync = sync_twin(ingest)
    session_sync = sync_twin(session)
    rotate_vault_key_sync = sync_twin(rotate_vault_key)
    reveal_sync = sync_twin(reveal)
    list_sync = sync_twin(list)


def _check_store_list(value: object, what: str, kinds: Any) -> None:
    """A collection (of `kinds`) of store names or record types; a lone name is the usual slip."""
    if isinstance(value, str | type) or not isinstance(value, kinds):
        raise ConfigError(f"{what} must be a list of store names, got {value!r}")


async def _or_undo(step: Awaitable[None], undo: Callable[[], Awaitable[None]]) -> None:
    """`step`; if the record it closes was deleted meanwhile (`RecordNotFoundError`), `undo` first (a
    supersede that lost a race with a delete leaves no successor behind), then the error."""
    try:
        await step
    except RecordNotFoundError:
        await undo()
        raise


def _supersedable(old: MemoryRecord, new: MemoryRecord) -> MemoryRecord:
    """`old`, if `new` may supersede it: of the same type (a core block: of the same label), and not superseded
    already (its successor is the current version: `RecordSupersededError` names it)."""
    if type(new) is not type(old):
        raise InvalidRecordError(f"a {old.memory_type} record can only be superseded by another {old.memory_type} record")
    check_successor(old, new)
    if old.status == "superseded":
        raise RecordSupersededError(old.memory_type, old.id, old.superseded_by)
    return old


def _search_statuses(include_inactive: bool, since: datetime | None, until: datetime | None) -> tuple[str, ...]:
    """A query about a past window also sees facts superseded since (they were true then); archived stays out."""
    if include_inactive:
        return ("active", "superseded", "archived")
    return ("active", "superseded") if since is not None or until is not None else ("active",)


_UNSCOPED = {"record_type", "scoped", "cipher", "open", "scheduler", "agent", "restamp", "embed_documents",
             "associated_data", "state", "set_state", "delete_state", "state_epoch", "exclusive", "check_versions", "stamp", "put_stored",
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
