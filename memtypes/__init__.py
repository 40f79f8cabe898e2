"""Typed memory modules: a small base class and the built-in memory types.

Add a memory type by subclassing `MemoryRecord` (see `memtypes.base`) and passing the class
to `MemoryOS.open(..., types=[...])`.
"""

from __future__ import annotations

from .base import BASE_FIELDS, MemoryRecord, RecordStatus, new_id
from .core import CoreBlock
from .entity import Entity, Relation
from .episodic import Episode
from .passage import Passage
from .procedural import Procedure
from .resource import Resource
from .semantic import Fact
from .vault import VaultItem

__all__ = [
    "BASE_FIELDS",
    "BUILTIN_TYPES",
    "CoreBlock",
    "Entity",
    "Episode",
    "Fact",
    "MemoryRecord",
    "Passage",
    "Procedure",
    "RecordStatus",
    "Relation",
    "Resource",
    "VaultItem",
    "new_id",
]

BUILTIN_TYPES: tuple[type[MemoryRecord], ...] = (CoreBlock, Episode, Fact, Procedure, Resource, VaultItem, Entity, Relation)
"""The stores every `MemoryOS` has: core, episodic, semantic, procedural, resource and vault, and the
entity graph's entity and relation (`memtypes.entity`). The passages of long turns
(`memtypes.passage`) are opt-in: `MemoryOS.open(..., types=[Passage])`."""
