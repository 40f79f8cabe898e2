"""Mount memos on your own pydantic-ai agent.

    memory = await MemoryOS.open("memory")
    memos = await memory_capability(memory, Scope("alice", "helper"))
    agent = Agent("openai:gpt-4o", capabilities=[memos])

Each run then sees the core blocks and the memories recalled for its prompt (as dynamic
instructions), and can call the memory tools the builder chose (`tools="read"` by default,
`"write"`, `"all"` or a set of names; the vault tools only with `vault=True`, reveals decided by
`approve` inside the run, so the agent needs no `DeferredToolRequests` output). With
`record_turns=True` (default) the prompt and the reply are written to the recall log; with
`manager=` a model, the memory manager then reads those two turns before the run returns.
A manager failure is logged and kept in history as a job outcome; the run's result stands.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Collection
from typing import Any, Literal

from memos.memtypes import Episode
from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.capabilities import Capability, WrapRunHandler
from pydantic_ai.run import AgentRunResult
from pydantic_core import to_json

from memos import prompts
from memos.context.session import MemorySession
from memos.exceptions import ConfigError
from memos.jobs.partition import user_jobs_lock
from memos.memory import MemoryOS
from memos.store.scope import Scope

from .chat import Approver, scrub_revealed
from .deps import MemoryDeps
from .manager import ACTOR, MemoryManager
from .tools import ALL_TOOL_NAMES, memory_toolset

__all__ = ["MemosCapability", "MemosInstructions", "READ_TOOLS", "VAULT_TOOLS", "WRITE_TOOLS", "choose_tools", "memory_capability"]

log = logging.getLogger("memos.agents")

READ_TOOLS = frozenset({"memory_search", "conversation_search", "entity_lookup"})
"""`tools="read"` (the default): search and look up, change nothing."""
VAULT_TOOLS = frozenset({"vault_store", "vault_reveal"})
"""Mounted only with `vault=True`."""
WRITE_TOOLS = frozenset(ALL_TOOL_NAMES) - VAULT_TOOLS
"""`tools="write"` and `"all"`: the read tools plus core-block edits, memory_insert, relations."""

ToolChoice = Literal["read", "write", "all"] | Collection[str]


def choose_tools(tools: ToolChoice, *, vault: bool) -> frozenset[str]:
    """The tool names a mount exposes; an unknown name or preset, or a vault tool without
    `vault=True`, is a `ConfigError` naming the valid choices."""
    if isinstance(tools, str):
        presets = {"read": READ_TOOLS, "write": WRITE_TOOLS, "all": WRITE_TOOLS}
        if tools not in presets:
            raise ConfigError(f"unknown tools preset {tools!r}; use 'read', 'write', 'all' or a set of tool names "
                              f"from {sorted(ALL_TOOL_NAMES)}")
        return presets[tools] | (VAULT_TOOLS if vault else frozenset())
    chosen = frozenset(tools)
    unknown = chosen - set(ALL_TOOL_NAMES)
    if unknown:
        raise ConfigError(f"unknown memory tool(s) {sorted(unknown)}; the tools are {sorted(ALL_TOOL_NAMES)}")
    if chosen & VAULT_TOOLS and not vault:
        raise ConfigError(f"{sorted(chosen & VAULT_TOOLS)} need vault=True (a reveal then asks your `approve` callback)")
    return chosen


class MemosInstructions:
    """The dynamic instructions: core blocks plus the memories recalled for the run's prompt."""

    def __init__(self, session: MemorySession[MemoryOS], *, k: int, tools: Collection[str] = WRITE_TOOLS) -> None:
        self.session = session
        self.k = k
        self.tools = tools

    async def __call__(self, ctx: RunContext[Any]) -> str:
        session = self.session
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else ""
        blocks = await session.core.blocks()
        in_context = {t.id for t in session.context}
        hits = []
        if prompt.strip():
            hits = [h for h in await session.memory.search(prompt, session.retrieval_scope, k=self.k, replies=False)
                    if h.id not in in_context]
        return prompts.render("mounted.j2", blocks=blocks, memories=[h.record.render() for h in hits],
                              writes="memory_insert" in self.tools, searches="memory_search" in self.tools)


