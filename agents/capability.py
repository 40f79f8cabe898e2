"""Mount memos on your own pydantic-ai agent.

    memory = await MemoryOS.open("memory")
    memos = await memory_capability(memory, Scope("alice", "helper"))
    agent = Agent("openai:gpt-4o", capabilities=[memos])

Each run then sees the core blocks and the memories recalled for its prompt (as dynamic
instructions), and can call the memory tools (`memos.agents.tools`). With `record_turns=True`
(default) each prompt is also written to the recall log, so conversation search finds it.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import Capability

from memos import prompts
from memos.context.session import MemorySession
from memos.memory import MemoryOS
from memos.store.scope import Scope

from .deps import MemoryDeps
from .tools import memory_toolset

__all__ = ["MemosInstructions", "memory_capability"]


class MemosInstructions:
    """The dynamic instructions: core blocks plus the memories recalled for the run's prompt."""

    def __init__(self, session: MemorySession[MemoryOS], *, record_turns: bool, k: int) -> None:
        self.session = session
        self.record_turns = record_turns
        self.k = k

    async def __call__(self, ctx: RunContext[Any]) -> str:
        session = self.session
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else ""
        if self.record_turns and prompt and not any(t.summary == prompt for t in session.context[-1:]):
            await session.record_turn("user", prompt)
        blocks = await session.core.blocks()
        in_context = {t.id for t in session.context}
        hits = []
        if prompt.strip():
            hits = [h for h in await session.memory.search(prompt, session.retrieval_scope, k=self.k, replies=False)
                    if h.id not in in_context]
        return prompts.render("mounted.j2", blocks=blocks, memories=[h.record.render() for h in hits])


async def memory_capability(memory: MemoryOS, scope: Scope, *, record_turns: bool = True, k: int = 8,
                            actor: str = "agent") -> Capability[Any]:
    """A pydantic-ai capability that gives any agent this scope's memory: instructions and tools."""
    session = await MemorySession.open(memory, scope, instructions="")
    return Capability(
        instructions=MemosInstructions(session, record_turns=record_turns, k=k),
        toolsets=[memory_toolset(MemoryDeps(session, actor=actor))],
        id="memos",
        description="Long-term memory (memos): core blocks, recalled memories and memory tools.",
    )
