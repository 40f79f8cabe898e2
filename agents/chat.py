"""The chat agent: answers from the compiled context and pages memory in with tools.

One turn (`ChatAgent.chat`):

1. the user message is recorded (episodic recall log) and the context is compiled: core
   blocks, summary, paged-in memories and the recent whole turns, within the budget (side by
   side: `MemorySession.step`);
2. the pydantic-ai agent answers with that context; it may call the memory tools. A vault
   reveal is a deferred, approval-required call: it runs only if `approve` says yes;
3. the reply is recorded; the memory manager runs for the new turns off the hot path (a
   background task every `manage_every` turns; `await flush()` waits for it). A batch whose
   run fails is kept and offered again (after a doubling backoff, at most `manager_attempts`
   tries; `flush()` retries at once); each failure and each late success is a `manage` row in
   the job history (`memos inspect jobs`), and the kept batches survive a restart.

With no tool call, a turn costs exactly one chat-model request. Runs are bounded by
`UsageLimits`. The conversation state lives in the store, so a new process resumes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from memos.memtypes import Episode
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.usage import UsageLimits

from memos._sync import check_sync_twins, sync_twin
from memos.context.paging import Summarizer
from memos.context.session import CompiledContext, MemorySession
from memos.context.state_keys import manager_key
from memos.context.window import BudgetPolicy
from memos.exceptions import ConfigError
from memos.jobs.partition import user_jobs_lock
from memos.memory import MemoryOS
from memos.store.scope import Scope
from memos.telemetry import instrumentation

from .deps import MemoryDeps
from .manager import ManagerReport, MemoryManager
from .tools import memory_toolset

__all__ = ["Approver", "ChatAgent", "ManagerBatch", "TurnReport", "history_messages", "scrub_revealed"]

log = logging.getLogger("memos.agents")

Approver = Callable[[ToolCallPart], bool | Awaitable[bool]]
"""Decides whether an approval-required tool call (a vault reveal) may run."""

_VAULT_STORED = re.compile(r"stored vault item (\S+) ")
"""What `vault_store` answers once it stored an item (`memos.agents.tools`), and the item's id."""


@dataclass
class TurnReport:
    """What one chat turn did: the context it used and the model requests it made."""

    reply: str
    context: CompiledContext
    requests: int
    tool_calls: list[str] = field(default_factory=list)


@dataclass
class ManagerBatch:
    """Turns the memory manager has not stored yet, and how its tries went."""

    turns: list[Episode]
    attempts: int = 0
    retry_at: datetime | None = None
    """Not offered again before this time (None: at the next chance)."""
    error: str = ""
    """The last failure, as `Type: message`."""


def scrub_revealed(reply: str, messages: list[ModelMessage]) -> str:
    """The reply as the recall log keeps it: an approved vault reveal is shown to the user, never
    stored; a secret a `vault_store` call of this run stored is kept as its item's marker, as the
    vault left it in the turns stored before (the reply is recorded after the tool ran)."""
    calls = {p.tool_call_id: p for m in messages for p in m.parts if isinstance(p, ToolCallPart) and p.tool_name == "vault_store"}
    for message in messages:
        for part in message.parts:
            if not isinstance(part, ToolReturnPart) or not isinstance(part.content, str) or not part.content:
                continue
            if part.tool_name == "vault_reveal":
                reply = reply.replace(part.content, "[revealed vault secret]")
            elif part.tool_name == "vault_store" and (stored := _VAULT_STORED.match(part.content)) and part.tool_call_id in calls:
                secret = calls[part.tool_call_id].args_as_dict().get("secret")
                reply = reply.replace(secret, f"[vault item {stored[1]}]") if isinstance(secret, str) and secret else reply
    return reply


def history_messages(turns: list[Episode]) -> list[ModelMessage]:
    """Recent turns as pydantic-ai message history (user turns as requests, replies as responses)."""
    messages: list[ModelMessage] = []
    for turn in turns:
        if CompiledContext.role_of(turn) == "assistant":
            messages.append(ModelResponse(parts=[TextPart(turn.summary)]))
        else:
            messages.append(ModelRequest(parts=[UserPromptPart(turn.summary)]))
    return messages


