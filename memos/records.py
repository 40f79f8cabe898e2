"""How the facade reads and writes records: ids, stamps, sealed secrets, optimistic writes, history rows.

`RecordAccess` is the base of `memos.memory.MemoryOS`: the plumbing every public method shares,
kept apart from the methods users call. It names what an open memory is made of (the store, the
embedder, the registered types, the clock)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import ValidationError

from memos.context.block_labels import check_label_kept, labels_claimed
from memos.retrieval.ranking import RankingPolicy
from memos.store.history import history_row
from memos.store.lancedb.deletion import finish_deletes
from memos.store.lancedb.storage import Storage
from memos.store.scope import Scope, Where, validate_record_id, validate_value

from . import validation as check
from ._sync import check_sync_twins, sync_twin
from .batching import Admission, QueueLimits
from .embeddings import TextEmbedder
from .exceptions import DuplicateIdError, InvalidRecordError, RecordChangedError, RecordNotFoundError
from .group_commit import AddJob, GroupCommit
from .memtypes import Episode, MemoryRecord
from .passages import delete_passages, turn_passages
from .telemetry import span
from .time_bounds import shift
from .tokens import Tokenizer
from .vault import Vault

if TYPE_CHECKING:
    pass


R = TypeVar("R", bound=MemoryRecord)
TypeRef = str | type[MemoryRecord]

OCC_ATTEMPTS = 20
"""How often a user's update is re-applied to a record another writer changed meanwhile."""





__all__ = ["OCC_ATTEMPTS", "R", "RecordAccess", "TypeRef"]


