"""Every error memos raises, in one place.

The hierarchy has three branches, one per audience::

    MemosError
    ├── ConfigError              a developer's mistake; the message names the fix
    │   ├── UnknownMemoryTypeError
    │   ├── InvalidFilterError        a scope id, tag, date or id that cannot be used safely
    │   ├── ScopeError                a scope the caller may not act for (another user or agent than its API key's)
    │   ├── InvalidRecordError        a record that fails its type's validation
    │   │   ├── DuplicateIdError          an explicit record id that is already used in the database
    │   │   └── DuplicateBlockError       a core block whose label an active block of its scope has already
    │   └── EmbeddingDimensionError   the store was built with another embedder (`memos reindex`)
    ├── MemoryOSError            a runtime failure of the memory OS itself
    │   ├── StoreUnavailableError     the store cannot be opened, read or written (the message says why and what to do)
    │   │   └── StoreFullError        the disk holding the store is full
    │   ├── EmbedderUnavailableError  a remote embedder kept failing (rate limit, server error) past its retries
    │   ├── OverloadedError           too many calls wait already (`memos.batching.QueueLimits`); retry after a moment
    │   ├── RecordChangedError        a record changed or vanished between its read and a conditional write
    │   │   └── RecordSupersededError     a supersede of a record superseded already (supersede its successor)
    │   ├── RecordNotFoundError
    │   ├── BudgetError               a token budget that cannot be met
    │   ├── VaultKeyError             missing, wrong or corrupt vault key (defined in `memos.crypto`)
    │   ├── VaultAccessError          a reveal above the caller's clearance (defined in `memos.crypto`)
    │   └── CoreMemoryError           an edit of a core block that cannot be made (told to the model verbatim)
    │       ├── UnknownBlockError
    │       ├── BlockLimitError
    │       ├── ReadOnlyBlockError
    │       └── TextNotFoundError
    └── (feedback to a model is pydantic-ai's `ModelRetry`, raised by the tools in `agents/`)

Errors never carry a vault secret or a key in their message.
"""

from __future__ import annotations

__all__ = [
    "BlockLimitError",
    "BudgetError",
    "ConfigError",
    "CoreMemoryError",
    "DuplicateBlockError",
    "DuplicateIdError",
    "EmbedderUnavailableError",
    "EmbeddingDimensionError",
    "InvalidFilterError",
    "InvalidRecordError",
    "MemoryOSError",
    "MemosError",
    "OverloadedError",
    "ReadOnlyBlockError",
    "RecordChangedError",
    "RecordNotFoundError",
    "RecordSupersededError",
    "ScopeError",
    "StoreFullError",
    "StoreUnavailableError",
    "TextNotFoundError",
    "UnknownBlockError",
    "UnknownMemoryTypeError",
]


class MemosError(Exception):
    """Base class of every error memos raises on purpose."""


class ConfigError(MemosError, ValueError):
    """A developer's mistake: bad configuration or a call that can never work as written."""


class UnknownMemoryTypeError(ConfigError, KeyError):
    """A memory type name that is not registered on this `MemoryOS`."""

    def __init__(self, name: object, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(
            f"unknown memory type {name!r}; known types: {', '.join(known)}. "
            "Register a custom type with MemoryOS.open(..., types=[MyRecord])."
        )

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class InvalidFilterError(ConfigError):
    """A filter value (scope id, tag, record id, date) that cannot be used safely in a query."""


class ScopeError(ConfigError):
    """A scope the caller may not act for: over HTTP an API key acts for one user (and perhaps one
    agent); a call naming another is refused, whoever sent it (`memos.serve.deps`, `memos.client`)."""


class InvalidRecordError(ConfigError):
    """A record that does not validate against its memory type."""


class DuplicateIdError(InvalidRecordError):
    """A record id given explicitly that another record already has (ids are unique in the whole database)."""

    def __init__(self, record_id: str, where: str = "in this database") -> None:
        self.record_id = record_id
        super().__init__(f"record id {record_id!r} is already used {where}; ids are unique across the database. "
                         "Leave the id unset for a fresh one, or update the existing record")


class DuplicateBlockError(InvalidRecordError):
    """A core block added beside an active block of its label in its scope, or twice in one add: a
    scope has one block a label (`memos.context.block_labels`); the existing one is edited instead."""

    def __init__(self, label: str, scope: str, where: str) -> None:
        self.label = label
        super().__init__(f"core block {label!r} {where} in scope {scope}; a scope has one active block a label, so nothing "
                         "was added. Change a block that exists by editing it (core_memory_append, core_memory_replace or "
                         "core_memory_rethink; CoreMemory.append / replace / rethink), not by adding another")


class EmbeddingDimensionError(ConfigError):
    """The database's vectors were made by another embedder than the one given now."""


class MemoryOSError(MemosError, RuntimeError):
    """A runtime failure of the memory OS."""


class StoreUnavailableError(MemoryOSError):
    """The LanceDB store cannot be opened or written."""


class EmbedderUnavailableError(MemoryOSError):
    """A remote embedder answered with rate limits, server errors or no connection past its
    retries: nothing of the call that needed its vectors was stored."""


class OverloadedError(MemoryOSError):
    """Too many calls wait on this memory already (`memos.batching.QueueLimits.max_pending`, with
    `when_full="raise"`): nothing of the call was taken; try again after `retry_after` seconds."""

    def __init__(self, what: str, pending: int, retry_after: float) -> None:
        self.what = what
        self.pending = pending
        self.retry_after = retry_after
        super().__init__(f"{pending} {what} calls are waiting already; nothing of this one was taken: "
                         f"retry in {retry_after:g} s (or raise QueueLimits.max_pending)")


class StoreFullError(StoreUnavailableError):
    """The disk (or quota) holding the store is full: free space, then writing resumes."""


class RecordChangedError(MemoryOSError):
    """A conditional write found records changed or deleted since they were read (optimistic
    concurrency): the caller re-reads and re-decides, or skips them. Never a lost update."""

    def __init__(self, memory_type: str, ids: list[str], written: int) -> None:
        self.memory_type = memory_type
        self.ids = ids
        self.written = written
        super().__init__(f"{len(ids) - written} of {len(ids)} {memory_type} records changed or were deleted since they "
                         "were read; re-read them and try again")


class RecordSupersededError(RecordChangedError):
    """A supersede of a record that is superseded already (perhaps by another caller a moment
    before): its successor is the current version; supersede that one, if still needed."""

    def __init__(self, memory_type: str, record_id: str, successor: str | None) -> None:
        self.memory_type = memory_type
        self.ids = [record_id]
        self.written = 0
        self.successor = successor
        MemoryOSError.__init__(self, f"{memory_type} record {record_id} is superseded already"
                               + (f" by {successor}: that is its current version; supersede it instead if the change still applies"
                                  if successor else "; supersede its current version instead"))


class RecordNotFoundError(MemoryOSError, LookupError):
    """No record with that id exists in that scope and store."""


class BudgetError(MemoryOSError):
    """A token budget too small for what must always fit."""


class CoreMemoryError(MemoryOSError):
    """A core-block edit that cannot be made; the message says exactly what to do instead."""


class UnknownBlockError(CoreMemoryError, LookupError):
    """No core block has that label in this scope."""


class BlockLimitError(CoreMemoryError):
    """The edit would take a block past its size limit."""


class ReadOnlyBlockError(CoreMemoryError):
    """The block is read-only for agents."""


class TextNotFoundError(CoreMemoryError):
    """A replace whose old text is not in the block."""
