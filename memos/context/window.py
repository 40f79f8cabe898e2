"""The context window: how one step's prompt is budgeted, planned and rendered.

The prompt of a step has six sections. `plan_context` (pure, no I/O) decides how many tokens
each gets, given their sizes and a `BudgetPolicy`; `plan_step` (pure too) decides a step's
whole context from counted inputs -- which turns leave and go into the summary, how much of the
summary stays, which memories page in, whether the metadata and the pressure notice show. The
session reads once, carries the plan out and `render_system_prompt` turns it into text with
`prompts/context.j2`, once.

Drop priority, when the budget cannot hold everything (first dropped first):

1. paged-in memories, lowest-ranked first;
2. the running summary, cut to its share (its oldest part first), then entirely;
3. the oldest recent turns (they stay in episodic memory and go into the summary);
4. the memory-metadata section.

Never dropped: the instructions, the core blocks and the newest turn. When those alone do
not fit, planning raises `BudgetError` (raise the budget or shorten the core blocks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memos import prompts
from memos.exceptions import BudgetError, ConfigError
from memos.memtypes import CoreBlock
from memos.retrieval.packing import MemorySize, choose, render_hits
from memos.retrieval.ranking import Hit

__all__ = [
    "BudgetPolicy",
    "ContextPlan",
    "DROP_ORDER",
    "FixedPrompt",
    "SectionSizes",
    "StepInputs",
    "StepPlan",
    "no_room",
    "plan_context",
    "plan_step",
    "render_system_prompt",
]

DROP_ORDER = ("memories", "summary", "turns", "metadata")
"""Sections in the order they give way when the budget is short."""

_CONTEXT_SIZES = {"gpt-4o": 128_000, "gpt-4.1": 1_000_000, "gpt-5": 400_000, "claude": 200_000, "gemini": 1_000_000,
                  "llama": 128_000, "qwen": 32_000, "mistral": 32_000}


@dataclass(frozen=True)
class BudgetPolicy:
    """How a step's token budget is split.

    Shares are fractions of what is left after the instructions, core blocks and metadata.
    Turns past `evict_at` of their share are paged out (oldest first) until they use at most
    `evict_to` of it; from `warn_at` on, the prompt carries a memory-pressure notice.
    """

    total: int = 4000
    """Hard ceiling for the whole prompt: system text plus the recent turns."""
    turns_share: float = 0.5
    summary_share: float = 0.15
    warn_at: float = 0.7
    evict_at: float = 0.9
    evict_to: float = 0.5
    message_overhead: int = 4
    """Tokens a chat message costs beyond its text (role and separators)."""

    def __post_init__(self) -> None:
        if self.total < 256:
            raise ConfigError(f"a context budget of {self.total} tokens is too small; use at least 256")
        if not 0 < self.turns_share < 1 or not 0 <= self.summary_share < 1 or self.turns_share + self.summary_share >= 1:
            raise ConfigError("turns_share and summary_share must be fractions that sum to less than 1")
        if not 0 < self.evict_to < self.warn_at <= self.evict_at <= 1:
            raise ConfigError("need 0 < evict_to < warn_at <= evict_at <= 1")

    @classmethod
    def for_model(cls, model_name: str | None, *, context_size: int | None = None, cap: int = 8000, **shares: Any) -> BudgetPolicy:
        """A policy whose total is the model's context size (if known), capped at `cap` tokens."""
        size = context_size
        if size is None and model_name:
            name = model_name.lower()
            size = next((v for k, v in _CONTEXT_SIZES.items() if k in name), None)
        return cls(total=min(size or cap, cap), **shares)


@dataclass(frozen=True)
class SectionSizes:
    """Token sizes of a step's candidate sections (turns oldest first, memories best first)."""

    instructions: int
    core: int
    metadata: int
    summary: int
    turns: Sequence[int]
    memories: Sequence[int] = ()
    notice: int = 0
    """Tokens of the memory-pressure notice, if it is shown."""