@check_sync_twins
class RecordAccess:
    """The plumbing every method of `MemoryOS` shares (see the module docstring)."""

    storage: Storage
    embedder: TextEmbedder | None
    types: dict[str, type[MemoryRecord]]
    tokenizer: Tokenizer
    clock: Callable[[], datetime]
    ranking: RankingPolicy
    vault_key_file: Path | None
    vault: Vault
    entity_links: bool
    _drawn: set[str]

    limits: QueueLimits = QueueLimits()
    """How many adds, and searches, may wait at once, and what a caller past that meets
    (`memos.batching`; `memos serve` raises `OverloadedError`, answered 503)."""

    if TYPE_CHECKING:  # declared for the checker; `MemoryOS` defines it
        def record_type(self, ref: TypeRef) -> type[MemoryRecord]: ...

    @functools.cached_property
    def group(self) -> GroupCommit:
        """The add queue: concurrent adds embedded and committed together (`memos.group_commit`)."""
        return GroupCommit(self.storage, self._vectors, self._rows, self._history_rows, lambda: self.limits)

    @functools.cached_property
    def searches(self) -> Admission:
        """The bound on searches in progress (`limits`)."""
        return Admission("search", lambda: self.limits)

    async def _add(self, scope: Scope, records: R | Iterable[R], *, actor: str, behind: bool = False,
                   vectors: Mapping[str, list[float] | None] | None = None, superseding: bool = False) -> list[R]:
        """`add`; `behind`: the records are journaled and queued with their history and shared-table
        rows, written to their tables a moment later (`memos.store.lancedb.write_behind`: a chat's turns); on a
        store without a journal their own rows commit at once and the rest is queued. `vectors`:
        index text -> vector embedded ahead (`store_turns`); other texts are embedded here.

        A core block whose label is taken in `scope` is refused (`memos.context.block_labels`), unless
        `superseding`: the record is the next version of one it supersedes, of the same label."""
        check.check_scope(scope)
        validate_value(actor, "actor")
        items = check.check_records(records)
        for record in items:
            self.record_type(type(record))
            check.check_secret_not_exposed(record, {f: getattr(record, f) for f in record.secret_fields})
            check.check_not_superseded(record)
            for field, value in scope.stamp().items():
                current = getattr(record, field)
                if current and current != value:
                    raise InvalidRecordError(f"record {record.id} has {field}={current!r} but is written in scope {scope}")
        async with labels_claimed(self.storage, scope, [] if superseding else items):
            return await self._insert(scope, items, actor=actor, behind=behind, vectors=vectors)

    async def _insert(self, scope: Scope, items: list[R], *, actor: str, behind: bool,
                      vectors: Mapping[str, list[float] | None] | None) -> list[R]:
        """`_add` of checked records whose core-block labels are free."""
        explicit = await self._check_ids_free(items)
        now = self.clock()
        prepared: dict[str, list[R]] = {}
        for record in items:
            stamped = self._revalidate(record, {**scope.stamp(), "created_at": now, "updated_at": now})
            prepared.setdefault(stamped.memory_type, []).append(self._seal(stamped))
        if not behind:  # with the adds waiting beside it: one embedding call, one commit a table
            await self.group.add(AddJob(scope, actor, prepared, dict(vectors or {}), explicit))
            await self._scrub_sources(scope, items)
            return [self._redact(r) for group in prepared.values() for r in group]
        # every text of the call embedded in one batch before anything is written: an embedder
        # failure leaves the stores as they were
        texts = [r.index_text() for group in prepared.values() for r in group]
        known = dict(vectors or {})
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:  # texts `store_turns` embedded ahead are not embedded again
            known.update(zip(missing, await self._vectors(missing), strict=True))
        ordered = iter([known[t] for t in texts])
        planned = {name: [next(ordered) for _ in group] for name, group in prepared.items()}
        if behind and not any(r.secret_fields for r in items):  # journaled now, written a moment later
            with span("memos.add", memory_type=",".join(prepared), records=len(items), user_id=scope.user_id, actor=actor):
                rows = {name: self._rows(name, group, planned[name]) for name, group in prepared.items()}
                if self.storage.hold(rows, self._history_rows(
                        [r for group in prepared.values() for r in group], "add", actor, before=None)):
                    return [self._redact(r) for group in prepared.values() for r in group]
        history: list[dict[str, Any]] = []  # one history commit for every store written (fewer commits)
        mirror = self.storage.search.gathering()  # one commit to the shared search table too

        async def write(name: str, group: Sequence[MemoryRecord]) -> None:
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
        await self._scrub_sources(scope, items)
        return [self._redact(r) for group in prepared.values() for r in group]

    async def _scrub_sources(self, scope: Scope, items: Sequence[MemoryRecord]) -> None:
        """Secrets just sealed are scrubbed out of the records they were taken from and the turns that
        said them (`Vault.scrub_sources`), with or without `source_ids`."""
        for record in items:
            clear = [getattr(record, f) for f in record.secret_fields if getattr(record, f)]
            if clear:
                await self.vault.scrub_sources(scope, record, clear)

    async def _check_ids_free(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Ids set explicitly must be unused in every table (one `id IN (...)` query per table);
        returns them (the group commit checks them again against the adds before it).

        Ids left to `new_id()` are fresh uuid4s and are not looked up, so bulk ingest pays nothing."""
        explicit = [r.id for r in records if "id" in r.model_fields_set and r.id not in self._drawn]
        self._drawn.difference_update(r.id for r in records)
        if explicit:  # an unfinished delete of the id ends first, so it cannot remove the new record later
            await finish_deletes(self.storage, set(explicit))
        for start in range(0, len(explicit), 1000):
            chunk = explicit[start : start + 1000]
            for name in self.storage.memory_types():
                taken = await self.storage.rows(name, Where().id_in(chunk).build(), columns=["id"], limit=1)
                if taken:
                    raise DuplicateIdError(taken[0]["id"])
        return explicit

    def stamp(self, record: MemoryRecord) -> datetime:
        """The `updated_at` of a new version of `record`: now, and always later than the version
        read, so the next conditional write can tell the two apart even under a stopped clock."""
        return max(self.clock(), shift(record.updated_at, timedelta(microseconds=1)))

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
        if not rows and await self.storage.await_journaled(name, record_id):  # acknowledged by another process, not yet written
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

    def cipher(self) -> Any:
        """The vault cipher (the key is loaded, or created, on first use; `Vault.cipher`)."""
        return self.vault.cipher()

    @property
    def key_file(self) -> Path:
        """The vault key file (`Vault.key_file`): the one passed to `open`, else the store's own."""
        return self.vault.key_file

    async def stored(self, scope: Scope, memory_type: TypeRef, record_id: str) -> MemoryRecord:
        """One record as stored, secret fields still encrypted (the vault decrypts from it; never
        hand it to a model). `RecordNotFoundError` if it is not in `scope`."""
        return await self._load(scope, memory_type, record_id)

    @overload
    async def revise(self, scope: Scope, memory_type: type[R], record_id: str, changes: dict[str, Any], *, actor: str,
                     clearance: str = "high", approved_by: str | None = None) -> R: ...
    @overload
    async def revise(self, scope: Scope, memory_type: str, record_id: str, changes: dict[str, Any], *, actor: str,
                     clearance: str = "high", approved_by: str | None = None) -> MemoryRecord: ...
    async def revise(self, scope: Scope, memory_type: TypeRef, record_id: str, changes: dict[str, Any], *, actor: str,
                     clearance: str = "high", approved_by: str | None = None) -> MemoryRecord:
        """`update` for the kernel's own lifecycle operations: it may also set the lifecycle fields
        (`validation.LIFECYCLE_FIELDS`: status, successor, provenance, end of validity) that `update`
        refuses. The graph closes and merges through it, the memory manager adds provenance with it;
        no user's or model's request reaches it (the server, the client, MCP and the agents' tools
        call `update`)."""
        return await self._change(scope, memory_type, record_id, changes, actor=actor, clearance=clearance,
                                  approved_by=approved_by, lifecycle=True)

    async def _change(self, scope: Scope, memory_type: TypeRef, record_id: str, changes: dict[str, Any], *, actor: str,
                      clearance: str, approved_by: str | None, lifecycle: bool) -> MemoryRecord:
        """`update` (`lifecycle` False) and `revise` (True): every check runs before anything is written."""
        check.check_scope(scope)
        changes = check.check_changes(changes)
        validate_value(actor, "actor")
        record_type = self.record_type(memory_type)
        check.check_changeable(record_type, changes, lifecycle=lifecycle)

        async def attempt() -> MemoryRecord:
            record = await self._load(scope, memory_type, record_id)
            check_label_kept(record, changes)
            if not lifecycle:
                check.check_within_period(record, changes)
            revised = self._revalidate(record, {**changes, "updated_at": self.stamp(record)})
            note = await self.vault.check_change(record, revised, changes, actor=actor, clearance=clearance, approved_by=approved_by)
            if record.secret_fields and check.shown_or_sealed(record_type, changes):
                check.check_secret_not_exposed(revised, {f: self.vault.clear_value(revised, f, changes) for f in record.secret_fields})
            updated = self._seal(revised, fresh=set(changes))
            await self._write(updated.memory_type, [updated], "update", actor, before={record.id: record}, note=note)
            return self._redact(updated)

        return await self._optimistic(attempt)

    async def _write(
        self, name: str, records: Sequence[MemoryRecord], op: str, actor: str, *,
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
        if op != "add" and before and "passage" in self.types and self.record_type(name).holds_turns:
            await self._follow_turns([r for r in records if isinstance(r, Episode)], before, actor)

    async def _follow_turns(self, turns: Sequence[Episode], before: dict[str, MemoryRecord], actor: str) -> None:
        """The passages of turns just rewritten follow them (`memos.passages`): a turn whose text
        or status changed has its passages deleted and built again from what it says now, with
        its status (none for one that is no longer long)."""
        changed = [t for t in turns if (old := before.get(t.id)) is None or getattr(old, "summary", None) != t.summary
                   or old.status != t.status]
        by_user: dict[tuple[str, str], list[str]] = {}
        for turn in changed:
            by_user.setdefault((turn.user_id, turn.memory_type), []).append(turn.id)
        for (user_id, name), ids in by_user.items():  # one lookup of their passages per user and store
            await delete_passages(self.storage, Scope(user_id), name, ids)
        if built := turn_passages(changed, self.tokenizer.count):
            await self._write("passage", built, "add", actor, before=None)

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

    stored_sync = sync_twin(stored)
    revise_sync = sync_twin(revise)


def _audit(record: MemoryRecord | None) -> dict[str, Any] | None:
    """A record as history keeps it: no vector; secret fields only as stored (ciphertext)."""
    return None if record is None else record.model_dump(mode="json")