class MemosCapability(Capability[Any]):
    """The mounted memory: instructions and tools, plus run hooks that record the turns, run the
    memory manager on them, and decide vault reveals (see the module docstring)."""

    def __init__(self, session: MemorySession[MemoryOS], *, tools: frozenset[str], record_turns: bool, k: int,
                 actor: str, approve: Approver | None, manager: MemoryManager | None) -> None:
        toolset = memory_toolset(MemoryDeps(session, actor=actor), reveal="vault_reveal" in tools)
        super().__init__(instructions=MemosInstructions(session, k=k, tools=tools),
                         toolsets=[toolset.filtered(lambda ctx, tool: tool.name in tools)], id="memos",
                         description="Long-term memory (memos): core blocks, recalled memories and memory tools.")
        self.session = session
        self.tool_names = tools
        self.record_turns = record_turns
        self.actor = actor
        self.approve = approve
        self.manager = manager

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else ""
        asked = await self.session.record_turn("user", prompt, fit=True) if self.record_turns and prompt.strip() else None
        result = await handler()
        output = result.output
        if self.record_turns and asked is not None and not isinstance(output, DeferredToolRequests):
            text = output if isinstance(output, str) else to_json(output).decode()  # structured output: as JSON
            answer = await self.session.record_turn("assistant", scrub_revealed(text, result.all_messages()), actor=self.actor)
            if self.manager is not None:
                await self._manage([asked, answer])
        return result

    async def _manage(self, turns: list[Episode]) -> None:
        """Run the memory manager on this run's turns, holding the user's job lock (as a chat's manager,
        extraction and reflection do): forgetting the user waits for the run and erases what it
        wrote, and a consolidation of the user does not change the records between the plan's check
        and its writes. A failure is logged and kept in history."""
        assert self.manager is not None
        try:
            async with self.session.memory.exclusive(user_jobs_lock(self.session.scope.user_id)):
                await self.manager.run(turns)
        except Exception as exc:  # noqa: BLE001 - not swallowed: logged and kept as a job outcome in history
            error = f"{type(exc).__name__}: {exc}"
            log.error("memory manager failed on %d mounted turns: %s", len(turns), error)
            outcome = {"job": "manage", "scope": str(self.session.scope), "turns": len(turns),
                       "turn_ids": [t.id for t in turns], "errors": [error]}
            await self.session.memory.record_job(self.session.scope, "manage", outcome, actor=ACTOR, note="failed")

    async def handle_deferred_tool_calls(self, ctx: RunContext[Any], *,
                                         requests: DeferredToolRequests) -> DeferredToolResults | None:
        """Vault reveals run only if `approve` says yes (none given: every reveal is denied)."""
        mine = [call for call in requests.approvals if call.tool_name in self.tool_names]
        if not mine:
            return None
        results = DeferredToolResults()
        for call in mine:
            verdict = self.approve(call) if self.approve else False
            if inspect.isawaitable(verdict):
                verdict = await verdict
            results.approvals[call.tool_call_id] = True if verdict else ToolDenied("the user did not approve revealing this secret")
        return results


async def memory_capability(memory: MemoryOS, scope: Scope, *, tools: ToolChoice = "read", vault: bool = False,
                            approve: Approver | None = None, record_turns: bool = True, manager: Any = None,
                            k: int = 8, actor: str = "agent") -> MemosCapability:
    """A pydantic-ai capability that gives any agent this scope's memory: instructions and tools.

    tools: "read" (default: search only), "write" (search, core edits, memory_insert, relations),
    "all", or a set of tool names; vault: add vault_store / vault_reveal (reveals decided by
    `approve`, denied without it); manager: a model (or model string) for the memory manager,
    run on each run's recorded prompt and reply."""
    chosen = choose_tools(tools, vault=vault)
    if manager is not None and not record_turns:
        raise ConfigError("manager= runs on the recorded turns; it needs record_turns=True")
    session = await MemorySession.open(memory, scope, instructions="")
    runner = MemoryManager(memory, scope, manager) if manager is not None and record_turns else None
    return MemosCapability(session, tools=chosen, record_turns=record_turns, k=k, actor=actor, approve=approve,
                           manager=runner)