@dataclass
class ContextPlan:
    """What goes into one step's prompt."""

    evict: int
    """How many of the oldest turns leave the working context."""
    memories: list[int]
    """Indexes of the memories kept (rank order)."""
    summary_tokens: int
    """Tokens of the summary that fit (0: dropped); its newest part is kept."""
    metadata: bool
    pressure: bool
    """Whether to show the memory-pressure notice."""
    memory_budget: int
    """Tokens that were available to memories."""
    sections: dict[str, int] = field(default_factory=dict)
    """Planned tokens per section."""

    @property
    def total(self) -> int:
        return sum(self.sections.values())


def no_room(fixed: int, turn: int, total: int) -> str:
    """Why a context cannot be built: the instructions and core blocks (`fixed` tokens) and the newest message don't fit."""
    return (f"instructions and core blocks ({fixed}) and the newest message ({turn}) need {fixed + turn} tokens; the budget is "
            f"{total}. Raise the budget, shorten the core blocks or split the message.")


def plan_context(sizes: SectionSizes, policy: BudgetPolicy) -> ContextPlan:
    """Decide what fits in `policy.total`, dropping in `DROP_ORDER`. Pure; never over budget."""
    if not sizes.turns:
        raise ConfigError("a context needs at least one turn (the incoming message)")
    required = sizes.instructions + sizes.core + sizes.turns[-1]
    if required > policy.total:
        raise BudgetError(no_room(sizes.instructions + sizes.core, sizes.turns[-1], policy.total))
    metadata = sizes.metadata if required + sizes.metadata <= policy.total else 0
    rest = policy.total - sizes.instructions - sizes.core - metadata
    turns_cap = max(int(rest * policy.turns_share), sizes.turns[-1])

    evict = _evictions(sizes.turns, turns_cap, policy)
    turns = sum(sizes.turns[evict:])
    pressure = turns > policy.warn_at * turns_cap
    notice = sizes.notice if pressure and turns + sizes.notice <= rest else 0
    pressure = pressure and (notice > 0 or sizes.notice == 0)  # shown only if the notice fits

    left = rest - turns - notice
    summary = min(sizes.summary, int(rest * policy.summary_share), left)
    left -= summary
    kept: list[int] = []
    used = 0
    for index, size in enumerate(sizes.memories):
        if used + size <= left:
            kept.append(index)
            used += size
    sections = {"instructions": sizes.instructions, "core": sizes.core, "metadata": metadata, "summary": summary,
                "notice": notice, "memories": used, "turns": turns}
    return ContextPlan(evict=evict, memories=kept, summary_tokens=summary, metadata=bool(metadata), pressure=pressure,
                       memory_budget=left, sections=sections)


def _evictions(turns: Sequence[int], cap: int, policy: BudgetPolicy) -> int:
    """How many of the oldest turns to page out: none below `evict_at`, else down to `evict_to`."""
    total = sum(turns)
    if total <= policy.evict_at * cap:
        return 0
    target = policy.evict_to * cap
    evict = 0
    while evict < len(turns) - 1 and total > target:
        total -= turns[evict]
        evict += 1
    return evict


@dataclass(frozen=True)
class StepInputs:
    """Everything one step's context depends on, counted in tokens (`plan_step`'s input).

    Each optional section's size includes its wrapper text in the template (`frame` for the
    memories section); `instructions` includes the template's fixed text."""

    instructions: int
    core: int
    metadata: int
    summary: int
    """The running summary as it stands (0: none)."""
    summary_frame: int
    """Tokens the summary section adds beyond the summary text."""
    turns: Sequence[int]
    """The turns in context, oldest first; the last is the incoming one."""
    memories: Sequence[MemorySize] = ()
    """Candidate memories, best first (`memos.retrieval.packing.measure`)."""
    memory_frame: int = 0
    notice: int = 0
    """Tokens of the memory-pressure section at its widest."""
    separator: int = 0


@dataclass
class StepPlan:
    """One step's whole context, decided before any of it is carried out."""

    evict: int
    """How many of the oldest turns leave the context; the summary absorbs exactly these."""
    summary_tokens: int
    """Tokens of summary text kept (its newest part): of the summary after it absorbed the evicted turns."""
    memories: list[int]
    """Indexes of the candidate memories paged in, best first."""
    memory_tokens: int
    metadata: bool
    notice_percent: int | None
    """The memory-pressure notice's figure (None: no notice)."""
    sections: dict[str, int] = field(default_factory=dict)
    """Planned tokens per section (upper bounds; the rendered prompt is counted again)."""


