"""The working context of one conversation: the memory OS as one agent's step sees it.

A `MemorySession` belongs to a scope (user, agent, session). Each step:

1. `record_turn` appends the message to episodic memory (the recall log) and to the working
   context;
2. `compile` runs active retrieval for the incoming message over every store, pages out the
   oldest whole turns when the context is under pressure (the running summary absorbs them),
   and renders the prompt within the token budget (`memos.context.window`).

Its state (running summary, which turns are in context) is kept in the store, so a process
that reopens the memory resumes the conversation where it was.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from pydantic import ValidationError

from memos import prompts
from memos._sync import check_sync_twins, sync_classmethod_twin, sync_twin
from memos.exceptions import BudgetError, ConfigError, InvalidRecordError
from memos.ingest import Message
from memos.jobs.reflection_state import reflection_state
from memos.memtypes import CoreBlock, Episode, MemoryRecord
from memos.retrieval.packing import measure, render_hits
from memos.retrieval.ranking import Hit
from memos.store.read_cache import FORGET, KEEP, ReadCache
from memos.store.scope import Scope
from memos.telemetry import span
from memos.tokens import Tokenizer
from memos.validation import describe_errors

from .core_memory import DEFAULT_BLOCKS, BlockSpec, CoreHost, CoreMemory
from .paging import ExtractiveSummarizer, Summarizer, SummaryCut
from .state_keys import session_key
from .window import BudgetPolicy, FixedPrompt, StepInputs, no_room, plan_step, render_system_prompt

if TYPE_CHECKING:
    from memos.store.protocol import Store

__all__ = ["CompiledContext", "MemorySession", "Role", "SessionMemory", "section_frames"]

Role = Literal["user", "assistant"]
_ROLE_TAG = "role:"
PLANNED_TURNS = 32
"""Ids drawn for a session's next turns and named in its saved state, so that recording them
writes no state: the state is written when the working context changes otherwise (an eviction),
or every this many turns. Loading it skips the ids no turn was stored under. On the 100k bench
store the two state writes a chat turn made were ~15 ms of its ~80 ms of CPU; with 8 ids a write
every fourth exchange still added ~7 ms to that reply, with 32 most writes are an eviction's
(README, issue 18)."""
_FRAME_MARGIN = 2
"""Tokens added to each optional section's measured wrapper: BPE may count joined text a little
differently from its parts (the rendered prompt is always counted again)."""


@dataclass
class CompiledContext:
    """One step's prompt: the system text and the whole turns that follow it."""

    system_prompt: str
    recent_turns: list[Episode]
    """Turns still in the working context, oldest first."""
    sections: dict[str, int]
    """Tokens per section (instructions, core, metadata, summary, notice, memories, turns)."""
    total_tokens: int
    budget: int
    paged_in: list[Hit] = field(default_factory=list)
    evicted: list[Episode] = field(default_factory=list)
    """Turns that left the working context at this step."""
    pressure_notice: str | None = None

    @staticmethod
    def role_of(turn: Episode) -> Role:
        """Whether a turn was said by the user or the assistant."""
        return "assistant" if f"{_ROLE_TAG}assistant" in turn.tags else "user"


R = TypeVar("R", bound=MemoryRecord)


