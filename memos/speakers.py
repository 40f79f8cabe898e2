"""Speaker-aware ranking: a query that names one of the people who spoke favours their turns.

In a conversation between named people, a question about one of them ("What activities does
Melanie partake in?", "王芳在哪个城市工作？") is answered by what that person said: on the
LOCOMO dev file 97% of the evidence turns of a question naming exactly one speaker are that
speaker's own. Names in the query already weigh in full-text search, but a speaker's name is
in half of a conversation's indexed turns, so it says almost nothing there; here it becomes a
multiplier instead. The raw-mode complement of the entity graph (whose name links did not
pay on LOCOMO, see README "Entity graph"): the speaker is the one name every turn carries.

Pure: `favour_speakers` takes fused hits and returns them re-ordered. A query naming every
speaker among the hits (or none, or only roles such as "user") leaves the order as it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .fulltext import has_cjk
from .ranking import Hit, RowView

__all__ = ["ROLES", "favour_speakers", "named_speakers"]

ROLES = frozenset({"user", "assistant", "system", "tool", "agent", "ai", "bot", "ingest"})
"""Speakers that are roles, not names: a query saying "user" does not name a person, and the
entity graph links a role's turns to no person (`memos.graph`)."""
_WORD = re.compile(r"\w+")


def named_speakers(query: str, speakers: set[str]) -> set[str]:
    """The speakers `query` names: a name's first word as a whole word of the query (as
    written; any case if the query is all lower case), a Chinese name anywhere in it."""
    lowered = query == query.lower()
    words = set(_WORD.findall(query.lower() if lowered else query))
    named = set()
    for speaker in speakers:
        name = speaker.strip()
        if not name or name.lower() in ROLES:
            continue
        if has_cjk(name):
            if name in query:
                named.add(speaker)
            continue
        first = _WORD.findall(name.lower() if lowered else name)
        if first and first[0] in words:
            named.add(speaker)
    return named


def favour_speakers(hits: Sequence[Hit], query: str, weight: float) -> list[Hit]:
    """`hits` with the turns of the speakers the query names scored (1 + weight) times higher,
    best first again (ties by record id). Hits without a speaker (facts, documents) keep their
    score."""
    speakers = {actor for hit in hits if (actor := _speaker(hit))}
    named = named_speakers(query, speakers) if weight > 0 else set()
    if not named or named == speakers:
        return list(hits)
    for hit in hits:
        if _speaker(hit) in named:
            hit.score *= 1.0 + weight
            hit.parts["named_speaker"] = 1.0
    return sorted(hits, key=lambda hit: (-hit.score, hit.record.id))


def _speaker(hit: Hit) -> str:
    """Who said a hit's record ('' if nobody did), from the record or from its row as read."""
    if isinstance(hit.record, RowView):
        return hit.record.row.get("actor") or ""
    return getattr(hit.record, "actor", "") or ""