def plan_step(inputs: StepInputs, policy: BudgetPolicy) -> StepPlan:
    """Decide a step's context (see `StepPlan`) within `policy.total`. Pure; raises `BudgetError`
    when the instructions, core blocks and newest turn alone do not fit.

    Evictions depend on the turns alone; when some are evicted the summary's new size is not
    known before the summarizer runs, so the plan gives it its whole share (memories take what
    is left after that)."""
    sizes = SectionSizes(instructions=inputs.instructions, core=inputs.core, metadata=inputs.metadata,
                         summary=inputs.summary + (inputs.summary_frame if inputs.summary else 0),
                         turns=inputs.turns, notice=inputs.notice)
    plan = plan_context(sizes, policy)
    if plan.evict:
        share = policy.total  # the absorbed summary may fill its whole share
        plan = plan_context(dataclasses.replace(sizes, summary=share), policy)
    summary = max(0, plan.summary_tokens - inputs.summary_frame)
    kept = choose(inputs.memories, plan.memory_budget, inputs.separator, inputs.memory_frame)
    turns_share = max(1, int((policy.total - inputs.instructions - inputs.core) * policy.turns_share))
    percent = min(99, round(100 * plan.sections["turns"] / turns_share)) if plan.pressure else None
    sections = {**plan.sections, "summary": plan.summary_tokens if summary else 0, "memories": sum(c for _, c in kept)}
    return StepPlan(evict=plan.evict, summary_tokens=summary, memories=[i for i, _ in kept], memory_tokens=sections["memories"],
                    metadata=plan.metadata, notice_percent=percent, sections=sections)


@dataclass(frozen=True, slots=True)
class _BlockView:
    """A core block as the template reads it. Attributes, not a dict: jinja2 looks a name up as
    an attribute first, and the miss it took on each dict key was most of rendering a prompt
    with many blocks (`block["label"]` still works in an override template)."""

    label: str
    description: str
    value: str
    used: int
    limit: int
    read_only: bool


def render_system_prompt(
    *,
    instructions: str,
    blocks: Sequence[CoreBlock],
    counts: dict[str, int] | None,
    last_reflection: datetime | None,
    summary: str,
    memories: Sequence[Hit],
    notice: str | None,
    now: datetime,
) -> str:
    """The system prompt of one step from `prompts/context.j2`."""
    return prompts.render(
        "context.j2",
        instructions=instructions,
        blocks=[_BlockView(b.label, b.block_description, b.value, len(b.value), b.limit, b.read_only) for b in blocks],
        counts=counts,
        last_reflection=last_reflection.strftime("%Y-%m-%d %H:%M") if last_reflection else None,
        summary=summary,
        memories=[render_hits(memories)] if memories else [],
        notice=notice,
        today=now.strftime("%Y-%m-%d (%A)"),
    )


@dataclass
class FixedPrompt:
    """The tokens of a step's system prompt with its optional sections empty (the store counts
    shown or not), rendered and counted again only when what it shows changed: the counts change
    with every turn, the rest seldom (two renders and counts of a step were ~3 ms)."""

    count: Callable[[str], int]
    _last: dict[bool, tuple[tuple[Any, ...], int]] = field(default_factory=dict)

    def tokens(self, instructions: str, blocks: Sequence[CoreBlock], counts: dict[str, int] | None,
               last_reflection: datetime | None, now: datetime) -> int:
        key = (instructions, tuple((b.label, b.block_description, b.value, b.limit, b.read_only) for b in blocks),
               tuple(counts.items()) if counts is not None else None, last_reflection, now.strftime("%Y-%m-%d"))
        if (found := self._last.get(counts is not None)) is not None and found[0] == key:
            return found[1]
        tokens = self.count(render_system_prompt(instructions=instructions, blocks=blocks, counts=counts, last_reflection=last_reflection,
                                                 summary="", memories=(), notice=None, now=now))
        self._last[counts is not None] = (key, tokens)
        return tokens