class SessionMemory(CoreHost, Protocol):
    """What a session needs of the memory it works on (`memos.memory.MemoryOS` is one; the facade
    opens sessions, so it is described here, not imported)."""

    tokenizer: Tokenizer
    clock: Callable[[], datetime]

    @property
    def storage(self) -> Store: ...

    @property
    def turn_type(self) -> str: ...

    @property
    def reads(self) -> ReadCache: ...

    async def check_versions(self) -> None: ...

    async def counts(self, scope: Scope, *, status: str | None = ..., cached: bool = ...) -> dict[str, int]: ...

    async def search(self, query: str, scope: Scope, types: Sequence[str] | None = ..., k: int = ..., *,
                     since: datetime | None = ..., until: datetime | None = ..., replies: bool = ...,
                     empty: Sequence[str] = ..., exclude: Collection[str] = ...) -> list[Hit]: ...

    def draw_ids(self, n: int) -> list[str]: ...

    def turn_episodes(self, scope: Scope, messages: Iterable[Message | dict[str, Any]], *,
                      previous: Episode | None = ..., ids: Sequence[str | None] = ...) -> list[Episode]: ...

    async def store_turns(self, scope: Scope, episodes: Sequence[Episode], *, actor: str = ...,
                          behind: bool = ...) -> list[Episode]: ...

    async def get_many(self, scope: Scope, memory_type: type[R], ids: Sequence[str], *,
                       status: str | Sequence[str] | None = ...) -> list[R]: ...

    async def state(self, *, cached: bool = ...) -> dict[str, str]: ...

    async def set_state(self, key: str, value: str, *, behind: bool = ...) -> None: ...

    # last: below it, this body's annotations would read `list` as the method
    async def list(self, scope: Scope, memory_type: type[R], *, since: datetime | None = ...,
                   until: datetime | None = ..., limit: int | None = ...) -> list[R]: ...


M = TypeVar("M", bound=SessionMemory)


