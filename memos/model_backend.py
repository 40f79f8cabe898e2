"""What the kernel asks of a language model, as protocols.

The kernel never imports `memos.agents` (agents sit a floor above it; see the README's
"Floors"). Where it needs a model -- a reflection, a judgement on two facts that may conflict,
a chat agent for `MemoryOS.agent(...)` -- it asks the memory's `ModelBackend`: the one passed to
`MemoryOS.open(..., backend=...)`, else the pydantic-ai one (`memos.agents.backend`), which
`MemoryOS.backend` loads on first use, so `import memos` does not load pydantic-ai.

The summarizer of paging is the same idea on a smaller scale: `memos.context.paging.Summarizer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: `import memos` (and `memos --help`) stays free of pydantic
    from memos.context.session import CompiledContext
    from memos.store.scope import Scope

    from .memtypes import MemoryRecord

__all__ = ["AgentTurn", "ConflictDecision", "Insight", "MemoryAgent", "ModelBackend"]


class Insight(Protocol):
    """One thing a reflection learned from several episodes (what the kernel stores of it)."""

    kind: str
    """"fact" or "procedure"."""
    subject: str
    summary: str
    steps: list[str]
    importance: float
    source_ids: list[str]


class ConflictDecision(Protocol):
    """A model's verdict on an (older, newer) pair of facts about one subject."""

    old_id: str
    new_id: str
    action: str
    """"add", "update" (merge the older into the newer), "supersede" or "nothing"."""
    reason: str


class AgentTurn(Protocol):
    """What a chat agent's last turn was: its reply and the context the model was shown."""

    @property
    def reply(self) -> str: ...

    @property
    def context(self) -> CompiledContext: ...

    @property
    def tool_calls(self) -> Sequence[str]:
        """The memory tools the model called, in order."""
        ...


class MemoryAgent(Protocol):
    """What `MemoryOS.agent(...)` returns: a chat agent over one scope whose memory pages itself
    (`memos.agents.chat.ChatAgent` is the implementation; it sits a floor above, so it is named
    here by what callers use of it)."""

    @property
    def scope(self) -> Scope: ...

    @property
    def name(self) -> str:
        """The agent's name: the actor of its turns."""
        ...

    @property
    def last(self) -> AgentTurn | None:
        """The newest turn (None before the first)."""
        ...

    async def chat(self, text: str) -> str:
        """Answer `text`: the turn is stored, the context compiled, the model called."""
        ...

    def chat_sync(self, text: str) -> str:
        """Synchronous form of `chat`."""
        ...

    async def flush(self) -> Sequence[Any]:
        """Wait for the memory manager's pending work (run it now if it is due); its reports."""
        ...

    def flush_sync(self) -> Sequence[Any]:
        """Synchronous form of `flush`."""
        ...


class ModelBackend(Protocol):
    """The model-backed work the kernel delegates; `model` is whatever the caller was given."""

    async def reflect(self, model: Any, episodes: Sequence[MemoryRecord], *, now: datetime) -> Sequence[Insight]:
        """Cited insights from `episodes` (each insight's `source_ids` are ids of the episodes shown)."""
        ...

    async def decide_conflicts(self, model: Any, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], *,
                               now: datetime) -> Sequence[ConflictDecision]:
        """One decision per (older, newer) pair of facts."""
        ...

    def chat_agent(self, memory: Any, scope: Scope, model: Any, **options: Any) -> MemoryAgent:
        """A chat agent over `scope` of `memory` (a `memos.memory.MemoryOS`, which sits above this
        module: named, not imported) -- what `MemoryOS.agent` returns."""
        ...
