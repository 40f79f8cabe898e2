"""The entity graph: linking records to entities, relations over time, and graph retrieval.

Entities and relations are memory types (`memos.memtypes.entity`) on LanceDB tables of the
same database; this module is what works on them.

- `EntityGraph` (reached as `MemoryOS.graph`) writes through the facade's storage and history:
  `link` attaches records to the entities they mention (raw mode: `memos.graph.extraction`,
  no model), `ensure` resolves a name against existing entities (names, aliases, then vectors)
  before creating one, `add_relation` closes the relations a new one contradicts (bi-temporal:
  closed, never deleted), `close_relation`, `merge_entities`, `neighbourhood`.
- `graph_candidates` is retrieval's third list: the query's entities are linked to the graph,
  the records they (and, one hop further, the entities related to them) are mentioned in join
  the candidates, ranked by vector similarity within those records and weighted by how specific
  each entity is; the relations of those entities that hold at the query's time join too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import ValidationError

from memos.exceptions import InvalidRecordError, RecordNotFoundError
from memos.jobs.merging import DisjointSets
from memos.jobs.partition import ScopeKey, by_scope, record_scope, same_scope, stored_scope
from memos.memtypes import MemoryRecord
from memos.memtypes.entity import Entity, Relation, normal_name
from memos.retrieval.ranking import Candidate, RowView
from memos.retrieval.speakers import ROLES
from memos.store.history import history_row
from memos.store.protocol import Store
from memos.store.scope import Scope, Where, sql_string, validate_record_id
from memos.validation import check_time

from .extraction import extract_mentions, query_names

if TYPE_CHECKING:
    from memos.embeddings import TextEmbedder


R = TypeVar("R", bound=MemoryRecord)


class GraphHost(Protocol):
    """What the graph needs of the facade it writes through (`memos.memory.MemoryOS` is one):
    the graph sits below the facade, so it names the facade's methods, never imports it."""

    clock: Callable[[], datetime]

    @property
    def storage(self) -> Store: ...

    @property
    def embedder(self) -> TextEmbedder | None: ...

    async def add(self, scope: Scope, records: R | Iterable[R], *, actor: str = ...) -> list[R]: ...

    async def update(self, scope: Scope, memory_type: type[R], record_id: str, changes: dict[str, Any], *,
                     actor: str = ...) -> R: ...

    async def revise(self, scope: Scope, memory_type: type[R], record_id: str, changes: dict[str, Any], *,
                     actor: str) -> R: ...

    async def get(self, scope: Scope, memory_type: type[R], record_id: str) -> R: ...

    async def stored_vectors(self, scope: Scope, memory_type: Any, *, status: str = ...) -> dict[str, list[float]]: ...

    def exclusive(self, key: str) -> AbstractAsyncContextManager[None]: ...

__all__ = ["EntityGraph", "GraphHost", "GraphView", "Neighbourhood", "graph_candidates", "to_dot", "to_mermaid"]

MAX_MENTIONS = 5_000
"""An entity keeps the ids of at most this many records that mention it (the newest)."""
ENTITY_COLUMNS = ["id", "name", "aliases", "kind", "mentions", "user_id", "agent_id", "session_id"]
COMMON_FLOOR = 20
"""An entity with at most this many mentions is never too common to link by (small stores)."""
VECTOR_MATCH = 0.88
"""A new name resolves to an existing entity by vector only above this cosine similarity."""


SINGLE_VALUED = frozenset({
    "lives in", "lives at", "is based in", "works at", "works for", "works as", "is married to", "married to",
    "is dating", "partner", "is engaged to", "age", "is aged", "job", "is the ceo of", "reports to", "drives",
    "studies at", "goes to school at", "phone number", "email", "home town", "has name", "is named", "is called",
})
"""Predicates a subject has one object of at a time: a newer one closes the older (consolidation)."""
GENERIC_KINDS = frozenset({"", "thing", "name"})
"""Kinds that say nothing specific (the raw extractor's "name"): a specific kind replaces them."""


def _mentioned_text(record: MemoryRecord) -> tuple[str, str]:
    """(speaker, text) of a record, as the extractor reads it."""
    speaker = getattr(record, "actor", "") if getattr(record, "event_type", "") == "message" else ""
    speaker = "" if normal_name(speaker) in ROLES else speaker  # a role's turns link to no person
    text = " ".join(x for x in (getattr(record, "summary", ""), getattr(record, "details", "")) if x) or record.index_text()
    return speaker, text


