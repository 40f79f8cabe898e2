"""The memory tools an agent calls: core-block edits, search, insert, vault.

`memory_toolset(deps)` builds a pydantic-ai `FunctionToolset` bound to one `MemoryDeps` (one
scope of one memory), so it mounts on any agent whatever that agent's own deps are. Every
tool validates its arguments before touching memory; misuse raises `ModelRetry` with what to
fix, and changes nothing. Results shown to a model never contain a vault secret; revealing
one is an approval-required tool (pydantic-ai deferred tools).
"""

from __future__ import annotations

from typing import Any, Literal

from memos.memtypes import BASE_FIELDS, VaultItem
from pydantic import ValidationError
from pydantic_ai import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from memos.exceptions import MemosError
from memos.validation import folded

from .arguments import parse_when
from .deps import MemoryDeps

__all__ = ["ALL_TOOL_NAMES", "INSERTABLE_FIELDS", "memory_toolset", "parse_when"]

ALL_TOOL_NAMES = (
    "core_memory_append", "core_memory_replace", "core_memory_rethink", "memory_search", "conversation_search",
    "memory_insert", "vault_store", "vault_reveal", "entity_lookup", "relation_add", "relation_close",
)
"""Every tool `memory_toolset` provides."""

INSERTABLE_FIELDS = frozenset({"importance", "tags", "valid_from", "valid_to"})
"""Base-record fields a model may set on insert, besides the type's own fields."""

MAX_K = 50


def _retry(exc: Exception) -> ModelRetry:
    return ModelRetry(str(exc))


