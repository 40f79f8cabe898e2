"""Speaker-aware ranking: a query that names one of the people who spoke favours their turns.

In a conversation between named people, a question about one of them ("What activities does
Melanie partake in?", "王芳在哪个城市工作？") is answered by what that person said: nearly all
the evidence turns of a question naming exactly one speaker are that speaker's own. Names in the query already weigh in full-text search, but a speaker's name is
in half of a conversation's indexed turns, so it says almost nothing there; here it becomes a
multiplier instead. The raw-mode complement of the entity graph (whose name links did not
pay in raw mode, see docs/entity-graph.md): the speaker is the one name every turn carries.

Pure: `favour_speakers` takes fused hits and returns them re-ordered. A query naming every
speaker among the hits (or none, or only roles such as "user") leaves the order as it was.

Where the others call a speaker by name ("Thanks, Melanie!", often in a conversation), that name is taken out of the query the
turns are matched against (`without_speakers`, `SpeakerTally`): who said a turn is its `actor`,
weighed by the multiplier above, and a name said *to* someone tells nothing of the topic. Left
in, it made the query's vector and words match the turns that address the speaker and the
speaker's shortest turns (whose text is mostly "Melanie:"), instead of what the question is
about (README, Entity graph). A name the others never say is left in the query: there it
still tells the speaker's turns apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from memos.store.fulltext import has_cjk

from .ranking import Hit, RowView, boosted

__all__ = ["ROLES", "SpeakerTally", "favour_speakers", "named_speakers", "speaker_of", "without_speakers"]

ROLES = frozenset({"user", "assistant", "system", "tool", "agent", "ai", "bot", "ingest"})
"""Speakers that are roles, not names: a query saying "user" does not name a person, and the
entity graph links a role's turns to no person (`memos.graph.entities`)."""
_WORD = re.compile(r"\w+")
_SPACES = re.compile(r"\s+")


def named_speakers(query: str, speakers: set[str]) -> set[str]:
    """The speakers `query` names: a name's first word as a whole word of the query (as
    written; any case if the query is all lower case), a Chinese name anywhere in it."""
    lowered = query == query.lower()
    words = set(_WORD.findall(query.lower() if lowered else query))
    named = set()
    for speaker, name in _names(speakers).items():
        if has_cjk(name):
            if name in query:
                named.add(speaker)
        # Lowered whole, as the query is: lowering can split a word ("İ" becomes "i" and a mark).
        elif (_first_name(speaker.lower()) if lowered else name) in words:
            named.add(speaker)
    return named


@dataclass(frozen=True)
class SpeakerTally:
    """Who speaks in a conversation, and how often the others call each speaker by name. A
    speaker is called by name in a turn that holds the first word of their name as a whole word,
    as written (a Chinese name anywhere in it); roles ("user") are never called."""

    said: dict[str, int] = field(default_factory=dict)
    """Turns each speaker said."""
    called: dict[str, int] = field(default_factory=dict)
    """Turns of the other speakers that call each speaker by name."""

    @classmethod
    def of(cls, speakers: Sequence[str | None] | pa.Array | pa.ChunkedArray,
           texts: Sequence[str | None] | pa.Array | pa.ChunkedArray) -> SpeakerTally:
        """The tally of a whole conversation from two columns: who said each turn, and what.
        Counted column by column (pyarrow compute), not in a Python loop over the turns."""
        actors = _strings(speakers)
        said_counts = pc.value_counts(actors)
        said = {value.as_py(): count.as_py() for value, count in zip(said_counts.field("values"), said_counts.field("counts"), strict=True)
                if value.as_py()}
        text = _strings(texts)
        called = {}
        for speaker, name in _names(said).items():
            if has_cjk(name):
                hit = pc.match_substring(text, name)
            else:
                hit = pc.match_substring_regex(text, rf"(^|[^\p{{L}}\p{{N}}_]){re.escape(name)}([^\p{{L}}\p{{N}}_]|$)")
            count = pc.sum(pc.and_(hit, pc.not_equal(actors, speaker))).as_py() or 0
            if count:
                called[speaker] = count
        return cls(said, called)

    def plus(self, turns: Iterable[tuple[str, str]]) -> SpeakerTally | None:
        """The tally with more turns counted, as (speaker, what they said) pairs; None when one
        of them has a new speaker (the earlier turns that call them are not counted: tally the
        whole conversation again)."""
        turns = [(speaker, text) for speaker, text in turns if speaker]
        if any(speaker not in self.said for speaker, _ in turns):
            return None
        said = dict(self.said)
        called = dict(self.called)
        for speaker, _ in turns:
            said[speaker] += 1
        names = _names(said)
        for speaker, text in turns:
            words = set(_WORD.findall(text))
            for other, name in names.items():
                if other != speaker and (name in text if has_cjk(name) else name in words):
                    called[other] = called.get(other, 0) + 1
        return SpeakerTally(said, called)

    def addressed(self, speaker: str) -> float:
        """The share of the other speakers' turns that call `speaker` by name (0 with no other turns)."""
        others = sum(self.said.values()) - self.said.get(speaker, 0)
        return self.called.get(speaker, 0) / others if others else 0.0


def _strings(values: Sequence[str | None] | pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    column = values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values, pa.string())
    return column.fill_null("")


def _names(speakers: Iterable[str]) -> dict[str, str]:
    """The first name each speaker is called by (roles have none)."""
    return {s: name for s in speakers if s.strip().lower() not in ROLES and (name := _first_name(s))}


def _first_name(speaker: str) -> str:
    name = speaker.strip()
    if has_cjk(name):
        return name
    words = _WORD.findall(name)
    return words[0] if words else ""


def without_speakers(query: str, named: set[str]) -> str:
    """`query` with the names of the `named` speakers taken out (every word of a name, with a
    possessive "'s"; matched as `named_speakers` matches them), spaces closed up; the query as
    it was if nothing but punctuation would be left."""
    if not named:
        return query
    lowered = query == query.lower()
    out = query
    for speaker in named:
        name = speaker.strip()
        if has_cjk(name):
            out = out.replace(name, " ")
            continue
        for word in _WORD.findall(name.lower() if lowered else name):
            out = re.sub(rf"\b{re.escape(word)}(?:['’]s)?\b", " ", out)
    out = _SPACES.sub(" ", out).strip()
    return out if _WORD.search(out) else query


def favour_speakers(hits: Sequence[Hit], query: str, weight: float) -> list[Hit]:
    """`hits` with the turns of the speakers the query names scored (1 + weight) times higher,
    best first again (ties by record id). Hits without a speaker (facts, documents) keep their
    score."""
    speakers = {actor for hit in hits if (actor := speaker_of(hit))}
    named = named_speakers(query, speakers) if weight > 0 else set()
    if not named or named == speakers:
        return list(hits)
    return boosted(hits, lambda hit: speaker_of(hit) in named, weight, "named_speaker")


def speaker_of(hit: Hit) -> str:
    """Who said a hit's record ('' if nobody did), from the record or from its row as read."""
    if isinstance(hit.record, RowView):
        return hit.record.row.get("actor") or ""
    return getattr(hit.record, "actor", "") or ""
