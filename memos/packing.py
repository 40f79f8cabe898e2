"""Pure packing and rendering of search hits within a token budget.

Hits render compactly: records that share a heading (episodes of the same day) are listed
under it once, so a budget is spent on content rather than on repeated dates. `pack` walks
the hits best-first and keeps each one whose *marginal* cost (its line, plus its heading if
that heading is new) still fits; a hit too large for what is left is skipped and a smaller,
lower-ranked one may still fit. `render_hits` produces exactly the text that was paid for,
and `pack` checks the whole rendering against the budget, so it is never exceeded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .ranking import Hit

__all__ = ["MemorySize", "choose", "measure", "pack", "render_hits"]


def _heading(group: str) -> str:
    return f"[{group}]"


@dataclass(frozen=True)
class MemorySize:
    """What one hit costs in the prompt, counted: its line, and its group's heading (paid by the
    first hit of the group that is kept)."""

    tokens: int
    group: str = ""
    heading: int = 0


def measure(hits: Sequence[Hit], count_tokens: Callable[[str], int]) -> list[MemorySize]:
    """Count each hit's line (set as `hit.text`) and its heading: the input `choose` plans with."""
    sizes = []
    for hit in hits:
        group = hit.record.render_group()
        hit.text = hit.record.render_line() if group else hit.record.render()
        sizes.append(MemorySize(count_tokens(hit.text), group or "", count_tokens(_heading(group)) if group else 0))
    return sizes


def choose(sizes: Sequence[MemorySize], budget: int, separator_tokens: int = 1, frame: int = 0) -> list[tuple[int, int]]:
    """Which hits fit in `budget`, best first: (index, marginal cost) of each kept one. Pure.

    A hit is kept if its marginal cost (line, separator, its heading if the group is new) still
    fits; one too large is skipped and a smaller, lower-ranked one may still fit. `frame` is
    paid once, by the first hit kept (the section's own wrapper text)."""
    kept: list[tuple[int, int]] = []
    groups: set[str] = set()
    used = 0
    for index, size in enumerate(sizes):
        cost = size.tokens + (separator_tokens if kept else frame)
        if size.group and size.group not in groups:
            cost += size.heading + separator_tokens
        if used + cost <= budget:
            kept.append((index, cost))
            used += cost
            if size.group:
                groups.add(size.group)
    return kept


def pack(hits: Sequence[Hit], budget: int, count_tokens: Callable[[str], int], separator_tokens: int = 1) -> list[Hit]:
    """The hits that fit in `budget` tokens when rendered by `render_hits`, in rank order.

    Each kept hit gets `text` (its line) and `tokens` (what adding it cost, heading included).
    """
    if budget <= 0:
        return []
    kept = []
    for index, cost in choose(measure(hits, count_tokens), budget, separator_tokens):
        hits[index].tokens = cost
        kept.append(hits[index])
    while kept and count_tokens(render_hits(kept)) > budget:  # BPE merges across lines, in theory
        kept.pop()
    return kept


def render_hits(hits: Sequence[Hit]) -> str:
    """Packed hits as prompt text: ungrouped records one per line, then each heading (in time
    order) with its records' lines under it (in time order)."""
    lines: list[str] = []
    grouped: dict[str, list[Hit]] = {}
    for hit in hits:
        group = hit.record.render_group()
        if group:
            grouped.setdefault(group, []).append(hit)
        else:
            lines.append(hit.text or hit.record.render())
    for group, members in sorted(grouped.items(), key=lambda item: min(h.record.event_time() for h in item[1])):
        lines.append(_heading(group))
        lines.extend(h.text or h.record.render_line() for h in sorted(members, key=lambda h: h.record.event_time()))
    return "\n".join(lines)