@dataclass
class Neighbourhood:
    """An entity with the relations it takes part in and the entities they reach."""

    entity: Entity
    relations: list[Relation] = field(default_factory=list)
    neighbours: list[Entity] = field(default_factory=list)

    def render(self) -> str:
        lines = [self.entity.render()]
        lines += [f"- {r.render()}" for r in self.relations]
        if self.neighbours:
            lines.append("related: " + ", ".join(n.name for n in self.neighbours))
        return "\n".join(lines)


class EntityGraph:
    """Graph operations of one `MemoryOS` (see the module docstring)."""

    def __init__(self, memory: GraphHost) -> None:
        self.memory = memory
        self.storage: Store = memory.storage

    # --- reading -------------------------------------------------------------------------

    async def entities(self, scope: Scope, *, status: tuple[str, ...] = ("active",)) -> list[Entity]:
        table = self.storage.type_table("entity")
        rows = await self.storage.rows("entity", Where(scope).status_in(status).build())
        return sorted(_of_type(Entity, map(table.to_record, rows)), key=lambda e: (e.first_seen, e.id))

    async def find(self, scope: Scope, name: str) -> Entity | None:
        """The active entity called `name` (or with it as an alias), if any."""
        key = normal_name(name)
        for entity in await self.entities(scope):
            if key in entity.names():
                return entity
        return None

    async def relations(self, scope: Scope, entity: Entity | None = None, *, at: datetime | None = None) -> list[Relation]:
        """Relations (of `entity`, if given) true now, or true at `at` (closed ones included)."""
        at = check_time(at, "at")  # naive means UTC, as stored
        statuses = ("active",) if at is None else ("active", "superseded")
        where = Where(scope).status_in(statuses)
        if entity is not None:
            quoted = sql_string(validate_record_id(entity.id))
            where.raw(f"subject_id = {quoted} OR object_id = {quoted}")
        table = self.storage.type_table("relation")
        records = [table.to_record(r) for r in await self.storage.rows("relation", where.build())]
        held = [r for r in records if isinstance(r, Relation) and r.holds_at(at)]
        return sorted(held, key=lambda r: (r.event_time(), r.id))

    async def neighbourhood(self, scope: Scope, name: str, *, at: datetime | None = None) -> Neighbourhood:
        """An entity, its relations (true now or at `at`) and the entities at their other end."""
        entity = await self.find(scope, name)
        if entity is None:
            raise RecordNotFoundError(f"no entity called {name!r} in scope {scope}")
        relations = await self.relations(scope, entity, at=at)
        others = {r.object_id if r.subject_id == entity.id else r.subject_id for r in relations} - {"", entity.id}
        table = self.storage.type_table("entity")
        rows = await self.storage.rows("entity", Where(scope).id_in(sorted(others)).build()) if others else []
        return Neighbourhood(entity, relations, _of_type(Entity, map(table.to_record, rows)))

    # --- writing -------------------------------------------------------------------------

    async def ensure(self, scope: Scope, name: str, *, kind: str = "thing", summary: str = "", aliases: Sequence[str] = (),
                     source_ids: Sequence[str] = (), actor: str = "user", by_vector: bool = True) -> Entity:
        """The entity `name` resolves to (name or alias, then a close vector), created if none;
        new aliases, summary and provenance are added to it."""
        if not normal_name(name):
            raise InvalidRecordError(f"entity name {name!r} is empty")
        try:
            Entity(name=name.strip(), kind=kind or "thing", summary=summary, aliases=list(aliases))
        except ValidationError as exc:
            raise InvalidRecordError(f"invalid entity: {exc.errors()[0]['msg']}") from None
        async with self._resolving(scope):
            return await self._ensure(scope, name, kind, summary, aliases, source_ids, actor, by_vector)

    def _resolving(self, scope: Scope) -> AbstractAsyncContextManager[None]:
        """Held while a user's entities are looked up and then created or changed (`ensure`, `link`),
        by one task of one process of the store at a time: two that resolved one name at once each
        created it, and two links rewrote one entity's mentions, the second without the first's."""
        return self.memory.exclusive(f"entities\x1f{scope.user_id}")

    async def _ensure(self, scope: Scope, name: str, kind: str, summary: str, aliases: Sequence[str], source_ids: Sequence[str],
                      actor: str, by_vector: bool) -> Entity:
        existing = await self.find(scope, name)
        if existing is None:
            for alias in aliases:
                existing = await self.find(scope, alias)
                if existing is not None:
                    break
        if existing is None and by_vector:
            existing = await self._by_vector(scope, name, kind)
        now = self.memory.clock()
        if existing is None:
            entity = Entity(name=name.strip(), kind=kind or "thing", summary=summary, source_ids=list(source_ids),
                            aliases=[a for a in dict.fromkeys(aliases) if normal_name(a) != normal_name(name)],
                            first_seen=now, last_seen=now)
            [stored] = await self.memory.add(scope, entity, actor=actor)
            return stored
        new_aliases = [a for a in (name, *aliases) if normal_name(a) not in existing.names()]
        changes: dict[str, Any] = {}
        if new_aliases:
            changes["aliases"] = [*existing.aliases, *dict.fromkeys(new_aliases)]
        if summary and not existing.summary:
            changes["summary"] = summary
        if kind not in GENERIC_KINDS and existing.kind in GENERIC_KINDS:
            changes["kind"] = kind  # a model's "pet" refines the raw extractor's "name"
        if source_ids:
            changes["source_ids"] = list(dict.fromkeys([*existing.source_ids, *source_ids]))
        if not changes:
            return existing
        return await self.memory.revise(_owner(existing), Entity, existing.id, {**changes, "last_seen": now}, actor=actor)

    async def _by_vector(self, scope: Scope, name: str, kind: str) -> Entity | None:
        if self.memory.embedder is None or not await self.storage.has_rows("entity"):
            return None
        vector = await self.memory.embedder.embed_query(name)
        rows = await self.storage.vector_search("entity", vector, Where(scope).status_in(("active",)).build(), 1)
        if rows and 1.0 - float(rows[0].get("_distance", 1.0)) >= VECTOR_MATCH:
            entity = self.storage.type_table("entity").to_record(rows[0])
            if isinstance(entity, Entity) and (kind in ("", "thing") or entity.kind in ("thing", kind)):
                return entity
        return None

    async def add_relation(self, scope: Scope, subject: str, predicate: str, obj: str, *, object_is_entity: bool = True,
                           exclusive: bool = False, valid_from: datetime | None = None, source_ids: Sequence[str] = (),
                           subject_kind: str = "thing", object_kind: str = "thing", actor: str = "user") -> Relation:
        """Record `subject - predicate - object` as true from `valid_from` (default now).

        The same relation already open gains the provenance instead. With `exclusive` (the
        subject has one such object at a time: "lives in", "is married to"), the open relations
        of the same subject and predicate to another object are closed at `valid_from`."""
        predicate = " ".join(predicate.split())
        if not predicate or not normal_name(subject) or not obj.strip():
            raise InvalidRecordError("a relation needs a subject, a predicate and an object")
        when = check_time(valid_from, "valid_from") or self.memory.clock()
        try:  # everything is checked before the first write: a refused relation changes nothing
            Relation(subject=subject.strip(), predicate=predicate, object=obj.strip(), valid_from=when, source_ids=list(source_ids))
            for name in (subject, obj) if object_is_entity else (subject,):
                Entity(name=name.strip())
        except ValidationError as exc:
            raise InvalidRecordError(f"invalid relation: {exc.errors()[0]['msg']}") from None
        # one writer of a user's relations at a time: two exclusive ones at once ("lives in" Paris, Rome) both stayed open
        async with self.memory.exclusive(f"relations\x1f{scope.user_id}"):
            return await self._add_relation(scope, subject, predicate, obj, object_is_entity, exclusive, when, source_ids,
                                            subject_kind, object_kind, actor)

    async def _add_relation(self, scope: Scope, subject: str, predicate: str, obj: str, object_is_entity: bool, exclusive: bool,
                            when: datetime, source_ids: Sequence[str], subject_kind: str, object_kind: str, actor: str) -> Relation:
        subj = await self.ensure(scope, subject, kind=subject_kind, source_ids=source_ids, actor=actor)
        target = await self.ensure(scope, obj, kind=object_kind, source_ids=source_ids, actor=actor) if object_is_entity else None
        object_name = target.name if target else obj.strip()
        current = [r for r in await self.relations(scope, subj) if r.subject_id == subj.id
                   and normal_name(r.predicate) == normal_name(predicate)]
        for rel in current:
            if (target and rel.object_id == target.id) or normal_name(rel.object) == normal_name(object_name):
                if set(source_ids) <= set(rel.source_ids):
                    return rel
                return await self.memory.revise(_owner(rel), Relation, rel.id, {
                    "source_ids": list(dict.fromkeys([*rel.source_ids, *source_ids]))}, actor=actor)
        relation = Relation(subject=subj.name, subject_id=subj.id, predicate=predicate, object=object_name,
                            object_id=target.id if target else "", valid_from=when, source_ids=list(source_ids))
        [stored] = await self.memory.add(scope, relation, actor=actor)
        if exclusive:
            for rel in current:
                await self._close(rel, max(when, rel.valid_from or when), stored.id, actor)
        return stored

    async def close_relation(self, scope: Scope, relation_id: str, *, when: datetime | None = None, actor: str = "user") -> Relation:
        """End a relation that stopped holding (kept, with its period, for questions about the past)."""
        rel = await self.memory.get(scope, Relation, relation_id)
        return await self._close(rel, self.closing(rel, when), None, actor)

    def closing(self, rel: Relation, when: datetime | None = None) -> datetime:
        """When `close_relation(rel, when=when)` would end `rel` (`when`, default now), or why it
        cannot (`InvalidRecordError`: closed already, or `when` before it started). The memory
        manager checks its plan's closings with this before it writes anything."""
        if rel.valid_to is not None or rel.status != "active":
            raise InvalidRecordError(f"relation {rel.id} is already closed")
        end = check_time(when, "when") or self.memory.clock()
        if rel.valid_from is not None and end < rel.valid_from:
            raise InvalidRecordError(f"a relation cannot end ({end:%Y-%m-%d}) before it started ({rel.valid_from:%Y-%m-%d})")
        return end

    async def _close(self, rel: Relation, when: datetime, by: str | None, actor: str) -> Relation:
        return await self.memory.revise(_owner(rel), Relation, rel.id,
                                        {"status": "superseded", "valid_to": when, "superseded_by": by}, actor=actor)

    async def merge_entities(self, scope: Scope, keep_id: str, drop_ids: Sequence[str], *, actor: str = "user") -> Entity:
        """Fold duplicates into one entity: names become aliases, mentions and provenance join,
        relations point at the kept entity; the duplicates are superseded (kept in history).
        Only entities of one exact scope merge: another agent's or session's "Alice" is refused."""
        keep = await self.memory.get(scope, Entity, keep_id)
        drops = [await self.memory.get(scope, Entity, i) for i in drop_ids if i != keep_id]
        foreign = [d.id for d in drops if not same_scope(keep, d)]
        if foreign:
            raise InvalidRecordError(f"entities {foreign} are not in the scope of {keep.id} ({record_scope(keep)}); "
                                     "only entities of one user, agent and session merge")
        aliases = list(dict.fromkeys([*keep.aliases, *(n for d in drops for n in (d.name, *d.aliases))]))
        aliases = [a for a in aliases if normal_name(a) != normal_name(keep.name)]
        merged = await self.memory.revise(_owner(keep), Entity, keep.id, {
            "aliases": aliases,
            "mentions": list(dict.fromkeys([*keep.mentions, *(m for d in drops for m in d.mentions)]))[-MAX_MENTIONS:],
            "source_ids": list(dict.fromkeys([*keep.source_ids, *(s for d in drops for s in d.source_ids)])),
            "first_seen": min([keep.first_seen, *(d.first_seen for d in drops)]),
            "summary": keep.summary or next((d.summary for d in drops if d.summary), ""),
        }, actor=actor)
        now = self.memory.clock()
        for drop in drops:
            for rel in await self.relations(scope, drop, at=None):
                changes: dict[str, Any] = {}
                if rel.subject_id == drop.id:
                    changes.update(subject_id=keep.id, subject=keep.name)
                if rel.object_id == drop.id:
                    changes.update(object_id=keep.id, object=keep.name)
                await self.memory.update(_owner(rel), Relation, rel.id, changes, actor=actor)
            await self.memory.revise(_owner(drop), Entity, drop.id,
                                     {"status": "superseded", "superseded_by": keep.id, "valid_to": now}, actor=actor)
        return merged

    async def consolidate(self, scope: Scope, *, actor: str = "consolidation") -> dict[str, int]:
        """Merge duplicate entities (same name or alias, same exact scope; aliases kept) and close
        the relations a newer one contradicts (same subject, a single-valued predicate such as
        "lives in", another object, same exact scope). Returns how many of each."""
        done = {"entities_merged": 0, "relations_closed": 0}
        for members in by_scope(await self.entities(scope)).values():
            for cluster in _name_clusters(members):
                keep = max(cluster, key=lambda e: (len(e.mentions), -e.first_seen.timestamp()))
                await self.merge_entities(_owner(keep), keep.id, [e.id for e in cluster if e.id != keep.id], actor=actor)
                done["entities_merged"] += len(cluster) - 1
        by_key: dict[tuple[ScopeKey, str, str], list[Relation]] = {}
        for rel in await self.relations(scope):
            if normal_name(rel.predicate) in SINGLE_VALUED:
                key = (stored_scope(rel), rel.subject_id or normal_name(rel.subject), normal_name(rel.predicate))
                by_key.setdefault(key, []).append(rel)
        for rels in by_key.values():
            rels.sort(key=lambda r: (r.valid_from or r.created_at, r.created_at))
            newest = rels[-1]
            for old in rels[:-1]:
                if normal_name(old.object) != normal_name(newest.object):
                    await self._close(old, max(newest.valid_from or newest.created_at, old.valid_from or old.created_at), newest.id, actor)
                    done["relations_closed"] += 1
        return done

    async def link(self, scope: Scope, records: Sequence[MemoryRecord], *, actor: str = "ingest") -> int:
        """Attach `records` to the entities they mention (deterministic extraction, no model);
        entities are created as needed, in `scope`. Returns how many links were made."""
        if not records:
            return 0
        async with self._resolving(scope):
            return await self._link(scope, records, actor)

    async def _link(self, scope: Scope, records: Sequence[MemoryRecord], actor: str) -> int:
        table = self.storage.type_table("entity")
        rows = await self.storage.rows("entity", Where(scope).status_in(("active",)).build()) if await self.storage.has_rows("entity") else []
        by_key: dict[str, Entity] = {}
        for existing in _of_type(Entity, map(table.to_record, rows)):
            if Scope(existing.user_id, existing.agent_id, existing.session_id) == _exact(scope):
                for key in existing.names():
                    by_key.setdefault(key, existing)
        known = set(by_key)
        speakers = {normal_name(_mentioned_text(r)[0]) for r in records} - {""}
        known |= speakers
        mentions_of = [extract_mentions(text, speaker) for speaker, text in map(_mentioned_text, records)]
        # names seen inside a sentence anywhere in the batch link at a sentence's start too
        known |= {m.key for found in mentions_of for m in found}
        before: dict[str, Entity] = {}
        changed: dict[str, Entity] = {}
        created: dict[str, Entity] = {}
        links = 0
        for record, (speaker, text) in zip(records, map(_mentioned_text, records), strict=True):
            when = record.event_time()
            for mention in extract_mentions(text, speaker, known):
                entity = by_key.get(mention.key)
                if entity is None:
                    entity = Entity(**_exact(scope).stamp(), name=mention.name, kind=mention.kind, first_seen=when, last_seen=when)
                    by_key[mention.key] = created[entity.id] = entity
                elif entity.id not in created and entity.id not in changed:
                    before[entity.id] = entity
                if record.id in entity.mentions:
                    continue
                updated = entity.model_copy(update={
                    "mentions": [*entity.mentions, record.id][-MAX_MENTIONS:],
                    "first_seen": min(entity.first_seen, when), "last_seen": max(entity.last_seen, when)})
                for key in updated.names():
                    if by_key.get(key) is entity:
                        by_key[key] = updated
                by_key[mention.key] = updated
                (created if entity.id in created else changed)[entity.id] = updated
                links += 1
        if created:
            await self.memory.add(scope, list(created.values()), actor=actor)
        if changed:
            await self._rewrite(scope, list(changed.values()), before, actor)
        return links

    async def _rewrite(self, scope: Scope, entities: list[Entity], before: dict[str, Entity], actor: str) -> None:
        """Store changed entities keeping their vectors (only links and times changed)."""
        table = self.storage.type_table("entity")
        now = self.memory.clock()
        stored = await self.memory.stored_vectors(_exact(scope), "entity")
        vectors = [stored.get(e.id) for e in entities]
        stamped = [e.model_copy(update={"updated_at": now}) for e in entities]
        await self.storage.upsert_rows("entity", [table.to_row(e, v) for e, v in zip(stamped, vectors, strict=True)])
        await self.storage.append_history([
            history_row("update", e, actor, _brief(before.get(e.id)), _brief(e), now, "linked mentions") for e in stamped])


