"""Long turns as passages: splitting a turn's text, building its `Passage` records, deleting them.

A turn whose text runs past `LONG_TURN_TOKENS` is indexed twice: whole, as the turn, and in
parts of about `PASSAGE_TOKENS` (`memtypes.passage`), each with its own vector, so a budgeted
search can pack the part a question is about. Text splits at paragraph and sentence ends
(`. ! ?` before a space, `。！？；` anywhere, newlines), then at spaces or, in text without
them (Chinese), between characters; pieces are packed greedily into passages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from memos.memtypes import Episode, Passage
from memos.store.lancedb.deletion import delete_record
from memos.store.lancedb.storage import Storage
from memos.store.scope import Scope, Where, sql_in

__all__ = ["LONG_TURN_TOKENS", "PASSAGE_TOKENS", "delete_passages", "split_passages", "turn_passages"]

LONG_TURN_TOKENS = 240
"""A turn longer than this (its text, in tokens) is also indexed as passages: a short turn costs
a budget little, and each passage is one more vector to embed at ingest."""
PASSAGE_TOKENS = 120
"""About how long a passage is: shorter buys a small budget more distinct parts, longer keeps
more of a part's surroundings (an answer and the reason given for it)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；!?])|\n+")
_WORD_BREAK = re.compile(r"(?<=\s)")


def _pieces(text: str, count: Callable[[str], int], limit: int) -> list[str]:
    """`text` cut at sentence ends, and a sentence longer than `limit` tokens at spaces (or
    between characters where it has none), each piece with the whitespace that followed it."""
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() > start:
            out.append(text[start : match.end()])
            start = match.end()
    if start < len(text):
        out.append(text[start:])
    pieces: list[str] = []
    for sentence in out:
        if count(sentence) <= limit:
            pieces.append(sentence)
            continue
        words = [w for w in _WORD_BREAK.split(sentence) if w]
        if len(words) == 1:  # no spaces (Chinese, a long URL): cut by characters
            step = max(1, len(sentence) * limit // max(1, count(sentence)))
            words = [sentence[i : i + step] for i in range(0, len(sentence), step)]
        pieces.extend(words)
    return pieces


def split_passages(text: str, count: Callable[[str], int], target: int = PASSAGE_TOKENS) -> list[str]:
    """`text` as passages of about `target` tokens each, cut at sentence ends where it can be
    (see the module docstring); a last passage under a third of `target` joins the one before."""
    passages: list[str] = []
    current, size = "", 0
    for piece in _pieces(text, count, target):
        tokens = count(piece)
        if current and size + tokens > target:
            passages.append(current)
            current, size = "", 0
        current += piece
        size += tokens
    if current:
        if passages and size < target // 3:
            passages[-1] += current
        else:
            passages.append(current)
    return [p.strip() for p in passages if p.strip()]


def turn_passages(episodes: Sequence[Episode], count: Callable[[str], int]) -> list[Passage]:
    """The passages of the long conversation turns among `episodes` (none for a short one or an
    event that is not a message); each carries its turn's scope, time, speaker and provenance."""
    out: list[Passage] = []
    for episode in episodes:
        if episode.event_type != "message" or count(episode.summary) <= LONG_TURN_TOKENS:
            continue
        parts = split_passages(episode.summary, count)
        if len(parts) < 2:
            continue
        for position, part in enumerate(parts):
            out.append(Passage(
                user_id=episode.user_id, agent_id=episode.agent_id, session_id=episode.session_id,
                turn_id=episode.id, position=position, last=position == len(parts) - 1,
                occurred_at=episode.occurred_at, actor=episode.actor, summary=part,
                importance=episode.importance, tags=list(episode.tags), source_ids=list(episode.source_ids),
                status=episode.status, created_at=episode.created_at, updated_at=episode.updated_at,
            ))
    return out


async def delete_passages(storage: Storage, scope: Scope, memory_type: str, turn_ids: Sequence[str]) -> int:
    """Delete the passages of these records of store `memory_type` in `scope` (none unless it
    holds the turns), each as a record is deleted (row, shared row, history;
    `memos.store.lancedb.deletion`); returns how many. Run before the turn's own delete, so a
    delete cut short leaves the turn to retry, never a passage without its turn."""
    if not storage.type_table(memory_type).record_type.holds_turns or "passage" not in storage.memory_types() or not turn_ids:
        return 0
    rows = await storage.rows("passage", Where(scope).raw(sql_in("turn_id", list(turn_ids))).build(), columns=["id"])
    for row in rows:
        await delete_record(storage, scope, "passage", row["id"])
    return len(rows)
