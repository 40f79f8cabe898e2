"""One active core block a label in each scope: the check every add of core blocks passes.

`CoreMemory` (`memos.context.core_memory`) reads a scope's blocks by label. A second active block
of a label, added through `MemoryOS.add` (the server's and MCP's adds call it) or an import, took
the first one's place in the prompt, and edits went to either. So an add of a core block whose
label an active block of the same user, agent and session ids has already, or another block of
the same add has, is refused (`DuplicateBlockError`) and stores nothing: the existing block is
edited instead. A shared block (stored without an agent) and an agent's own block of one label
are two scopes: the agent's own wins in its prompt, by design. A block's next version keeps its
label (`check_successor`): a supersede never takes a label anew, so it needs no check.

An add checks and writes under its labels' locks (`lock_key`), the ones `CoreMemory` holds while
it edits a block, across every process of the store: two adds at once cannot both find a label free.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from memos.exceptions import DuplicateBlockError, InvalidRecordError
from memos.memtypes import CoreBlock, MemoryRecord
from memos.store.protocol import Store
from memos.store.scope import Scope, Where

__all__ = ["check_label_kept", "check_labels_free", "check_successor", "labels_claimed", "lock_key"]


def lock_key(user_id: str, label: str) -> str:
    """The `exclusive` key of a user's blocks named `label` (each agent's and the shared one)."""
    return f"core\x1f{user_id}\x1f{label}"


@contextlib.asynccontextmanager
async def labels_claimed(store: Store, scope: Scope, records: Sequence[MemoryRecord]) -> AsyncIterator[None]:
    """Held while `records` are added in `scope`: the locks of their core blocks' labels, taken
    once none of the labels is taken in `scope` (else `DuplicateBlockError`, before anything is written)."""
    stamp = dict(scope.stamp())
    blocks = [r.model_copy(update=stamp) for r in records if isinstance(r, CoreBlock)]
    async with contextlib.AsyncExitStack() as held:
        for label in sorted({b.label for b in blocks}):  # in one order: two adds never hold what the other waits for
            await held.enter_async_context(store.locks.hold(lock_key(scope.user_id, label)))
        await check_labels_free(store, blocks)
        yield


async def check_labels_free(store: Store, blocks: Sequence[MemoryRecord]) -> None:
    """`DuplicateBlockError` if two active core blocks of `blocks` (as stamped) share a scope and a
    label, or one shares them with an active block stored under another id (a stored block of the
    same id is the one it replaces: an import's upsert)."""
    slots: dict[tuple[str, str, str, str], CoreBlock] = {}
    for block in blocks:
        if isinstance(block, CoreBlock) and block.status == "active":
            slot = (block.user_id, block.agent_id, block.session_id, block.label)
            if slot in slots:
                raise DuplicateBlockError(block.label, _scope_name(*slot[:3]), "is given twice in this add")
            slots[slot] = block
    for user_id in sorted({user for user, *_ in slots}):
        labels = sorted({label for user, _, _, label in slots if user == user_id})
        where = Where().eq("user_id", user_id).status_in(("active",)).any_of("label", labels).build()
        for row in await store.rows(CoreBlock.memory_type, where, columns=["id", "agent_id", "session_id", "label"]):
            mine = slots.get((user_id, row["agent_id"], row["session_id"], row["label"]))
            if mine is not None and mine.id != row["id"]:
                raise DuplicateBlockError(row["label"], _scope_name(user_id, row["agent_id"], row["session_id"]),
                                          f"exists already (record {row['id']})")


def check_successor(old: MemoryRecord, new: MemoryRecord) -> None:
    """A core block's next version keeps its label: another label is another block, added on its own."""
    if isinstance(old, CoreBlock) and isinstance(new, CoreBlock) and new.label != old.label:
        raise InvalidRecordError(f"core block {old.label!r} cannot be superseded by a block labelled {new.label!r}: "
                                 "a block's next version keeps its label; add a block for the new label instead")


def _scope_name(user_id: str, agent_id: str, session_id: str) -> str:
    name = str(Scope(user_id, agent_id or None, session_id or None))
    return name if agent_id else f"{name} (no agent: the user-wide blocks)"


def check_label_kept(record: MemoryRecord, changes: dict[str, object]) -> None:
    """An update keeps a core block's label: relabelled, it could take the place of another active
    block of that label in the prompt (two blocks of one label, the first hidden)."""
    if isinstance(record, CoreBlock) and "label" in changes and changes["label"] != record.label:
        raise InvalidRecordError(f"core block {record.label!r} cannot be relabelled {changes['label']!r}: a label names "
                                 "its block; create a block with the new label (CoreMemory.create) and archive this one")

