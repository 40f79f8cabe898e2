"""Pure packing: which hits fit a token budget, in rank order.

`pack` walks the hits best-first and keeps each one whose rendered text still fits; a hit too
large for what is left is skipped (a smaller, lower-ranked one may still fit). It never
exceeds the budget and never reorders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .ranking import Hit

__all__ = ["pack", "render_hits"]


def pack(hits: Sequence[Hit], budget: int, count_tokens: Callable[[str], int], separator_tokens: int = 1) -> list[Hit]:
    """The hits that fit in `budget` tokens, in their given order, with `text`/`tokens` set."""
    if budget <= 0:
        return []
    kept: list[Hit] = []
    used = 0
    for hit in hits:
        if not hit.text:
            hit.text = hit.record.render()
        hit.tokens = count_tokens(hit.text)
        cost = hit.tokens + (separator_tokens if kept else 0)
        if used + cost <= budget:
            kept.append(hit)
            used += cost
    return kept


def render_hits(hits: Sequence[Hit]) -> str:
    """The packed hits as prompt text, one per line."""
    return "\n".join(hit.text or hit.record.render() for hit in hits)