def _name_clusters(entities: list[Entity]) -> list[list[Entity]]:
    """Groups of two or more entities that share a normalised name or alias (transitively)."""
    sets = DisjointSets(e.id for e in entities)
    owner: dict[str, str] = {}
    for entity in entities:
        for key in entity.names():
            if key in owner:
                sets.union(entity.id, owner[key])
            else:
                owner[key] = entity.id
    return sets.groups(entities, key=lambda e: e.id)


def _brief(entity: Entity | None) -> dict[str, Any] | None:
    """An entity as its history keeps it: its mentions counted, not listed (a link is not content)."""
    if entity is None:
        return None
    data = entity.model_dump(mode="json")
    data["mentions"] = len(entity.mentions)
    return data


def _of_type(record_type: type[R], records: Iterable[MemoryRecord]) -> list[R]:
    """The records of one type's table as that type (its table holds nothing else)."""
    return [r for r in records if isinstance(r, record_type)]


def _exact(scope: Scope) -> Scope:
    return Scope(scope.user_id, scope.agent_id or "", scope.session_id or "")


def _owner(record: MemoryRecord) -> Scope:
    return Scope(record.user_id, record.agent_id, record.session_id)


# --- retrieval ---------------------------------------------------------------------------


@dataclass
class GraphView:
    """The entities of a scope as retrieval reads them: names to entities, mention counts."""

    by_key: dict[str, list[dict[str, Any]]]
    total: int

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]]) -> GraphView:
        by_key: dict[str, list[dict[str, Any]]] = {}
        mentioned: set[str] = set()
        for row in rows:
            mentioned.update(row.get("mentions") or [])
            for key in {normal_name(n) for n in (row["name"], *(row.get("aliases") or []))} - {""}:
                by_key.setdefault(key, []).append(row)
        return cls(by_key, max(1, len(mentioned)))

    def weight(self, row: dict[str, Any]) -> float:
        """How specific an entity is (inverse document frequency of its mentions, 0-1)."""
        count = len(row.get("mentions") or [])
        return math.log(1.0 + self.total / (1.0 + count)) / math.log(1.0 + self.total)


