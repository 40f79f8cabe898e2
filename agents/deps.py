"""What every memos agent and tool is given: the memory, the conversation, who acts."""

from __future__ import annotations

from dataclasses import dataclass

from memos.context.core_memory import CoreMemory
from memos.context.session import MemorySession
from memos.memory import MemoryOS
from memos.store.scope import Scope

__all__ = ["MemoryDeps"]


@dataclass(frozen=True)
class MemoryDeps:
    """One agent's view of memory: a `MemorySession` (its scope, core blocks, recall log)."""

    session: MemorySession[MemoryOS]
    actor: str = "agent"
    """Written into history for every change the tools make."""
    approver: str = "user"
    """Recorded in history when a vault reveal is approved."""
    clearance: str = "high"
    """The most sensitive vault level this agent may reveal (with approval): low, medium or high."""

    @property
    def memory(self) -> MemoryOS:
        return self.session.memory

    @property
    def core(self) -> CoreMemory:
        return self.session.core

    @property
    def read_scope(self) -> Scope:
        """What the tools may read: this agent's memory across all its sessions."""
        return self.session.retrieval_scope

    @property
    def write_scope(self) -> Scope:
        """Where the tools write: the session's own scope."""
        return self.session.scope

    def provenance(self) -> list[str]:
        """Ids of the turn being answered, stored as the new record's `source_ids`."""
        return [self.session.context[-1].id] if self.session.context else []