@check_sync_twins
class MemorySession(Generic[M]):
    """The working context of one scope (see the module docstring); `memory` is the memory it
    was opened on (a `MemoryOS`)."""

    def __init__(self, memory: M, scope: Scope, *, budget: BudgetPolicy, summarizer: Summarizer,
                 instructions: str, core: CoreMemory, retrieval_k: int) -> None:
        self.memory = memory
        self.scope = scope
        self.budget = budget
        self.summarizer = summarizer
        self.instructions = instructions
        self.core = core
        self.retrieval_k = retrieval_k
        self.summary = ""
        self.context: list[Episode] = []
        self.evicted_total = 0
        self._context_read = False
        """The step's reads were just checked by `record_turn` (the compile that follows need not check again)."""
        self._fixed = FixedPrompt(memory.tokenizer.count)  # the prompt's fixed part (`_counted`, `_check_fits`)
        self._named: list[str] = []
        """The turn ids the state this session last saved names: the turns in context, then the
        ids drawn for its next turns (`_save_state`)."""
        self._saved_head: tuple[str, int] | None = None
        """The running summary and eviction count that state holds."""
        self._summary_cut = SummaryCut(memory.tokenizer.count)
        self._rereading = False
        """A re-read of the turns in context waits for the turns' table's next optimize (`_reread_context`)."""
        self._preview = False
        """A throwaway copy `preview` compiles on: it re-reads no turns and saves no state."""

    @classmethod
    async def open(
        cls,
        memory: M,
        scope: Scope,
        *,
        model_name: str | None = None,
        budget: BudgetPolicy | int | None = None,
        summarizer: Summarizer | None = None,
        instructions: str | None = None,
        core_blocks: Sequence[BlockSpec] = DEFAULT_BLOCKS,
        retrieval_k: int = 30,
    ) -> MemorySession[M]:
        """Open (or resume) the working context of `scope`; a scope without a session id uses "default"."""
        if scope.session_id is None:
            scope = Scope(scope.user_id, scope.agent_id or "", "default")
        policy = budget if isinstance(budget, BudgetPolicy) else (
            BudgetPolicy(total=budget) if isinstance(budget, int) else BudgetPolicy.for_model(model_name))
        count = memory.tokenizer.count
        session = cls(
            memory, scope, budget=policy,
            summarizer=summarizer or ExtractiveSummarizer(count, max_tokens=max(64, int(policy.total * policy.summary_share))),
            instructions=instructions if instructions is not None else prompts.render("instructions.j2"),
            core=CoreMemory(memory, scope, defaults=core_blocks), retrieval_k=retrieval_k,
        )
        await session._load_state()
        await session.core.blocks()  # default blocks exist before any tool can touch them
        return session

    @property
    def retrieval_scope(self) -> Scope:
        """What active retrieval and conversation search see: this agent's memory across sessions."""
        return Scope(self.scope.user_id, self.scope.agent_id)

    # --- the step ------------------------------------------------------------------------

    async def record_turn(self, role: Role, text: str, *, actor: str | None = None, message_id: str | None = None,
                          occurred_at: datetime | None = None, importance: float = 0.5, fit: bool = False) -> Episode:
        """Store a turn in episodic memory (the recall log) and add it to the working context. `fit`: it
        is the message the next compile answers; if that could not fit it, `BudgetError`, nothing stored."""
        episode = await self._begin_turn(role, text, actor=actor, message_id=message_id, occurred_at=occurred_at,
                                         importance=importance)
        if fit:
            await self._check_fits(episode)
        await self._store_turn(episode, role)
        return episode

    async def step(self, text: str, *, actor: str | None = None, message_id: str | None = None,
                   occurred_at: datetime | None = None, importance: float = 0.5) -> tuple[Episode, CompiledContext]:
        """Record the user's message and compile the context for it, side by side (`ChatAgent.chat`).

        The same turn and context as `record_turn("user", text)` then `compile(text)`, in less
        time: the compile does not wait for the turn's commits. It needs nothing they write: the
        turn is in the working context already, the store counts are taken as they are once it
        is stored, and retrieval leaves the turns in context out of its candidates before it
        ranks them, whether or not its queries see the new row. Returns once both are done, so
        the turn is stored (durable) when the step returns; if storing it fails the step raises
        that error and the turn leaves the working context, as `record_turn` does."""
        with self.memory.storage.behind.step():  # rows written behind wait for the step to end
            return await self._step(text, actor=actor, message_id=message_id, occurred_at=occurred_at, importance=importance)

    async def _step(self, text: str, *, actor: str | None, message_id: str | None, occurred_at: datetime | None,
                    importance: float) -> tuple[Episode, CompiledContext]:
        episode = await self._begin_turn("user", text, actor=actor, message_id=message_id, occurred_at=occurred_at,
                                         importance=importance)
        await self._check_fits(episode)
        # the counts the compile plans with, as they are once the turn is stored (read now, before
        # its commit can move them: the same figures whichever finishes first)
        counts = await self.memory.counts(self.retrieval_scope, cached=True)
        counts = {**counts, self.memory.turn_type: counts.get(self.memory.turn_type, 0) + 1}
        stored = asyncio.ensure_future(self._store_turn(episode, "user"))
        try:
            context = await self._compile_traced(text, counts, stored)
        finally:
            outcome, = await asyncio.gather(stored, return_exceptions=True)
        if isinstance(outcome, BaseException):
            raise outcome
        return episode, context

    async def _begin_turn(self, role: Role, text: str, *, actor: str | None, message_id: str | None,
                          occurred_at: datetime | None, importance: float) -> Episode:
        """The turn's episode, added to the working context (not stored yet: `_store_turn`)."""
        if role not in ("user", "assistant"):
            raise ConfigError(f"role must be 'user' or 'assistant', got {role!r}")
        message = _message(role, id=message_id, actor=actor or role, text=text, timestamp=occurred_at or self.memory.clock(),
                           importance=importance, tags=[f"{_ROLE_TAG}{role}", "turn"])
        # the turns in context as stored now: a tool may have moved a secret out of the turn
        # before since, a job may have changed one; the compile that follows uses this check
        await self._read_step()
        previous = self.context[-1] if self.context else None
        [episode] = self.memory.turn_episodes(self.scope, [message], previous=previous, ids=[self._next_id()])
        self.context.append(episode)
        self._context_read = True
        return episode

    async def _store_turn(self, episode: Episode, role: Role) -> None:
        """Commit a turn `_begin_turn` added; if that fails, it leaves the working context."""
        # the state naming the turn is written beside the turn's own commits, not after them (one
        # commit's wait less a turn); a state saved for a turn whose commit then failed names an
        # id that is not stored, which loading the state skips
        stored, saved = await asyncio.gather(self.memory.store_turns(self.scope, [episode], actor=role, behind=True),
                                             self._save_state(if_changed=True), return_exceptions=True)
        for outcome in (stored, saved):
            if isinstance(outcome, BaseException):
                self._context_read = False
                self._named = []  # the ids drawn are not used again: this one may have landed in part
                if isinstance(stored, BaseException) and episode in self.context:
                    self.context.remove(episode)
                raise outcome
        if not self._rereading:
            self._rereading = True
            self.memory.storage.after_optimize(self.memory.turn_type, self._reread_context)

    async def compile(self, incoming: str | None = None) -> CompiledContext:
        """Build this step's prompt within the budget (active retrieval + paging + rendering)."""
        return await self._compile_traced(incoming)

    async def _compile_traced(self, incoming: str | None, counts: dict[str, int] | None = None,
                              stored: asyncio.Future[None] | None = None) -> CompiledContext:
        with span("memos.compile", user_id=self.scope.user_id, budget=self.budget.total) as current, \
                self.memory.storage.behind.step():  # rows written behind wait for it to end
            ctx = await self._compile(incoming, counts, stored)
            current.set_attribute("tokens", ctx.total_tokens)
            current.set_attribute("evicted", len(ctx.evicted))
            current.set_attribute("paged_in", len(ctx.paged_in))
        return ctx

    async def _compile(self, incoming: str | None, counts: dict[str, int] | None,
                       stored: asyncio.Future[None] | None) -> CompiledContext:
        """`compile`; in a `step`, with the counts it took and the turn's commits in flight (`stored`)."""
        if not self.context:
            raise ConfigError("record the incoming message with record_turn() before compiling a context")
        if not self._context_read:
            await self._read_step()
        self._context_read = False
        query = incoming if incoming is not None else self.context[-1].summary
        # read once: what has not changed since it was last read is not read again (the tables'
        # versions were just checked), the rest is issued together; the stores the counts find
        # empty in this scope are not searched (usually remembered: no read before the search)
        if counts is None:
            counts = await self.memory.counts(self.retrieval_scope, cached=True)
        in_context = {t.id for t in self.context}
        blocks, last_reflection, found = await asyncio.gather(
            self.core.blocks(cached=True), self._last_reflection(),
            self._retrieve(query, empty=[name for name, n in counts.items() if n == 0], exclude=in_context))
        hits = [h for h in found if h.id not in in_context]
        # plan once, from counted inputs
        inputs, notice_of = self._counted(blocks, counts, last_reflection, hits)
        plan = plan_step(inputs, self.budget)
        # carry it out: the summary absorbs the evicted turns (state saved once), memories page in
        evicted: list[Episode] = []
        if plan.evict:
            evicted, self.context = self.context[: plan.evict], self.context[plan.evict :]
            self.evicted_total += len(evicted)
            self.summary = await self.summarizer(self.summary, evicted)
            if stored is not None:  # the turn's own state write first: the one saved last is the newest
                await stored
            await self._save_state()
        count = self.memory.tokenizer.count
        paged = [hits[i] for i in plan.memories]
        notice = notice_of(plan.notice_percent)
        summary = self._summary_cut.newest(self.summary, plan.summary_tokens)
        turn_tokens = sum(self._turn_tokens(t) for t in self.context)
        # render once (the planned sizes are upper bounds; the safety net below drops the
        # lowest-ranked memories should BPE count the joined text higher than its parts)
        while True:
            system = render_system_prompt(
                instructions=self.instructions, blocks=blocks, counts=counts if plan.metadata else None,
                last_reflection=last_reflection, summary=summary, memories=paged, notice=notice, now=self.memory.clock())
            total = count(system) + turn_tokens
            if total <= self.budget.total:
                break
            if paged:
                paged.pop()
            elif summary:
                summary = ""
            else:
                raise BudgetError(f"could not fit the context into {self.budget.total} tokens; raise the budget")
        sections = dict(plan.sections)
        sections["turns"] = turn_tokens
        sections["summary"] = count(summary) if summary else 0
        sections["notice"] = count(notice) if notice else 0
        sections["memories"] = count(render_hits(paged)) if paged else 0
        sections["instructions"] = count(self.instructions)
        sections["overhead"] = total - sum(sections.values())
        return CompiledContext(system_prompt=system, recent_turns=list(self.context), sections=sections,
                               total_tokens=total, budget=self.budget.total, paged_in=paged,
                               evicted=evicted, pressure_notice=notice)

    def _counted(self, blocks: Sequence[CoreBlock], counts: dict[str, int], last_reflection: datetime | None,
                 hits: Sequence[Hit]) -> tuple[StepInputs, Callable[[int | None], str | None]]:
        """The step's inputs counted in tokens, and the pressure notice for a planned figure.

        The template's own text is counted by rendering it with the step's fixed parts and the
        optional sections empty; each optional section's wrapper is counted once per session."""
        count = self.memory.tokenizer.count
        now = self.memory.clock()
        whole = self._fixed.tokens(self.instructions, blocks, counts, last_reflection, now)
        bare = self._fixed.tokens(self.instructions, blocks, None, last_reflection, now)
        core = sum(count(b.value) + count(b.label) + 12 for b in blocks)
        frames = section_frames(self.memory.tokenizer)
        widest = prompts.render("pressure.j2", percent=99)
        inputs = StepInputs(
            instructions=max(0, bare - core), core=min(core, bare), metadata=max(0, whole - bare),
            summary=count(self.summary), summary_frame=frames["summary"],
            turns=[self._turn_tokens(t) for t in self.context],
            memories=measure(hits, count), memory_frame=frames["memories"],
            notice=count(widest) + frames["notice"],
        )
        return inputs, lambda percent: None if percent is None else prompts.render("pressure.j2", percent=percent)

    async def conversation_search(self, query: str | None = None, *, since: datetime | None = None,
                                  until: datetime | None = None, limit: int = 10) -> list[Episode]:
        """Turns and events from the recall log: by text (ranked) or, without a query, by date (oldest first)."""
        if query:
            hits = await self.memory.search(query, self.retrieval_scope, types=[self.memory.turn_type], k=limit, since=since, until=until)
            return [h.record for h in hits if isinstance(h.record, Episode)]  # the turns' store holds episodes
        episodes = await self.memory.list(self.retrieval_scope, Episode, since=since, until=until, limit=None)
        return episodes[-limit:]

    # --- internals -----------------------------------------------------------------------

    async def _check_fits(self, episode: Episode) -> None:
        """Refuse, before storing it, a turn the compile could not fit with just the instructions and core blocks."""
        try:  # refused or not checked: it leaves the working context, as a turn whose store failed does
            blocks, last_reflection = await asyncio.gather(self.core.blocks(cached=True), self._last_reflection())
            fixed = self._fixed.tokens(self.instructions, blocks, None, last_reflection, self.memory.clock())
            if fixed + self._turn_tokens(episode) > self.budget.total:
                raise BudgetError(no_room(fixed, self._turn_tokens(episode), self.budget.total))
        except BaseException:
            self.context.remove(episode)
            raise

    def _turn_tokens(self, turn: Episode) -> int:
        return self.memory.tokenizer.count(turn.summary) + self.budget.message_overhead

    async def _retrieve(self, query: str, empty: Sequence[str] = (), exclude: set[str] | frozenset[str] = frozenset()) -> list[Hit]:
        if not query.strip():
            return []
        # packed into the prompt beside the turns in context (the newest of which asks): no
        # replies, and none of those turns, whether or not the newest is stored yet (`step`)
        return await self.memory.search(query, self.retrieval_scope, k=self.retrieval_k, replies=False, empty=empty,
                                        exclude=exclude)

    async def _read_step(self) -> None:
        """The step's first read: every table's version (one call), then the in-context turns
        again only if a writer other than this session changed the recall log since."""
        await self.memory.check_versions()
        if self.memory.reads.get(self._context_key) is FORGET:
            await self._refresh_context()
        await self._adopt_summary()

    async def _adopt_summary(self) -> None:
        """Take up the running summary as stored if another writer rewrote it (`_rewritten`; cached read)."""
        raw = (await self.memory.state(cached=True)).get(self._state_key)
        if not self._preview and (summary := _rewritten(raw, self._saved_head, self.evicted_total)) is not None:
            self.summary, self._saved_head = summary, (summary, self.evicted_total)

    async def _last_reflection(self) -> datetime | None:
        meta = await self.memory.state(cached=True)
        for scope in (self.scope, self.retrieval_scope, Scope(self.scope.user_id)):
            state = await reflection_state(self.memory, scope, meta)
            if state.get("last_at"):
                return state["last_at"]
        return None

    async def preview(self, message: str) -> CompiledContext:
        """The context `compile` would build if `message` arrived now, storing nothing.

        The message becomes an unsaved turn of a throwaway copy of this session: no turn is
        recorded and an eviction it causes is not saved (`memos inspect context --message`)."""

        await self._refresh_context()
        probe = copy.copy(self)
        probe.context = [*self.context, Episode(
            **self.scope.stamp(), actor=self.scope.user_id, event_type="message", summary=message,
            tags=[f"{_ROLE_TAG}user", "turn"])]
        probe._preview = True
        return await probe.compile(message)

    @property
    def _state_key(self) -> str:
        return session_key(self.scope)

    def _next_id(self) -> str | None:
        """The id the state already names for the next turn, if it has one left (None: a fresh one)."""
        unused = self._unused_ids()
        return unused[0] if unused else None

    def _unused_ids(self) -> list[str] | None:
        """The ids the state saved last names for the next turns and the context has not used yet;
        None when that state does not name the turns in context."""
        ids = [t.id for t in self.context]
        return self._named[len(ids) :] if self._named[: len(ids)] == ids else None

    async def _save_state(self, *, if_changed: bool = False) -> None:
        """Write the state: the running summary, the turns in context and ids for the next turns
        (`PLANNED_TURNS`). `if_changed`: not when the state saved last already says it all (the
        context grew by turns recorded under ids it names)."""
        if self._preview:
            return
        ids = [t.id for t in self.context]
        head = (self.summary, self.evicted_total)
        unused = self._unused_ids()
        if if_changed and unused is not None and head == self._saved_head:
            return
        planned = unused or []
        if len(planned) < PLANNED_TURNS // 2:
            planned += self.memory.draw_ids(PLANNED_TURNS - len(planned))
        state = {"summary": self.summary, "context": ids, "next": planned, "evicted": self.evicted_total}
        await self.memory.set_state(self._state_key, json.dumps(state), behind=True)
        self._named, self._saved_head = ids + planned, head

    async def _refresh_context(self) -> None:
        """Re-read the in-context turns (a scrubbed secret or a consolidation may have changed them)."""
        if self._preview:
            return
        at = await self.memory.storage.label(self.memory.turn_type)
        self.context = await self._load_turns([t.id for t in self.context])
        self._context_was_read(at)

    def _context_was_read(self, at: int | None) -> None:
        # remembered as read at the version just checked; adds (e.g. this session's own turns) keep it
        self.memory.reads.put(self._context_key, self.memory.turn_type, None, KEEP, at=at)

    async def _reread_context(self) -> None:
        """The turns in context read again once this process has optimized the turns' table
        (`Storage.after_optimize`): an optimize makes every read of a table look stale, so the
        next step would re-read them first (10-20 ms of that step on the 100k bench store, every
        ~12 exchanges; README, issue 18); this reads them while the conversation pauses. Kept only
        if the context is as it was when the read began and every turn was found; otherwise the
        next step reads them as before."""
        self._rereading = False
        await self.memory.check_versions()
        if self.memory.reads.get(self._context_key) is not FORGET:
            return
        ids = [t.id for t in self.context]
        at = await self.memory.storage.label(self.memory.turn_type)
        turns = await self._load_turns(ids)
        if [t.id for t in turns] == ids == [t.id for t in self.context]:
            self.context = turns
            self._context_was_read(at)

    @property
    def _context_key(self) -> tuple[str, str]:
        return ("session-context", self._state_key)

    async def _load_turns(self, ids: list[str]) -> list[Episode]:
        return await self.memory.get_many(self.scope, Episode, ids)

    async def _load_state(self) -> None:
        raw = (await self.memory.state()).get(self._state_key)
        if not raw:
            return
        state = json.loads(raw)
        self.summary = state.get("summary", "")
        self.evicted_total = int(state.get("evicted", 0))
        self._saved_head = (self.summary, self.evicted_total)
        # the ids drawn for the next turns name those stored since (in order); the rest are skipped.
        # Not drawn from again: another process may be resuming the same session from this state
        named = [*state.get("context", []), *state.get("next", [])]
        self.context = await self._load_turns([i for i in named if isinstance(i, str)])


    open_sync = sync_classmethod_twin(open)
    record_turn_sync = sync_twin(record_turn)
    step_sync = sync_twin(step)
    compile_sync = sync_twin(compile)
    conversation_search_sync = sync_twin(conversation_search)
    preview_sync = sync_twin(preview)

