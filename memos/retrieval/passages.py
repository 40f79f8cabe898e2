"""Passages in a budgeted search: which of a long turn's forms a budget buys.

A long turn is stored whole and as passages (`memos.passages`). A budgeted search of the turns
searches the passages too (`searched_with_passages`); among its fused hits a turn and its
passages stand for the same words, so `whole_or_passages` keeps one form of each: the whole
turn, at the best rank any of its forms reached, when it costs at most `WHOLE_TURN_SHARE` of
the budget; else its passages, each at its own rank (the turn is dropped). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .ranking import Hit

__all__ = ["PASSAGES", "WHOLE_TURN_SHARE", "searched_with_passages", "whole_or_passages"]

PASSAGES = "passage"
"""The store of the passages of long turns (`memtypes.passage`)."""
WHOLE_TURN_SHARE = 0.25
"""A long turn is packed whole only when it costs at most this share of the budget: a small
budget buys its relevant parts and other hits, a large one the turn with its surroundings."""


def searched_with_passages(types: Sequence[str], turns: str | None, stores: Sequence[str]) -> list[str]:
    """`types` plus the passage store, right after the turns' store, when the turns are searched
    and the passage store exists (`stores`: those of the open memory)."""
    if turns is None or turns not in types or PASSAGES in types or PASSAGES not in stores:
        return list(types)
    at = list(types).index(turns) + 1
    return [*types[:at], PASSAGES, *types[at:]]


def whole_or_passages(hits: Sequence[Hit], budget: int, count_tokens: Callable[[str], int], turns: str) -> list[Hit]:
    """`hits` with one form of each long turn (see the module docstring), in rank order."""
    parts: dict[str, list[int]] = {}  # turn id -> ranks of its passages
    for rank, hit in enumerate(hits):
        if hit.memory_type == PASSAGES:
            parts.setdefault(str(getattr(hit.record, "turn_id", "")), []).append(rank)
    if not parts:
        return list(hits)
    whole: dict[str, int] = {}  # turn id -> the rank it takes
    for rank, hit in enumerate(hits):
        if hit.memory_type == turns and hit.id in parts:
            if count_tokens(hit.record.render_line()) <= budget * WHOLE_TURN_SHARE:
                whole[hit.id] = min(rank, parts[hit.id][0])
    out: list[tuple[int, Hit]] = []
    for rank, hit in enumerate(hits):
        if hit.memory_type == PASSAGES:
            turn = str(getattr(hit.record, "turn_id", ""))
            if turn not in whole:
                out.append((rank, hit))
        elif hit.memory_type == turns and hit.id in parts:
            if hit.id in whole:
                out.append((whole[hit.id], hit))
        else:
            out.append((rank, hit))
    return [hit for _, hit in sorted(out, key=lambda item: item[0])]
