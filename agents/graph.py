"""The entity graph for models: the manager plan's graph part, and the graph tools.

The memory manager extracts entities and relations in the same single call it already makes
(`ManagerPlan.entities`, `.relations`, `.closed`): `check_graph` refuses a bad plan before
anything is written (the model gets a `ModelRetry`), `apply_graph` writes it through
`MemoryOS.graph`, which resolves names against existing entities (names, aliases, vectors).
`add_graph_tools` mounts entity lookup and relation add / close on the memory toolset.
"""

from __future__ import annotations

from typing import Any

from memos.memtypes.entity import Relation, normal_name
from pydantic_ai import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from memos.exceptions import MemosError, RecordNotFoundError
from memos.graph.entities import ENTITY_COLUMNS, GraphView
from memos.graph.extraction import query_names
from memos.memory import MemoryOS
from memos.store.scope import Scope, Where

from .arguments import parse_when
from .deps import MemoryDeps

__all__ = ["GRAPH_TOOL_NAMES", "add_graph_tools", "apply_graph", "check_graph", "graph_notes"]

GRAPH_TOOL_NAMES = ("entity_lookup", "relation_add", "relation_close")


async def graph_notes(memory: MemoryOS, scope: Scope, text: str, limit: int = 20) -> list[dict[str, str]]:
    """The known entities `text` names, as the manager is shown them (to reuse, not duplicate)."""
    if not await memory.storage.has_rows("entity"):
        return []
    rows = await memory.storage.rows("entity", Where(scope).status_in(("active",)).build(), columns=ENTITY_COLUMNS)
    view = GraphView.of(rows)
    seen: dict[str, dict[str, str]] = {}
    for key in query_names(text, view.by_key):
        for row in view.by_key[key]:
            aka = ", ".join(row.get("aliases") or [])
            seen.setdefault(row["id"], {"id": row["id"], "name": row["name"], "kind": row["kind"], "aliases": aka})
    return list(seen.values())[:limit]


async def check_graph(memory: MemoryOS, scope: Scope, plan: Any) -> list[str]:
    """What is wrong with a plan's graph part (empty: nothing)."""
    problems = []
    for index, rel in enumerate(plan.relations):
        if not normal_name(rel.subject) or not rel.object.strip() or not rel.predicate.strip():
            problems.append(f"relation {index}: subject, predicate and object must not be empty")
        try:
            parse_when(rel.since, "since")
        except ModelRetry as exc:
            problems.append(f"relation {index}: {exc}")
    for index, note in enumerate(plan.entities):
        if not normal_name(note.name):
            problems.append(f"entity {index}: the name is empty")
    closing: dict[str, int] = {}
    for index, close in enumerate(plan.closed):
        if close.relation_id in closing:
            problems.append(f"closed {index}: relation {close.relation_id} is closed by closed {closing[close.relation_id]} "
                            "already; close a relation once in a plan")
            continue
        closing[close.relation_id] = index
        try:  # what close_relation will refuse (closed already, an end before the start), refused before anything is written
            end = parse_when(close.when, "when")
            memory.graph.closing(await memory.get(scope, Relation, close.relation_id), end)
        except (ModelRetry, MemosError) as exc:
            problems.append(f"closed {index}: {exc}")
    return problems


async def apply_graph(memory: MemoryOS, write: Scope, read: Scope, plan: Any, provenance: list[str],
                      written: list[tuple[str, str, str]], actor: str) -> None:
    """Write a checked plan's entities, relations and closings (the turns as provenance)."""
    graph = memory.graph
    for note in plan.entities:
        entity = await graph.ensure(read if await graph.find(read, note.name) else write, note.name, kind=note.kind,
                                    summary=note.summary, aliases=note.aliases, source_ids=provenance, actor=actor)
        mentions = list(dict.fromkeys([*entity.mentions, *provenance]))
        if mentions != entity.mentions:
            await memory.update(Scope(entity.user_id, entity.agent_id, entity.session_id), "entity", entity.id,
                                {"mentions": mentions}, actor=actor)
        written.append(("entity", "entity", entity.id))
    for close in plan.closed:
        rel = await graph.close_relation(read, close.relation_id, when=parse_when(close.when, "when"), actor=actor)
        written.append(("close", "relation", rel.id))
    kinds = {normal_name(n.name): n.kind for n in plan.entities}
    for note in plan.relations:
        rel = await graph.add_relation(write, note.subject, note.predicate, note.object, object_is_entity=note.object_is_entity,
                                       exclusive=note.exclusive, valid_from=parse_when(note.since, "since"), source_ids=provenance,
                                       subject_kind=kinds.get(normal_name(note.subject), "thing"),
                                       object_kind=kinds.get(normal_name(note.object), "thing"), actor=actor)
        written.append(("relation", "relation", rel.id))


def add_graph_tools(toolset: FunctionToolset[Any], deps: MemoryDeps) -> None:
    """Mount entity_lookup, relation_add and relation_close on `toolset` (misuse: ModelRetry, nothing changed)."""
    memory = deps.memory

    @toolset.tool_plain
    async def entity_lookup(name: str, at: str | None = None) -> str:
        """Look up a person, place or thing by name or alias: its relations (true now, or at the ISO date `at`) and related entities."""
        if not normal_name(name):
            raise ModelRetry("name is empty; give the entity's name")
        when = parse_when(at, "at")
        try:
            hood = await memory.graph.neighbourhood(deps.read_scope, name, at=when)
        except RecordNotFoundError as exc:  # not found is an answer, not a misuse
            known = [e.name for e in await memory.graph.entities(deps.read_scope)][:30]
            return f"{exc}; known entities include {known}"
        except MemosError as exc:
            raise ModelRetry(str(exc)) from None
        lines = [hood.render()]
        lines += [f"(relation {r.id}) {r.render()}" for r in hood.relations]
        return "\n".join(lines)

    @toolset.tool_plain
    async def relation_add(subject: str, predicate: str, object: str, object_is_entity: bool = True,  # noqa: A002
                           exclusive: bool = False, since: str | None = None) -> str:
        """Record that subject - predicate - object holds (e.g. "Peter", "is", "Spider-Man"). exclusive: the subject has
        one such object at a time, so an open relation to another object is closed. since: ISO date it became true."""
        if not normal_name(subject) or not predicate.strip() or not object.strip():
            raise ModelRetry("subject, predicate and object must all be given")
        when = parse_when(since, "since")
        try:
            rel = await memory.graph.add_relation(deps.write_scope, subject, predicate, object, object_is_entity=object_is_entity,
                                                  exclusive=exclusive, valid_from=when, source_ids=deps.provenance(), actor=deps.actor)
        except MemosError as exc:
            raise ModelRetry(str(exc)) from None
        return f"saved relation {rel.id}: {rel.render()}"

    @toolset.tool_plain
    async def relation_close(relation_id: str, when: str | None = None) -> str:
        """Mark a stored relation as no longer true (from the ISO date `when`, default now); it stays in history."""
        end = parse_when(when, "when")
        try:
            rel = await memory.graph.close_relation(deps.read_scope, relation_id, when=end, actor=deps.actor)
        except MemosError as exc:
            raise ModelRetry(str(exc)) from None
        return f"closed relation {rel.id}: {rel.render()}"