async def graph_candidates(storage: Store, request: Any, vector: list[float] | None, text: str, wheres: dict[str, str | None],
                           columns: Any) -> list[Candidate]:
    """Retrieval's graph list (see the module docstring): candidates with source "graph"."""
    policy = request.policy
    if policy.graph_weight <= 0 or not await storage.has_rows("entity"):
        return []
    rows = await storage.rows("entity", Where(request.scope).status_in(("active",)).build(), columns=ENTITY_COLUMNS)
    view = GraphView.of(rows)
    cap = max(COMMON_FLOOR, policy.graph_max_share * view.total)
    keys = [k for k in query_names(request.query, view.by_key) if any(len(r.get("mentions") or []) <= cap for r in view.by_key[k])]
    if not keys:
        return []
    linked: dict[str, float] = {}  # entity id -> weight
    entity_rows: dict[str, dict[str, Any]] = {}
    for key in keys:
        for row in view.by_key[key]:
            if len(row.get("mentions") or []) > cap:
                continue
            linked[row["id"]] = max(linked.get(row["id"], 0.0), view.weight(row))
            entity_rows[row["id"]] = row
    at = request.until
    relations: list[Relation] = []
    if "relation" in request.types and await storage.has_rows("relation") and linked:
        relations = await _relations_of(storage, request.scope, list(linked), at)
        if policy.graph_hops >= 2:  # one hop further: the entities those relations reach
            for rel in relations:
                for other in (rel.subject_id, rel.object_id):
                    if other and other not in linked:
                        linked[other] = 0.5 * max(linked.get(rel.subject_id, 0.0), linked.get(rel.object_id, 0.0))
            missing = [i for i in linked if i not in entity_rows]
            if missing:
                for row in await storage.rows("entity", Where(request.scope).id_in(missing).build(), columns=ENTITY_COLUMNS):
                    entity_rows[row["id"]] = row
    record_weight: dict[str, float] = {}
    for entity_id, weight in linked.items():
        for record_id in (entity_rows.get(entity_id) or {}).get("mentions") or []:
            record_weight[record_id] = record_weight.get(record_id, 0.0) + weight
    out: list[Candidate] = []
    for rank, rel in enumerate(relations):
        out.append(Candidate("relation", rel, "graph", rank, 1.0 + linked.get(rel.subject_id, 0.0)))
    if record_weight and "episodic" in wheres:
        best = sorted(record_weight, key=lambda i: -record_weight[i])[: policy.graph_max_records]
        per_list = max(2 * request.k, 20, (request.budget_tokens or 0) // 15)
        where = f"({wheres['episodic']}) AND ({Where().id_in(best).build()})" if wheres["episodic"] else Where().id_in(best).build()
        if vector is not None:
            found = await storage.vector_search("episodic", vector, where, per_list, columns)
            key = "_distance"
        elif text:
            found = await storage.text_search("episodic", text, where, per_list, columns)
            key = "_score"
        else:
            found = []
            key = ""
        top = max(record_weight.values())
        time_field = storage.type_table("episodic").record_type.time_field

        scored = []
        for row in found:
            base = 1.0 - float(row.get("_distance", 1.0)) if key == "_distance" else float(row.get("_score", 0.0))
            scored.append((base * (0.5 + 0.5 * record_weight[row["id"]] / top), row))
        scored.sort(key=lambda item: -item[0])
        for rank, (score, row) in enumerate(scored):
            record = RowView.of(row, time_field) if columns else storage.type_table("episodic").to_record(row)
            out.append(Candidate("episodic", record, "graph", rank, score))
    return out


async def _relations_of(storage: Store, scope: Scope, entity_ids: list[str], at: datetime | None) -> list[Relation]:
    statuses = ("active",) if at is None else ("active", "superseded")
    ids = ", ".join(sql_string(validate_record_id(i)) for i in entity_ids)
    where = Where(scope).status_in(statuses).raw(f"subject_id IN ({ids}) OR object_id IN ({ids})").build()
    table = storage.type_table("relation")
    rels = [table.to_record(r) for r in await storage.rows("relation", where, limit=200)]
    return [r for r in rels if isinstance(r, Relation) and r.holds_at(at)]


# --- drawing -----------------------------------------------------------------------------


def _node(entity_id: str) -> str:
    return "e" + entity_id[:12]


def _label(text: str) -> str:
    return text.replace('"', "'").replace("\n", " ")[:80]


def to_mermaid(entities: Sequence[Entity], relations: Sequence[Relation]) -> str:
    """The graph as a Mermaid flowchart (plain-value objects become their own small nodes)."""
    lines = ["graph LR"]
    for entity in entities:
        lines.append(f'  {_node(entity.id)}["{_label(entity.name)} ({entity.kind})"]')
    for index, rel in enumerate(relations):
        target = _node(rel.object_id) if rel.object_id else f"v{index}"
        if not rel.object_id:
            lines.append(f'  {target}(["{_label(rel.object)}"])')
        arrow = "-.->" if rel.valid_to is not None else "-->"
        lines.append(f'  {_node(rel.subject_id)} {arrow}|"{_label(rel.predicate + rel.period())}"| {target}')
    return "\n".join(lines)


def to_dot(entities: Sequence[Entity], relations: Sequence[Relation]) -> str:
    """The graph in Graphviz DOT (closed relations dashed)."""
    lines = ["digraph memos {", "  rankdir=LR;"]
    for entity in entities:
        lines.append(f'  {_node(entity.id)} [label="{_label(entity.name)} ({entity.kind})"];')
    for index, rel in enumerate(relations):
        target = _node(rel.object_id) if rel.object_id else f"v{index}"
        if not rel.object_id:
            lines.append(f'  {target} [label="{_label(rel.object)}", shape=plaintext];')
        style = ", style=dashed" if rel.valid_to is not None else ""
        lines.append(f'  {_node(rel.subject_id)} -> {target} [label="{_label(rel.predicate + rel.period())}"{style}];')
    lines.append("}")
    return "\n".join(lines)
