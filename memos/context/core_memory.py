"""Core memory: the labelled blocks that are always in the prompt (MemGPT's in-context memory).

Blocks live in the `core` store. Every edit writes a new version of the block and supersedes
the old one, so the store itself keeps each version (and history has each edit, with actor
and time). A block belongs to one agent of a user, or is *shared* by all of the user's
agents: a shared block is stored user-wide (agent_id "") and every agent reads it at its
next step, so an edit by one agent is seen by all.

Errors are `CoreMemoryError`s whose message can be handed to a model verbatim.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from memos.context.block_labels import lock_key
from memos.exceptions import BlockLimitError, DuplicateBlockError, ReadOnlyBlockError, TextNotFoundError, UnknownBlockError
from memos.memtypes import CoreBlock, MemoryRecord
from memos.store.scope import Scope

R = TypeVar("R", bound=MemoryRecord)


class CoreHost(Protocol):
    """What core memory needs of the memory its blocks live in (`memos.memory.MemoryOS` is one;
    it sits above this module, so it is described here, not imported)."""

    async def add(self, scope: Scope, records: R | Iterable[R], *, actor: str = ...) -> list[R]: ...

    async def list_in(self, scopes: Sequence[Scope], memory_type: type[R], *,
                      status: str | Sequence[str] | None = ..., cached: bool = ...) -> list[R]: ...

    async def supersede(self, scope: Scope, memory_type: str | type[MemoryRecord], old_id: str, new: R, *,
                        actor: str = ...) -> R: ...

    def exclusive(self, key: str) -> AbstractAsyncContextManager[None]: ...

__all__ = ["BlockSpec", "CoreHost", "CoreMemory", "DEFAULT_BLOCKS"]

SHARED_TAG = "shared"


@dataclass(frozen=True)
class BlockSpec:
    """A block to create when a scope first uses core memory."""

    label: str
    description: str = ""
    """What belongs in the block, shown to the agent."""
    value: str = ""
    limit: int = 2000
    """Maximum characters of value."""
    read_only: bool = False
    shared: bool = False
    """Stored user-wide: every agent of the user reads and edits the same block."""


DEFAULT_BLOCKS: tuple[BlockSpec, ...] = (
    BlockSpec("persona", "Who you are: your role, character and how you speak.",
              "I am a helpful assistant with a long-term memory. I remember what matters to the people I work with."),
    BlockSpec("human", "What you know about the person you talk with: name, preferences, goals, important facts."),
)


class CoreMemory:
    """The core blocks of one agent of one user (plus the user's shared blocks)."""

    def __init__(self, memory: CoreHost, scope: Scope, *, defaults: Sequence[BlockSpec] = DEFAULT_BLOCKS) -> None:
        self.memory = memory
        self.own_scope = Scope(scope.user_id, scope.agent_id or "", "")
        self.shared_scope = Scope(scope.user_id, "", "")
        self.defaults = tuple(defaults)
        self._seeded = False

    async def blocks(self, *, cached: bool = False) -> list[CoreBlock]:
        """Every block this agent sees (default blocks first, in their order); defaults are created on first use.

        `cached`: reuse the last read if the core table has not changed since (`MemoryOS.check_versions`)."""
        if not self._seeded:
            await self._seed()
        return await self._current(cached)

    async def get(self, label: str) -> CoreBlock:
        """The block named `label`."""
        blocks = await self.blocks()
        for block in blocks:
            if block.label == label:
                return block
        known = ", ".join(repr(b.label) for b in blocks) or "none"
        raise UnknownBlockError(f"there is no core block {label!r}; the blocks are {known}")

    async def create(self, label: str, *, description: str = "", value: str = "", limit: int = 2000,
                     read_only: bool = False, shared: bool = False, actor: str = "user") -> CoreBlock:
        """Add a block (an existing label is returned unchanged)."""
        if (block := await self._find(label)) is not None:
            return block
        try:  # the add takes the label's lock and refuses it if taken (`memos.context.block_labels`)
            return await self._add(label, description, value, limit, read_only, shared, actor)
        except DuplicateBlockError:
            if (block := await self._find(label)) is None:  # taken where this agent does not look: a user-wide block not shared
                raise
            return block  # created by another caller a moment ago

    async def _find(self, label: str) -> CoreBlock | None:
        return next((block for block in await self._current() if block.label == label), None)

    async def _add(self, label: str, description: str, value: str, limit: int, read_only: bool, shared: bool,
                   actor: str) -> CoreBlock:
        block = CoreBlock(label=label, block_description=description, value=value, limit=limit,
                          read_only=read_only, tags=[SHARED_TAG] if shared else [])
        [stored] = await self.memory.add(self.shared_scope if shared else self.own_scope, block, actor=actor)
        return stored

    async def append(self, label: str, text: str, *, actor: str) -> CoreBlock:
        """Add `text` on a new line at the end of the block."""
        async with self._editing(label):
            block = await self._editable(label)
            value = f"{block.value}\n{text}" if block.value else text
            return await self._write(block, value, actor, f"append of {len(text)} characters")

    async def replace(self, label: str, old: str, new: str, *, actor: str) -> CoreBlock:
        """Replace the exact text `old` (every occurrence) by `new`; `new` may be empty to delete."""
        async with self._editing(label):
            block = await self._editable(label)
            if not old or old not in block.value:
                raise TextNotFoundError(
                    f"the text {old[:80]!r} is not in block {label!r}; copy the exact text to replace from the block, "
                    "or use core_memory_rethink to rewrite the whole block"
                )
            return await self._write(block, block.value.replace(old, new), actor, "replace")

    async def rethink(self, label: str, value: str, *, actor: str) -> CoreBlock:
        """Rewrite the whole block."""
        async with self._editing(label):
            block = await self._editable(label)
            return await self._write(block, value, actor, "rewrite")

    # --- internals -----------------------------------------------------------------------

    async def _current(self, cached: bool = False) -> list[CoreBlock]:
        both = self.own_scope == self.shared_scope
        found = await self.memory.list_in([self.own_scope] if both else [self.own_scope, self.shared_scope], CoreBlock,
                                          cached=cached)
        own = [b for b in found if b.agent_id == self.own_scope.agent_id]
        shared = [] if both else [b for b in found if b.agent_id == "" and SHARED_TAG in b.tags]
        by_label: dict[str, CoreBlock] = {}
        for block in [*shared, *own]:  # the agent's own block wins over a shared one of the same label
            assert isinstance(block, CoreBlock)
            by_label[block.label] = block
        order = {spec.label: i for i, spec in enumerate(self.defaults)}
        return sorted(by_label.values(), key=lambda b: (order.get(b.label, len(order)), b.label))

    async def _seed(self) -> None:
        existing = {b.label for b in await self._current()}
        for spec in self.defaults:
            if spec.label not in existing:
                await self.create(spec.label, description=spec.description, value=spec.value, limit=spec.limit,
                                  read_only=spec.read_only, shared=spec.shared, actor="system")
        self._seeded = True

    def _lock(self, label: str) -> AbstractAsyncContextManager[None]:
        """One change of the user's blocks named `label` at a time, in every task and every process of
        the store (`exclusive`): an edit reads the block and supersedes it, so two at once each
        superseded the version they both read and one was lost (12 concurrent appends left 3). Adds of
        a block hold the same lock (`memos.context.block_labels`): two creations of a label made two blocks."""
        return self.memory.exclusive(lock_key(self.own_scope.user_id, label))

    @contextlib.asynccontextmanager
    async def _editing(self, label: str) -> AsyncIterator[None]:
        """`_lock` for an edit, the default blocks created first (each under its own lock: not nested)."""
        if not self._seeded:
            await self._seed()
        async with self._lock(label):
            yield

    async def _editable(self, label: str) -> CoreBlock:
        block = await self.get(label)
        if block.read_only:
            raise ReadOnlyBlockError(f"core block {label!r} is read-only; you cannot edit it")
        return block

    async def _write(self, block: CoreBlock, value: str, actor: str, what: str) -> CoreBlock:
        if len(value) > block.limit:
            raise BlockLimitError(
                f"the {what} would make block {block.label!r} {len(value):,} characters; its limit is {block.limit:,} "
                f"and it holds {len(block.value):,} now. Shorten the text, or use core_memory_replace / "
                "core_memory_rethink to condense the block first"
            )
        scope = Scope(block.user_id, block.agent_id, block.session_id)
        successor = CoreBlock(label=block.label, block_description=block.block_description, value=value,
                              limit=block.limit, read_only=block.read_only, tags=block.tags,
                              importance=block.importance, source_ids=[block.id])
        return await self.memory.supersede(scope, CoreBlock, block.id, successor, actor=actor)
