"""The memory-manager agent: decides what of the new turns is worth keeping, and where.

It reads a batch of new turns with the memories already stored about them and answers with
one structured plan (insert / update / supersede / merge / nothing per item), so a batch
costs one model request. The plan is checked as a whole before anything is written: a plan
with a bad store, field or record id goes back to the model (`ModelRetry`) and nothing
changes. Every write carries the turns' ids as provenance and `actor="memory_manager"`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from memos.memtypes import BASE_FIELDS, Episode, MemoryRecord
from pydantic import BaseModel, Field, ValidationError
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.usage import UsageLimits

from memos import prompts
from memos.exceptions import MemosError, RecordChangedError
from memos.memory import MemoryOS
from memos.store.scope import Scope
from memos.telemetry import instrumentation
from memos.validation import LIFECYCLE_FIELDS, describe_errors

from .graph import apply_graph, check_graph, graph_notes
from .tools import INSERTABLE_FIELDS

__all__ = ["Action", "CloseRelation", "EntityNote", "Insert", "ManagerPlan", "ManagerReport", "MemoryManager", "Merge", "Nothing", "RelationNote", "Supersede", "Update"]

ACTOR = "memory_manager"


class Insert(BaseModel):
    """Store a new memory."""

    kind: Literal["insert"] = "insert"
    store: str
    fields: dict[str, Any] = Field(description="The store's own fields, e.g. semantic: subject, summary, details.")


class Update(BaseModel):
    """Change fields of a stored memory that is still true but incomplete."""

    kind: Literal["update"] = "update"
    store: str
    record_id: str
    changes: dict[str, Any]


class Supersede(BaseModel):
    """Replace a stored memory that is no longer true by a new one (the old stays in history)."""

    kind: Literal["supersede"] = "supersede"
    store: str
    record_id: str
    fields: dict[str, Any]


class Merge(BaseModel):
    """Combine several stored memories that say the same thing into one."""

    kind: Literal["merge"] = "merge"
    store: str
    record_ids: list[str] = Field(min_length=2)
    fields: dict[str, Any]


class Nothing(BaseModel):
    """Nothing in these turns is worth keeping."""

    kind: Literal["nothing"] = "nothing"
    reason: str = ""


Action = Annotated[Insert | Update | Supersede | Merge | Nothing, Field(discriminator="kind")]


class EntityNote(BaseModel):
    """A person, place, work or thing the turns talk about (resolved against known entities)."""

    name: str = Field(min_length=1, max_length=256)
    kind: str = Field(default="thing", max_length=64, description="person, place, title, org, pet, thing, ...")
    aliases: list[str] = Field(default_factory=list, description="Other names used for it in the turns.")
    summary: str = Field(default="", max_length=500, description="Who or what it is, in a few words.")


class RelationNote(BaseModel):
    """subject - predicate - object, as the turns state it (e.g. John - has dog - Tommy)."""

    subject: str = Field(min_length=1, max_length=256)
    predicate: str = Field(min_length=1, max_length=128, description="Short, present tense: is, has dog, likes, lives in.")
    object: str = Field(min_length=1, max_length=512)
    object_is_entity: bool = Field(default=True, description="False when the object is a plain value (a date, a number).")
    exclusive: bool = Field(default=False, description="The subject has one such object at a time (lives in, is married to): "
                                                       "the open relation to another object is closed.")
    since: str | None = Field(default=None, description="ISO date it became true, if the turns say.")


class CloseRelation(BaseModel):
    """A stored relation (by id) that the turns say no longer holds."""

    relation_id: str
    when: str | None = Field(default=None, description="ISO date it stopped holding, if the turns say.")


class ManagerPlan(BaseModel):
    """The manager's decision for one batch of turns."""

    actions: list[Action]
    entities: list[EntityNote] = Field(default_factory=list, description="Entities the turns mention (entity graph).")
    relations: list[RelationNote] = Field(default_factory=list, description="Relations the turns state.")
    closed: list[CloseRelation] = Field(default_factory=list, description="Stored relations the turns end.")


@dataclass
class ManagerReport:
    """What one manager run did."""

    turns: int
    written: list[tuple[str, str, str]] = field(default_factory=list)
    """(action, store, record id) for each write."""
    requests: int = 0