@check_sync_twins
class ChatAgent:
    """A chat agent over one scope of a `MemoryOS` (see the module docstring)."""

    def __init__(
        self,
        memory: MemoryOS,
        scope: Scope,
        model: Any,
        *,
        budget: BudgetPolicy | int | None = None,
        manager_model: Any = None,
        manage_every: int = 1,
        background: bool = True,
        summarizer: Summarizer | None = None,
        approve: Approver | None = None,
        usage_limits: UsageLimits | None = None,
        instructions: str | None = None,
        name: str = "assistant",
        instrument: Any = None,
        manager_attempts: int = 4,
        manager_backoff: timedelta = timedelta(seconds=30),
    ) -> None:
        self.memory = memory
        self.scope = scope
        self.model = model
        self.budget = budget
        self.manager_model = manager_model
        self.manage_every = max(1, manage_every)
        self.background = background
        self.summarizer = summarizer
        self.approve = approve
        self.usage_limits = usage_limits or UsageLimits(request_limit=8, tool_calls_limit=12)
        self.instructions = instructions
        self.name = name
        self.instrument = instrument
        """pydantic-ai instrumentation: OpenTelemetry spans for runs and tools (True: without their content,
        `memos.telemetry.instrumentation`; or `InstrumentationSettings`, used as given)."""
        self._session: MemorySession[MemoryOS] | None = None
        self._agent: Agent[None, str | DeferredToolRequests] | None = None
        self._manager: MemoryManager | None = None
        self._pending: list[Episode] = []
        self.manager_attempts = max(1, manager_attempts)
        """How many times one batch is offered to the memory manager before it is given up (logged, in history)."""
        self.manager_backoff = manager_backoff
        """Wait before the first retry of a failed batch; it doubles with each further failure."""
        self.manager_batches: list[ManagerBatch] = []
        """Batches whose manager run failed, waiting for a retry."""
        self._manage_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[ManagerReport | None]] = set()
        self.manager_reports: list[ManagerReport] = []
        self.last: TurnReport | None = None

    async def session(self) -> MemorySession[MemoryOS]:
        """The working context (opened, or resumed from the store, on first use)."""
        if self._session is None:
            model_name = self.model if isinstance(self.model, str) else getattr(self.model, "model_name", None)
            self._session = await MemorySession.open(self.memory, self.scope, model_name=model_name, budget=self.budget,
                                                     summarizer=self.summarizer, instructions=self.instructions)
            deps = MemoryDeps(self._session, actor=self.name)
            self._agent = Agent(self.model, output_type=[str, DeferredToolRequests], toolsets=[memory_toolset(deps)],
                                name=self.name)
            if self.instrument is not None:
                self._agent.instrument = instrumentation(self.instrument)
            if self.manager_model is not None:
                self._manager = MemoryManager(self.memory, self._session.scope, self.manager_model, instrument=self.instrument)
                await self._load_batches()
        return self._session

    async def chat(self, text: str, *, approve: Approver | None = None) -> str:
        """Answer `text` with memory; returns the reply (details in `self.last`)."""
        session = await self.session()
        assert self._agent is not None
        turn, context = await session.step(text)  # recorded and compiled side by side
        history = history_messages(context.recent_turns[:-1])
        result = await self._run(turn.summary, message_history=history, instructions=context.system_prompt,
                                 usage_limits=self.usage_limits)
        requests = result.usage.requests
        for _ in range(3):  # approval round-trips for deferred tool calls
            if not isinstance(result.output, DeferredToolRequests):
                break
            decisions = await self._decide(result.output, approve or self.approve)
            result = await self._run(message_history=result.all_messages(), instructions=context.system_prompt,
                                     deferred_tool_results=decisions, usage_limits=self.usage_limits)
            requests += result.usage.requests
        reply = result.output if isinstance(result.output, str) else "(a tool call is still waiting for approval)"
        answer = await session.record_turn("assistant", scrub_revealed(reply, result.all_messages()), actor=self.name)
        calls = [p.tool_name for m in result.new_messages() if isinstance(m, ModelResponse)
                 for p in m.parts if isinstance(p, ToolCallPart)]
        self.last = TurnReport(reply=reply, context=context, requests=requests, tool_calls=calls)
        self._pending.extend([turn, answer])
        if self._manager is not None and len(self._pending) >= 2 * self.manage_every:
            if self.background:
                self._start_manager()
            else:
                await self.manage()
        return reply

    async def _run(self, *args: Any, **kwargs: Any) -> Any:
        assert self._agent is not None
        try:
            return await self._agent.run(*args, **kwargs)
        except ModelAPIError as exc:
            hint = _responses_endpoint_hint(exc, self.model)
            if hint is None:
                raise
            raise ConfigError(hint) from exc

    async def manage(self, *, retry_now: bool = False) -> ManagerReport | None:
        """Run the memory manager now for the turns it has not seen, and for failed batches whose
        backoff has passed (all of them with `retry_now`); returns the newest run's report."""
        if self._manager is None or self._session is None:
            return None
        # the user's job lock (as reflection's and extraction's): forgetting the user waits for this run and erases what it wrote
        async with self._manage_lock, self.memory.exclusive(user_jobs_lock(self._session.scope.user_id)):
            if self._pending:
                self.manager_batches.append(ManagerBatch(self._pending))
                self._pending = []
            report = None
            now = self.memory.clock()
            for batch in list(self.manager_batches):
                if retry_now or batch.retry_at is None or batch.retry_at <= now:
                    report = await self._run_batch(batch, now) or report
            return report

    async def flush(self) -> list[ManagerReport]:
        """Wait for background manager runs, then manage what is left (failed batches retried now)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))
        report = await self.manage(retry_now=True)
        return [r for r in [report] if r]

    async def _run_batch(self, batch: ManagerBatch, now: datetime) -> ManagerReport | None:
        assert self._manager is not None
        batch.turns = await self._manager.still_stored(batch.turns)
        if not batch.turns:
            self.manager_batches.remove(batch)
            return None
        try:
            report = await self._manager.run(batch.turns)
        except Exception as exc:  # noqa: BLE001 - not swallowed: kept for a retry, logged, in the job history
            batch.attempts += 1
            batch.error = f"{type(exc).__name__}: {exc}"
            gave_up = batch.attempts >= self.manager_attempts
            if gave_up:
                self.manager_batches.remove(batch)
                log.error("memory manager gave up on %d turns after %d tries: %s", len(batch.turns), batch.attempts, batch.error)
            else:
                batch.retry_at = now + self.manager_backoff * 2 ** (batch.attempts - 1)
                log.warning("memory manager run failed (try %d of %d), retrying after %s: %s",
                            batch.attempts, self.manager_attempts, batch.retry_at.isoformat(), batch.error)
            await self._record_batch(batch, "gave up" if gave_up else "failed, will retry")
            return None
        self.manager_batches.remove(batch)
        self.manager_reports.append(report)
        if batch.attempts:
            await self._record_batch(batch, "ok", written=len(report.written))
        return report

    async def _record_batch(self, batch: ManagerBatch, note: str, **counts: int) -> None:
        assert self._session is not None
        outcome = {"job": "manage", "scope": str(self._session.scope), "turns": len(batch.turns),
                   "attempts": batch.attempts + (note == "ok"), "turn_ids": [t.id for t in batch.turns],
                   "retry_at": batch.retry_at.isoformat() if batch.retry_at and note != "ok" else None,
                   "errors": [] if note == "ok" else [batch.error], **counts}
        await self.memory.record_job(self._session.scope, "manage", outcome, actor="memory_manager", note=note)
        await self.memory.set_state(self._batches_key, json.dumps([
            {"turns": [t.id for t in b.turns], "attempts": b.attempts, "error": b.error,
             "retry_at": b.retry_at.isoformat() if b.retry_at else None} for b in self.manager_batches]))

    @property
    def _batches_key(self) -> str:
        assert self._session is not None
        scope = self._session.scope
        return manager_key(scope)

    async def _load_batches(self) -> None:
        """Failed batches a previous process kept (their turns re-read from the recall log)."""
        assert self._session is not None
        raw = (await self.memory.state()).get(self._batches_key)
        for item in json.loads(raw) if raw else []:
            stored = await self.memory.get_many(self._session.scope, self.memory.turn_type, item["turns"])
            turns = [t for t in stored if isinstance(t, Episode)]  # the turns' store holds episodes
            if turns:
                self.manager_batches.append(ManagerBatch(
                    turns, item.get("attempts", 0), datetime.fromisoformat(item["retry_at"]) if item.get("retry_at") else None,
                    item.get("error", "")))

    def _start_manager(self) -> None:
        task = asyncio.create_task(self.manage())
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("memory manager run failed: %s", task.exception())

    async def _decide(self, requests: DeferredToolRequests, approve: Approver | None) -> DeferredToolResults:
        results = DeferredToolResults()
        for call in requests.approvals:
            verdict = approve(call) if approve else False
            if asyncio.iscoroutine(verdict) or isinstance(verdict, Awaitable):
                verdict = await verdict
            results.approvals[call.tool_call_id] = True if verdict else ToolDenied("the user did not approve revealing this secret")
        for call in requests.calls:
            results.calls[call.tool_call_id] = ToolDenied("external tool calls are not supported here")
        return results


    session_sync = sync_twin(session)
    chat_sync = sync_twin(chat)
    manage_sync = sync_twin(manage)
    flush_sync = sync_twin(flush)

def _responses_endpoint_hint(exc: ModelAPIError, model: Any) -> str | None:
    """The fix for a 404 from a server without OpenAI's Responses API, or None for any other error.

    `openai:NAME` talks to `/v1/responses`; local OpenAI-compatible servers (Ollama, vLLM,
    llama.cpp) serve only `/v1/chat/completions` and answer 404, which pydantic-ai reports as
    an unknown model. On OpenAI's own API a 404 really is an unknown model: no hint then."""
    import os

    if getattr(exc, "status_code", None) != 404:
        return None
    if isinstance(model, str):
        provider, _, name = model.partition(":")
        if provider not in ("openai", "openai-responses") or not name:
            return None
        base = os.environ.get("OPENAI_BASE_URL", "")
    elif type(model).__name__ == "OpenAIResponsesModel":
        name = model.model_name
        base = str(getattr(getattr(model, "client", None), "base_url", "") or "")
    else:
        return None
    if not base or "api.openai.com" in base:
        return None
    return (f"the server at {base} answered 404 to {model if isinstance(model, str) else name!r}: that model string uses "
            f"OpenAI's Responses API (/responses), which local servers (Ollama, vLLM, llama.cpp) do not serve; use "
            f"'openai-chat:{name}' (chat completions at OPENAI_BASE_URL) or 'ollama:{name}' (OLLAMA_BASE_URL), "
            f"or `--base-url` on the memos command")
