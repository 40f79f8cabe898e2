"""Pure packing and rendering of search hits within a token budget.

Hits render compactly: records that share a heading (episodes of the same day) are listed
under it once, so a budget is spent on content rather than on repeated dates, and under a
heading the lines one speaker said one after the other are joined (`JOINER`) and name the
speaker once. `pack` walks the hits best-first and keeps each one whose *marginal* cost (what
its group's block grows by: its line, its heading if the group is new, less a name when it
joins its speaker's line) still fits; a hit too large for what is left is skipped and a
smaller, lower-ranked one may still fit. A line is counted with the newline after it (BPE
merges that newline into the line's last punctuation: counted apart, 4% of a budget was paid
for and never used). `render_hits` produces exactly the text that was paid for, and `pack`
checks the whole rendering against the budget, so it is never exceeded. What a speaker said is
packed without its sentences of pleasantries only ("Thanks, Mel!", `哈哈，太棒了！`;
`memos.retrieval.pleasantries`): a budget buys facts.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memos.memtypes import MemoryRecord

from .pleasantries import without_pleasantries
from .ranking import Hit

__all__ = ["JOINER", "MemorySize", "choose", "measure", "pack", "packed_line", "packed_parts", "render_hits"]

JOINER = " … "
"""Joins what one speaker said in lines that follow each other under a heading (the turns
between them, if any, were not packed)."""


def _heading(group: str) -> str:
    return f"[{group}]"


def packed_parts(record: MemoryRecord) -> tuple[str, str]:
    """`record.render_parts()` as packed: what a speaker said without its pleasantries."""
    speaker, said = record.render_parts()
    return (speaker, without_pleasantries(said)) if speaker else (speaker, said)


def packed_line(record: MemoryRecord) -> str:
    """`record.render_line()` as packed (see `packed_parts`)."""
    line = record.render_line()
    speaker, said = record.render_parts()
    if not speaker:
        return line
    short = without_pleasantries(said)
    return line if short == said else line.replace(said, short, 1)


@dataclass(frozen=True)
class MemorySize:
    """What one hit costs in the prompt, counted: its line with its newline, and its group's
    heading (paid by the first hit of the group that is kept)."""

    tokens: int
    group: str = ""
    heading: int = 0
    speaker: str = ""
    """Who said it ('' for nobody): the line right after one of the same speaker's is joined to it."""
    joined: int = 0
    """Its tokens when joined to the line before it (`JOINER` and what was said, no name)."""
    at: float = 0.0
    """Its time: the order of the lines under a heading."""


def measure(hits: Sequence[Hit], count_tokens: Callable[[str], int]) -> list[MemorySize]:
    """Count each hit's line (set as `hit.text`) and its heading: the input `choose` plans with."""
    sizes = []
    headings: dict[str, int] = {}
    names: dict[str, int] = {}  # "name:" in tokens, against the joiner's: a joined line is its line less the difference
    joiner = count_tokens(JOINER.rstrip())
    for hit in hits:
        record = hit.record
        group = record.render_group()
        if not group:
            hit.text = record.render()
            sizes.append(MemorySize(count_tokens(hit.text + "\n")))
            continue
        hit.text = packed_line(record)
        speaker, _ = record.render_parts()
        tokens = count_tokens(hit.text + "\n")
        if group not in headings:
            headings[group] = count_tokens(_heading(group) + "\n")
        if speaker and speaker not in names:
            names[speaker] = count_tokens(f"{speaker}:")
        joined = tokens - names[speaker] + joiner if speaker else 0
        sizes.append(MemorySize(tokens, group, headings[group], speaker, joined, record.event_time().timestamp()))
    return sizes


def _line_cost(line: MemorySize, before: MemorySize | None) -> int:
    """A line's tokens right after `before` under its heading: joined if one speaker said both."""
    return line.joined if before is not None and line.speaker and line.speaker == before.speaker else line.tokens


def choose(sizes: Sequence[MemorySize], budget: int, separator_tokens: int = 0, frame: int = 0) -> list[tuple[int, int]]:
    """Which hits fit in `budget`, best first: (index, marginal cost) of each kept one. Pure.

    A hit is kept if its marginal cost (what its group's block grows by: its heading if the group
    is new, its line, joined or not to the line before it, and the change to the line after it;
    its own line if it has no group; plus `separator_tokens`) still fits; one too large is
    skipped and a smaller, lower-ranked one may still fit. `frame` is paid once, by the first
    hit kept (the section's own wrapper text)."""
    kept: list[tuple[int, int]] = []
    groups: dict[str, tuple[list[float], list[MemorySize]]] = {}  # kept lines in time order (ties: rank order)
    used = 0
    for index, size in enumerate(sizes):
        cost = separator_tokens if kept else frame
        if size.group:
            times, lines = groups.get(size.group, ([], []))
            at = bisect.bisect_right(times, size.at)
            before = lines[at - 1] if at else None
            after = lines[at] if at < len(lines) else None
            cost += (0 if lines else size.heading) + _line_cost(size, before)
            if after is not None:
                cost += _line_cost(after, size) - _line_cost(after, before)
        else:
            cost += size.tokens
        if used + cost <= budget:
            kept.append((index, cost))
            used += cost
            if size.group:
                times.insert(at, size.at)
                lines.insert(at, size)
                groups[size.group] = (times, lines)
    return kept


def pack(hits: Sequence[Hit], budget: int, count_tokens: Callable[[str], int], separator_tokens: int = 0,
         replan: Callable[[Sequence[Hit], list[int]], Sequence[Hit] | None] | None = None) -> list[Hit]:
    """The hits that fit in `budget` tokens when rendered by `render_hits`, in rank order.

    Each kept hit gets `text` (its line) and `tokens` (what adding it cost, heading included).
    `replan`, given the hits and the indexes of those that fit, may return them in another order
    (with others added: `memos.retrieval.gaps`), planned again in its place.
    """
    if budget <= 0:
        return []
    sizes = measure(hits, count_tokens)
    chosen = choose(sizes, budget, separator_tokens)
    if replan is not None and (again := replan(hits, [index for index, _ in chosen])) is not None:
        known = {id(hit): size for hit, size in zip(hits, sizes, strict=True)}
        new = [hit for hit in again if id(hit) not in known]
        known |= {id(hit): size for hit, size in zip(new, measure(new, count_tokens), strict=True)}
        hits, sizes = again, [known[id(hit)] for hit in again]
        chosen = choose(sizes, budget, separator_tokens)
    kept = []
    for index, cost in chosen:
        hits[index].tokens = cost
        kept.append(hits[index])
    while kept and count_tokens(render_hits(kept)) > budget:  # BPE merges across lines, in theory
        kept.pop()
    return kept


def render_hits(hits: Sequence[Hit]) -> str:
    """Packed hits as prompt text: ungrouped records one per line, then each heading (in time
    order) with its records' lines under it (in time order), a speaker's consecutive lines
    joined by `JOINER`."""
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
        before = None
        for hit in sorted(members, key=lambda h: h.record.event_time()):
            speaker, said = packed_parts(hit.record)
            if speaker and speaker == before:
                lines[-1] += JOINER + said
            else:
                lines.append(packed_line(hit.record))
            before = speaker
    return "\n".join(lines)
