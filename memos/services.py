"""What the kernel's own parts ask of an open memory: the vault, export and import, the jobs, the
entity graph and the session read and write through these (stored rows and vectors, history,
state, ids, maintenance), each inside the scope it is given.

`KernelServices` sits between `RecordAccess` (the plumbing) and `memos.memory.MemoryOS` (what users
call), so the facade's own class stays the public surface."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from pydantic import ValidationError

from memos.jobs.merging import MERGE, merge_note, merged_marks
from memos.store.history import HistoryEntry
from memos.store.lancedb.storage import META
from memos.store.read_cache import FORGET, ReadCache
from memos.store.scope import Scope, Where, validate_record_id, validate_value

from . import validation as check
from ._sync import check_sync_twins, sync_twin
from .embeddings import LOCAL_BATCH, resolve_embedder
from .exceptions import ConfigError, InvalidRecordError, RecordChangedError, RecordNotFoundError
from .ingest import Message, episodes_from_messages
from .memtypes import Episode, MemoryRecord, new_id
from .passages import turn_passages
from .time_bounds import shift
from .vault import Vault

if TYPE_CHECKING:
    from memos.graph.entities import EntityGraph



_BOOKKEEPING = {"status", "valid_from", "valid_to", "superseded_by", "source_ids", "tags", "importance",
                "access_count", "last_accessed"}
INGEST_CHUNK = LOCAL_BATCH
"""Turns `ingest` embeds and writes at once: one call of the local encoder, which pads less the
more texts a call holds; `memos ingest` of LOCOMO dev ran at 105-107 turns/s 256 at a time and
116-119 at 1,024."""
EMBED_AHEAD = 4
"""Chunks a remote embedder (one that takes several requests at once) embeds ahead of the one
being written: a chunk's last batch may wait out a rate limit's `Retry-After`, and the chunks
behind it use the free request slots meanwhile. The in-process encoders embed one chunk ahead."""





from .records import R, RecordAccess, TypeRef

__all__ = ["EMBED_AHEAD", "INGEST_CHUNK", "KernelServices"]


@check_sync_twins
class KernelServices(RecordAccess):
    """Rows, vectors, history, state and maintenance for the kernel's own parts (see the module docstring)."""

    if TYPE_CHECKING:  # declared for the checker; `MemoryOS` defines it
        @property
        def graph(self) -> EntityGraph: ...

    async def merge_into(self, scope: Scope, memory_type: TypeRef, record_id: str, survivor_id: str, *, actor: str = "user",
                         reason: str = "duplicate") -> MemoryRecord:
        """Merge a record into another that says the same (`memos.jobs.merging`): it is archived,
        linked to `survivor_id` and tagged `merged`, in history as op "merge". Its text and
        vector are kept. Re-applied to a record another writer changed meanwhile."""
        check.check_scope(scope)
        validate_record_id(survivor_id)
        validate_value(actor, "actor")
        validate_value(reason, "reason")
        await self._load(Scope(scope.user_id), memory_type, survivor_id)  # one of the user's (RecordNotFoundError otherwise)

        async def attempt() -> MemoryRecord:
            record = await self._load(scope, memory_type, record_id)
            marked = await self.restamp(_mergeable(record, survivor_id), merged_marks(record, survivor_id), op=MERGE, actor=actor,
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

    async def counts(self, scope: Scope, *, status: str | None = "active", cached: bool = False) -> dict[str, int]:
        """Number of records per store in `scope`.

        `cached`: a store whose table has not changed since the last `check_versions` (or has
        only had records added by this process) is not counted again."""
        check.check_scope(scope)
        statuses = (check.check_status(status),) if status is not None else None
        where = Where(scope).status_in(statuses).build()
        known: dict[str, Any] = {name: self.reads.get(("count", name, scope, status)) if cached else FORGET for name in self.types}
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
        statuses = check.check_statuses(status)
        key = ("list_in", record_type.memory_type, check.check_scopes(scopes), statuses)
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
        statuses = check.check_statuses(status)
        rows = await self.storage.rows(name, Where(check.check_scope(scope)).id_in(list(ids)).status_in(statuses).build())
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
        rows = await self.storage.rows(name, Where(check.check_scope(scope)).status_in((check.check_status(status),)).build(),
                                       columns=["id", "vector"])
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
        where = Where().raw(check.check_scope(scope).exact_where()).condition()  # an agent's own: never the shared records
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
            "created_at", shift(since, timedelta(microseconds=1)) if (since := check.check_time(since, "since")) else None, None)
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
        """Compact every table and build the indexes it needs (`memos.store.lancedb.maintenance.maintain`);
        move vault secrets still under a rotated-out key to the current one (`Vault.reseal_stale`)."""
        from memos.store.lancedb.maintenance import maintain

        out = await maintain(self.storage, min_rows=check.check_int(min_rows, "min_rows", low=0, high=10**9, optional=True),
                             now=self.clock())
        if resealed := await self.vault.reseal_stale():
            out["vault_resealed"] = resealed
        return out

    async def record_job(self, scope: Scope, kind: str, outcome: dict[str, Any], *, actor: str, note: str) -> None:
        """Append a background run's outcome to history (`op="job"`): what `memos inspect jobs` shows."""
        await self.storage.append_history([{
            "id": new_id(), "at": self.clock().astimezone(UTC), "op": "job", "memory_type": "job", "record_id": validate_value(kind, "kind"),
            "actor": validate_value(actor, "actor"), **check.check_scope(scope).stamp(), "before": None,
            "after": json.dumps(outcome, default=str), "note": note,
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
        check.check_state_entry(key, value)
        if not (behind and self.storage.hold_state({key: value})):
            await self.storage.set_meta(key, value)

    async def delete_state(self, keys: list[str]) -> None:
        """Remove state entries (forgetting a user)."""
        await self.storage.delete_meta(keys)

    def exclusive(self, key: str) -> AbstractAsyncContextManager[None]:
        """Held by one task of one process of the store at a time, for `key` (any string): a chat
        session's turns recorded by several server workers. Across processes on a local store; on
        object storage within this process only."""
        return self.storage.locks.hold(key)

    def state_epoch(self, family: str) -> Hashable | None:
        """A token that changes when another process writes or removes a state entry whose key is
        of `family` (the key up to its first ':'): a process caching such entries re-reads them
        then instead of on a timer. None where the store cannot tell (object storage)."""
        return self.storage.meta_epoch(family)

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
                          behind: bool = False, progress: Callable[[int], None] | None = None) -> list[Episode]:
        """Store the episodes `turn_episodes` built (batched; in raw mode linked to the entities
        they name, when `entity_links` is on); returns them. `behind`: they are journaled and written
        to their tables in batches a moment later (`memos.store.lancedb.write_behind`: a chat's turns).

        The next batch is embedded while this one is written (the encoder and LanceDB overlap;
        a remote embedder `EMBED_AHEAD` batches); `progress(n)` hears of a batch once it is
        stored, and a failure stores nothing more."""
        episodes = list(episodes)
        chunks = [episodes[start : start + INGEST_CHUNK] for start in range(0, len(episodes), INGEST_CHUNK)]
        # a long turn is stored with its passages, in the same call (memos.passages)
        passages = "passage" in self.types
        records: list[list[MemoryRecord]] = [[*c, *(turn_passages(c, self.tokenizer.count) if passages else [])] for c in chunks]

        async def embed(chunk: list[MemoryRecord]) -> dict[str, list[float] | None]:
            texts = list(dict.fromkeys(e.index_text() for e in chunk))
            return dict(zip(texts, await self._vectors(texts), strict=True))

        remote = self.embedder is not None and self.embedder.requests.max_in_flight > 1
        depth = EMBED_AHEAD if remote else 1
        ahead: collections.deque[asyncio.Future[dict[str, list[float] | None]]] = collections.deque()
        try:
            for index, chunk in enumerate(chunks):
                for later in records[index + len(ahead) : index + 1 + depth]:  # this chunk and `depth` after it
                    ahead.append(asyncio.ensure_future(embed(later)))
                vectors = await ahead.popleft()
                await self._add(scope, records[index], actor=actor, behind=behind, vectors=vectors)
                if self.entity_links and "entity" in self.types:  # raw-mode entity links (memos.graph.entities)
                    await self.graph.link(scope, chunk, actor=actor)
                if progress is not None:
                    progress(len(chunk))
        finally:
            for task in ahead:
                task.cancel()
            await asyncio.gather(*ahead, return_exceptions=True)
        return episodes

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

    merge_into_sync = sync_twin(merge_into)
    archive_sync = sync_twin(archive)
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
    store_turns_sync = sync_twin(store_turns)
    reindex_sync = sync_twin(reindex)


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


def _mergeable(record: MemoryRecord, survivor_id: str) -> MemoryRecord:
    """`record`, if it may be merged into `survivor_id`: another record, and active (a superseded one
    keeps its successor's link, a merged one its survivor's)."""
    if survivor_id == record.id:
        raise InvalidRecordError(f"record {record.id} cannot be merged into itself")
    if record.status != "active":
        raise InvalidRecordError(f"{record.memory_type} record {record.id} is {record.status}"
                                 + (f" (its successor or survivor is {record.superseded_by})" if record.superseded_by else "")
                                 + "; only an active record is merged")
    return record