def _rewritten(raw: str | None, saved: tuple[str, int] | None, evicted: int) -> str | None:
    """The running summary in the stored session state `raw` if another writer rewrote it (the
    vault takes a secret out of it): it names as many evicted turns as the session has evicted,
    but is another summary than the one the session saved (`saved`)."""
    if not raw or saved is None:
        return None
    state = json.loads(raw)
    summary = state.get("summary")
    return summary if isinstance(summary, str) and summary != saved[0] and state.get("evicted") == evicted else None


def _message(role: Role, **fields: Any) -> Message:
    """A turn's message; one pydantic refuses (a text over `MAX_MESSAGE_CHARS`) is an `InvalidRecordError`."""
    try:
        return Message(**fields)
    except ValidationError as exc:
        raise InvalidRecordError(f"the {role} message is invalid: {describe_errors(exc)}") from None


_FRAMES: dict[int, tuple[Any, dict[str, int]]] = {}


def section_frames(tokenizer: Any) -> dict[str, int]:
    """Tokens each optional section's wrapper adds to the prompt (with a small margin for the way
    BPE joins text), measured once per tokenizer by rendering the template with and without it."""
    cached = _FRAMES.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    count = tokenizer.count
    at = datetime(2000, 1, 1)
    empty = functools.partial(render_system_prompt, instructions="", blocks=(), counts=None, last_reflection=None, summary="",
                              memories=(), notice=None, now=at)
    base = count(empty())
    probe = Episode(summary="x", occurred_at=at)
    with_hit = [Hit("episodic", probe, 0.0)]
    with_hit[0].text = probe.render_line() if probe.render_group() else probe.render()
    frames = {
        "summary": count(empty(summary="x")) - base - count("x") + _FRAME_MARGIN,
        "memories": count(empty(memories=with_hit)) - base - count(render_hits(with_hit)) + _FRAME_MARGIN,
        "notice": count(empty(notice="x")) - base - count("x") + _FRAME_MARGIN,
    }
    _FRAMES[id(tokenizer)] = (tokenizer, frames)
    return frames