def memory_toolset(deps: MemoryDeps, *, reveal: bool = True) -> FunctionToolset[Any]:
    """The memory tools for one scope (see the module docstring)."""
    toolset: FunctionToolset[Any] = FunctionToolset(id="memos")
    memory = deps.memory

    async def save(record: Any) -> Any:
        try:
            [stored] = await memory.add(deps.write_scope, record, actor=deps.actor)
        except MemosError as exc:
            raise _retry(exc) from None
        return stored

    async def edit_core(label: str, edit: Any, what: str) -> str:
        try:
            block = await edit
        except MemosError as exc:
            raise _retry(exc) from None
        return f"{what}; block {label!r} is now {len(block.value)}/{block.limit} characters"

    @toolset.tool_plain
    async def core_memory_append(label: str, text: str) -> str:
        """Append a line to a core memory block (e.g. label "human" for facts about the user)."""
        if not text.strip():
            raise ModelRetry("text is empty; give the line to append")
        return await edit_core(label, deps.core.append(label, text, actor=deps.actor), "appended")

    @toolset.tool_plain
    async def core_memory_replace(label: str, old: str, new: str) -> str:
        """Replace exact text in a core memory block (new may be empty to delete the text)."""
        return await edit_core(label, deps.core.replace(label, old, new, actor=deps.actor), "replaced")

    @toolset.tool_plain
    async def core_memory_rethink(label: str, new_value: str) -> str:
        """Rewrite a whole core memory block (to reorganise or condense it)."""
        return await edit_core(label, deps.core.rethink(label, new_value, actor=deps.actor), "rewritten")

    @toolset.tool_plain
    async def memory_search(query: str, stores: list[str] | None = None, since: str | None = None,
                            until: str | None = None, k: int = 8) -> str:
        """Search long-term memory. stores: any of the store names (default: all but core, which is
        already in your prompt); since/until: ISO dates."""
        if not query.strip():
            raise ModelRetry("query is empty; say what to look for")
        if not 1 <= k <= MAX_K:
            raise ModelRetry(f"k must be between 1 and {MAX_K}")
        names = _stores(deps, stores) if stores else memory.searchable_types
        start, end = parse_when(since, "since"), parse_when(until, "until")
        try:
            hits = await memory.search(query, deps.read_scope, types=names, k=k, since=start, until=end)
        except MemosError as exc:
            raise _retry(exc) from None
        if not hits:
            return "no memories found"
        return "\n".join(f"({h.memory_type} {h.id}) " + "\n".join(h.lines()) for h in hits)  # a reply under the turn it answers

    @toolset.tool_plain
    async def conversation_search(query: str | None = None, since: str | None = None, until: str | None = None,
                                  limit: int = 10) -> str:
        """Search past conversation turns by text and/or date range (ISO dates), including evicted ones."""
        if not 1 <= limit <= MAX_K:
            raise ModelRetry(f"limit must be between 1 and {MAX_K}")
        start, end = parse_when(since, "since"), parse_when(until, "until")
        try:
            turns = await deps.session.conversation_search(query or None, since=start, until=end, limit=limit)
        except MemosError as exc:
            raise _retry(exc) from None
        return "\n".join(t.render() for t in turns) or "no matching turns"

    @toolset.tool_plain
    async def memory_insert(store: str, fields: dict[str, Any]) -> str:
        """Save a new memory: store is semantic, procedural, episodic, resource (or a custom store);
        fields are that store's fields (e.g. semantic: subject, summary, details)."""
        record_type = memory.record_type(_stores(deps, [store])[0])
        if not record_type.model_writable:
            tool = ("core_memory_append" if record_type.always_in_prompt else
                    "vault_store" if record_type.secret_fields else
                    "relation_add" if getattr(record_type, "graph_store", False) else None)
            raise ModelRetry(f"use {tool} to write to the {store} store" if tool else f"the {store} store is read-only for you")
        allowed = set(record_type.content_fields()) | INSERTABLE_FIELDS
        unknown = set(fields) - allowed
        if unknown:
            raise ModelRetry(f"unknown fields {sorted(unknown)} for store {store!r}; its fields are {sorted(allowed)}")
        try:
            record = record_type.model_validate({**fields, "source_ids": deps.provenance()})
        except ValidationError as exc:
            raise ModelRetry(f"invalid fields for {store!r}: {_errors(exc)}") from None
        stored = await save(record)
        return f"saved {store} {stored.id}"

    @toolset.tool_plain
    async def vault_store(caption: str, secret: str, entry_type: Literal["credential", "address", "id_number", "payment", "contact", "other"] = "other",
                          sensitivity: Literal["low", "medium", "high"] = "high") -> str:
        """Store a sensitive item encrypted; caption is a harmless description (it is what search shows)."""
        if not secret:
            raise ModelRetry("secret is empty")
        if folded(secret) and folded(secret) in folded(caption):
            raise ModelRetry("the caption must not contain the secret; describe the item instead")
        try:
            item = VaultItem(caption=caption, secret=secret, entry_type=entry_type, sensitivity=sensitivity,
                             source_ids=deps.provenance())
        except ValidationError as exc:
            raise ModelRetry(f"invalid vault item: {_errors(exc)}") from None
        stored = await save(item)
        return f"stored vault item {stored.id} ({entry_type}, {sensitivity}): {caption}"

    if reveal:
        @toolset.tool_plain(requires_approval=True)
        async def vault_reveal(item_id: str) -> str:
            """Reveal a vault item's secret to the user. Needs the user's approval each time."""
            try:
                return await memory.reveal(deps.read_scope, item_id, approved_by=deps.approver, clearance=deps.clearance)
            except MemosError as exc:
                raise _retry(exc) from None

    if "entity" in memory.types and "relation" in memory.types:
        from .graph import add_graph_tools

        add_graph_tools(toolset, deps)
    return toolset


def _stores(deps: MemoryDeps, stores: list[str] | None) -> list[str]:
    names = deps.memory.type_names
    if not stores:
        return names
    unknown = [s for s in stores if s not in names]
    if unknown:
        raise ModelRetry(f"unknown store(s) {unknown}; the stores are {names}")
    return list(dict.fromkeys(stores))


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()[:5])


assert not INSERTABLE_FIELDS - BASE_FIELDS
