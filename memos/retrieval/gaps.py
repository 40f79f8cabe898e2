"""A turn said between two packed turns is packed too: an excerpt without holes.

"I recommend a fantasy series." / "How about this one?" / "That's a great one! Let me know what
you think." / "Since you're recommending me a book, here's one": when the first, second and last
of these are packed (a hit and the turns around it), the third is the answer they frame, and a
reader of the excerpt sees a hole where it was. So after the budget is planned, each turn whose
turn before and turn after are both packed (in one stretch of conversation the search read for
the neighbours, `memos.retrieval.search`) is put right behind the later of the two and the budget
is planned again: it is packed if it still fits, and what ranked below it pays for it.

Pure: `with_gaps` takes the hits in rank order, the stretches of turns and what was packed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from memos.memtypes import MemoryRecord

from .passages import turn_of
from .ranking import Hit

__all__ = ["with_gaps"]


def with_gaps(hits: Sequence[Hit], kept: Iterable[int], stretches: Sequence[Sequence[MemoryRecord]], turns_store: str,
              cost: Callable[[Hit], int], most: int) -> list[Hit] | None:
    """`hits` with each turn of `stretches` whose turn before and turn after are both among the
    `kept` hits (their indexes), and whose line `cost`s at most `most` tokens, put right behind the
    later of the two (moved there if it ranked lower, added if it did not rank; an added one
    scores as the lower of the two): None when there is no such turn. A turn ranked above that
    place stays where it is (it did not fit there)."""
    place = {turn_of(hits[i]): i for i in kept}  # a packed passage stands for its turn
    ranked: dict[str, int] = {}
    for i, hit in enumerate(hits):
        ranked.setdefault(turn_of(hit), i)
    behind: dict[int, list[Hit]] = {}
    moved: set[str] = set()
    for stretch in stretches:
        for before, turn, after in zip(stretch, stretch[1:], stretch[2:], strict=False):
            if before.id not in place or after.id not in place or turn.id in place or turn.id in moved:
                continue
            last = max(place[before.id], place[after.id])
            if turn.id in ranked and ranked[turn.id] < last:  # ranked above both and still not packed
                continue
            own = hits[ranked[turn.id]] if turn.id in ranked else None
            hit = own if own is not None and own.id == turn.id else Hit(  # a passage's turn comes whole
                turns_store, turn, min(hits[place[before.id]].score, hits[place[after.id]].score), {"between": 1.0})
            if cost(hit) <= most:
                behind.setdefault(last, []).append(hit)
                moved.add(turn.id)
    if not behind:
        return None
    out: list[Hit] = []
    for i, hit in enumerate(hits):
        if turn_of(hit) not in moved:
            out.append(hit)
        out.extend(behind.get(i, []))
    return out
