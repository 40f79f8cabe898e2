"""The pydantic-ai implementation of the kernel's `memos.model_backend.ModelBackend`.

A `MemoryOS` opened without a `backend=` loads this one on first use (`MemoryOS.backend`), so
jobs given a model reflect and judge conflicts with the agents here, and `MemoryOS.agent(...)`
returns a `ChatAgent`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memos.memtypes import MemoryRecord

from memos.memory import MemoryOS
from memos.store.scope import Scope
from memos.validation import check_options

from .chat import ChatAgent
from .consolidation import FactDecision, decide_conflicts
from .reflection import Insight, reflect_on

__all__ = ["PydanticAIBackend"]


class PydanticAIBackend:
    """Reflection, conflict judgement and chat agents, each a pydantic-ai agent run with the given model."""

    async def reflect(self, model: Any, episodes: Sequence[MemoryRecord], *, now: datetime) -> list[Insight]:
        return await reflect_on(model, episodes, now=now)

    async def decide_conflicts(self, model: Any, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], *,
                               now: datetime) -> list[FactDecision]:
        return await decide_conflicts(model, pairs, now=now)

    def chat_agent(self, memory: MemoryOS, scope: Scope, model: Any, **options: Any) -> ChatAgent:
        return ChatAgent(memory, scope, model, **check_options(ChatAgent, options, "MemoryOS.agent"))