class MemoryManager:
    """Routes new turns of a scope into the typed stores (see the module docstring)."""

    def __init__(self, memory: MemoryOS, scope: Scope, model: Any, *, related_k: int = 10, max_retries: int = 2,
                 instrument: Any = None) -> None:
        self.memory = memory
        self.scope = scope
        self.read_scope = Scope(scope.user_id, scope.agent_id)
        self.related_k = related_k
        self.agent: Agent[None, ManagerPlan] = Agent(model, output_type=ManagerPlan, retries=max_retries,
                                                          name="memory_manager")
        if instrument is not None:
            self.agent.instrument = instrumentation(instrument)
        self.agent.output_validator(self._check)

    def _stores(self) -> list[type[MemoryRecord]]:
        return [t for t in self.memory.types.values() if t.model_writable]

    async def still_stored(self, turns: Sequence[Episode]) -> list[Episode]:
        """`turns` (held by a caller since they were stored) as the recall log holds them now: one
        deleted since (its user forgotten) is left out, so nothing is drawn from it afterwards, and
        one changed since is as changed (a secret the vault took out of it is not in it)."""
        stored = {t.id: t for t in await self.memory.get_many(self.scope, self.memory.turn_type, [t.id for t in turns])}
        return [now for t in turns if isinstance(now := stored.get(t.id), Episode)]

    async def run(self, turns: Sequence[Episode]) -> ManagerReport:
        """Decide and apply what to keep from `turns` (one model request unless the plan needs fixing),
        read again first (`still_stored`): the prompt shows them as stored, not as the caller holds them."""
        turns = await self.still_stored(turns)
        report = ManagerReport(turns=len(turns))
        if not turns:
            return report
        query = " ".join(t.summary for t in turns)[-2000:]
        searched = [t.memory_type for t in self._stores() if not t.holds_turns]
        searched += ["relation"] if "relation" in self.memory.types else []  # the relations the turns may end
        related = await self.memory.search(query, self.read_scope, types=searched, k=self.related_k)
        known = await graph_notes(self.memory, self.read_scope, query) if "entity" in self.memory.types else []
        stores = [{"name": t.memory_type, "description": t.description,
                   "fields": {n: str(f.annotation).replace("typing.", "") for n, f in t.model_fields.items()
                              if n not in BASE_FIELDS or n in INSERTABLE_FIELDS}} for t in self._stores()]
        prompt = prompts.render(
            "manager_input.j2",
            turns=[{"id": t.id, "line": t.render()} for t in turns],
            related=[{"store": h.memory_type, "id": h.id, "line": h.record.render()} for h in related],
            entities=known,
        )
        result = await self.agent.run(prompt, instructions=prompts.render("manager.j2", stores=stores, graph="entity" in self.memory.types),
                                      usage_limits=UsageLimits(request_limit=4))
        report.requests = result.usage.requests
        provenance = [t.id for t in turns]
        current = await self._still_current(result.output)
        for action in result.output.actions:
            await self._apply(action, provenance, report, current)
        if "entity" in self.memory.types:
            await apply_graph(self.memory, self.scope, self.read_scope, result.output, provenance, report.written, ACTOR)
        return report

    # --- checking and applying -------------------------------------------------------------

    async def _check(self, plan: ManagerPlan) -> ManagerPlan:
        """The whole plan is checked before any of it is applied, so it is applied whole or sent back."""
        problems = []
        touched: dict[str, int] = {}
        for index, action in enumerate(plan.actions):
            for record_id in _ids(action):
                if record_id in touched:
                    problems.append(f"action {index} ({action.kind}): record {record_id} is changed by action {touched[record_id]} "
                                    "already; act on a record at most once in a plan (changed more than once)")
                touched.setdefault(record_id, index)
        for index, action in enumerate(plan.actions):
            try:
                await self._validate(action)
            except (ModelRetry, MemosError) as exc:
                problems.append(f"action {index} ({action.kind}): {exc}")
        if "entity" in self.memory.types:
            problems += await check_graph(self.memory, self.read_scope, plan)
        if problems:
            raise ModelRetry("fix these actions and send the whole plan again: " + " | ".join(problems))
        return plan

    async def _still_current(self, plan: ManagerPlan) -> dict[str, MemoryRecord]:
        """The records the plan acts on, by id, read again: still active, as when it was checked. A
        writer that holds no job lock of the user (a tool call of the user's own agent) may have
        superseded, merged or deleted one while the model answered. Then nothing is written
        (`RecordChangedError`, or `RecordNotFoundError` for one deleted): a caller keeps the turns
        and runs them again, and the model then sees the records as they are, where applying the
        rest of the plan would have left it half done. The plan acts on each record once (`_check`),
        so each action is applied to these."""
        current: dict[str, MemoryRecord] = {}
        for action in plan.actions:
            if isinstance(action, Update | Supersede | Merge):
                for record_id in _ids(action):
                    current[record_id] = await self.memory.get(self.read_scope, action.store, record_id)
                    if current[record_id].status != "active":
                        raise RecordChangedError(action.store, [record_id], 0)
        return current

    async def _validate(self, action: Action) -> None:
        if isinstance(action, Nothing):
            return
        record_type = self._type(action.store)
        if isinstance(action, Insert | Supersede | Merge):
            new = self._build(record_type, action.fields, [])
            if isinstance(action, Supersede) and new.valid_from is None:  # memory.supersede starts its validity now
                now = self.memory.clock()
                try:
                    record_type.model_validate({**new.model_dump(), "valid_from": now})
                except ValidationError as exc:
                    raise ModelRetry(f"the new record is valid from now ({now.isoformat()}) when valid_from is not given: "
                                     f"{describe_errors(exc)}") from None
        if isinstance(action, Update):
            lifecycle = sorted(set(action.changes) & LIFECYCLE_FIELDS)
            if lifecycle:
                raise ModelRetry(f"an update cannot change {lifecycle}: to end a memory that is no longer true, use a "
                                 "supersede action (the old one closes and links the new); to combine memories that say the "
                                 "same, a merge action; the turns' ids are added as provenance for you")
            unknown = set(action.changes) - set(record_type.content_fields()) - INSERTABLE_FIELDS
            if unknown:
                raise ModelRetry(f"cannot change {sorted(unknown)}; {action.store} fields are {record_type.content_fields()}")
        for record_id in _ids(action):
            old = await self.memory.get(self.read_scope, action.store, record_id)
            if old.status != "active":
                raise ModelRetry(f"record {record_id} is {old.status}" + (f" (merged into / superseded by {old.superseded_by}); act on that one"
                                                                         if old.superseded_by else "; leave it"))
            if isinstance(action, Update):  # the record as the update would leave it, checked as its type checks a new one
                try:
                    record_type.model_validate({**old.model_dump(), **action.changes})
                except ValidationError as exc:
                    raise ModelRetry(f"invalid changes to {record_id}: {describe_errors(exc)}") from None

    def _type(self, store: str) -> type[MemoryRecord]:
        names = [t.memory_type for t in self._stores()]
        if store not in names:
            raise ModelRetry(f"unknown store {store!r}; use one of {names}")
        return self.memory.types[store]

    @staticmethod
    def _build(record_type: type[MemoryRecord], fields: dict[str, Any], provenance: list[str]) -> MemoryRecord:
        allowed = set(record_type.content_fields()) | INSERTABLE_FIELDS
        unknown = set(fields) - allowed
        if unknown:
            raise ModelRetry(f"unknown fields {sorted(unknown)}; {record_type.memory_type} fields are {sorted(allowed)}")
        try:
            return record_type.model_validate({**fields, "source_ids": provenance})
        except ValidationError as exc:
            raise ModelRetry(f"invalid {record_type.memory_type} fields: {describe_errors(exc)}") from None

    async def _apply(self, action: Action, provenance: list[str], report: ManagerReport, current: dict[str, MemoryRecord]) -> None:
        if isinstance(action, Nothing):
            return
        record_type = self.memory.types[action.store]
        if isinstance(action, Insert):
            [stored] = await self.memory.add(self.scope, self._build(record_type, action.fields, provenance), actor=ACTOR)
            report.written.append(("insert", action.store, stored.id))
        elif isinstance(action, Update):
            old = current[action.record_id]
            changes = {**action.changes, "source_ids": list(dict.fromkeys([*old.source_ids, *provenance]))}
            # revise: the provenance is a lifecycle field `update` refuses; the model's own changes were checked without it
            await self.memory.revise(_scope_of(old), action.store, action.record_id, changes, actor=ACTOR)
            report.written.append(("update", action.store, action.record_id))
        elif isinstance(action, Supersede):
            old = current[action.record_id]
            new = self._build(record_type, action.fields, provenance)
            stored = await self.memory.supersede(_scope_of(old), action.store, action.record_id, new, actor=ACTOR)
            report.written.append(("supersede", action.store, stored.id))
        else:
            olds = [current[i] for i in action.record_ids]
            sources = list(dict.fromkeys([*(s for o in olds for s in o.source_ids), *(o.id for o in olds), *provenance]))
            merged = self._build(record_type, action.fields, sources).model_copy(
                update={"importance": max([o.importance for o in olds])})
            [stored] = await self.memory.add(self.scope, merged, actor=ACTOR)
            for old in olds:  # what consolidation leaves behind too (memos.jobs.merging): archived, linked, tagged "merged"
                await self.memory.merge_into(_scope_of(old), action.store, old.id, stored.id, actor=ACTOR, reason="memory manager")
            report.written.append(("merge", action.store, stored.id))


def _ids(action: Action) -> list[str]:
    if isinstance(action, Update | Supersede):
        return [action.record_id]
    if isinstance(action, Merge):
        return action.record_ids
    return []


def _scope_of(record: MemoryRecord) -> Scope:
    return Scope(record.user_id, record.agent_id, record.session_id)
