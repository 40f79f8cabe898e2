"""What a hit costs against the budget: a small budget buys more, smaller hits.

A budget is packed best-first, so a hit that takes a large part of it (a long reply, one
passage of an essay) displaces several smaller ones ranked just below it: at 500 tokens one
line of 120 tokens costs two or three short turns, and when the question needs facts from
several turns, coverage is lost. `priced` ranks a hit that costs more than `share` of the
budget at its score × (share × budget / cost): it must score that much better than the small
ones it displaces. A large budget affords every line (no hit is over its share), and its
ranking is unchanged. `affordable` says whether a line may come along as context (the turns
around a hit): only within the same share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .packing import packed_line
from .ranking import Hit

__all__ = ["affordable", "line_limit", "line_tokens", "priced"]


def _line(hit: Hit) -> str:
    record = hit.record
    return (packed_line(record) if record.render_group() else record.render()) + "\n"


def line_tokens(hit: Hit, count_tokens: Callable[[str], int]) -> int:
    """The tokens of a hit's line as packed (its heading, paid once per group, left out)."""
    return count_tokens(_line(hit))


def _over(hit: Hit, limit: float | None, count_tokens: Callable[[str], int]) -> int | None:
    """The tokens of `hit`'s line if they are more than `limit`, else None. A line of fewer UTF-8
    bytes than the limit is within it, uncounted: a token is at least a byte."""
    if limit is None:
        return None
    line = _line(hit)
    if len(line.encode()) <= limit:
        return None
    cost = count_tokens(line)
    return cost if cost > limit else None


def affordable(hit: Hit, limit: float | None, count_tokens: Callable[[str], int]) -> bool:
    """Whether `hit` costs at most `limit` tokens (`line_limit`; None: any line does)."""
    return _over(hit, limit, count_tokens) is None


def line_limit(budget: int, share: float, cap: float | None = None, floor: float = 0.0) -> float | None:
    """The most tokens a line may cost at `budget` before it is priced down: `share` of it, at
    most `cap` and at least `floor` (a budget of a few lines must not price an ordinary turn);
    None (no limit) for a share >= 1 or <= 0."""
    if not 0 < share < 1:
        return None
    return max(floor, budget * share if cap is None else min(budget * share, cap))


def priced(hits: Sequence[Hit], limit: float | None, count_tokens: Callable[[str], int]) -> list[Hit]:
    """`hits` with each one over `limit` tokens (`line_limit`) scored × limit / cost and moved
    down to where that score falls; the others keep their order (an interleaved list stays so).
    No limit changes nothing."""
    if limit is None:
        return list(hits)
    out: list[Hit] = []
    waiting: list[Hit] = []  # the hits priced down, best first, until their score is reached
    for hit in hits:
        if (cost := _over(hit, limit, count_tokens)) is not None:
            factor = limit / cost
            hit.score *= factor
            hit.parts["over_share"] = factor
            waiting.append(hit)
            waiting.sort(key=lambda h: -h.score)
            continue
        while waiting and waiting[0].score > hit.score:
            out.append(waiting.pop(0))
        out.append(hit)
    return out + waiting
