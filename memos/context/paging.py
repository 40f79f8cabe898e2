"""Paging: evicted turns are folded into the running summary.

When the working context is under pressure, the oldest whole turns leave it (they are already
in episodic memory, so nothing is lost) and the running summary absorbs them, recursively:
`new summary = summarize(previous summary, evicted turns)`. With a model, a summarizer agent
does it (`memos.agents.summarizer`); in raw mode `ExtractiveSummarizer` keeps one short line per
turn and drops the oldest lines when the summary outgrows its size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from memos.memtypes import Episode
from memos.store.fulltext import has_cjk

__all__ = ["ExtractiveSummarizer", "Summarizer", "SummaryCut", "newest_lines", "turn_line"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
_EARLIER = "(earlier turns omitted)"


class Summarizer(Protocol):
    """Folds evicted turns into the running summary."""

    async def __call__(self, previous: str, evicted: Sequence[Episode]) -> str: ...


def turn_line(turn: Episode, max_words: int = 30) -> str:
    """One summary line for a turn: date, speaker and its first sentence (cut at `max_words`)."""
    first = _SENTENCE.split(turn.summary.strip(), maxsplit=1)[0]
    if has_cjk(first):  # Chinese has no spaces: two characters stand for a word
        text = first[: 2 * max_words] + (" ..." if len(first) > 2 * max_words else "")
    else:
        words = first.split()
        text = " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")
    when = f"{turn.occurred_at:%Y-%m-%d}"
    return f"- [{when}] {turn.actor}: {text}" if turn.actor else f"- [{when}] {text}"


@dataclass
class ExtractiveSummarizer:
    """The raw-mode summary: one line per evicted turn, newest kept when it grows too long."""

    count_tokens: Callable[[str], int]
    max_tokens: int = 600

    async def __call__(self, previous: str, evicted: Sequence[Episode]) -> str:
        lines = [line for line in previous.splitlines() if line and line != _EARLIER]
        lines.extend(turn_line(turn) for turn in evicted)
        kept = newest_lines(lines, self.max_tokens, self.count_tokens, at_least=1)
        dropped, lines = len(kept) < len(lines), kept
        if dropped or (previous.startswith(_EARLIER)):
            lines.insert(0, _EARLIER)
        return "\n".join(lines)


def newest_lines(lines: Sequence[str], tokens: int, count: Callable[[str], int], *, at_least: int = 0) -> list[str]:
    """The longest run of the last `lines` whose joined text counts at most `tokens` (but at least
    `at_least` lines): what dropping the oldest line until the rest fits gives, with the text
    counted a few times instead of once per line dropped (an eviction of many turns drops as many
    summary lines).
    Each line is counted on its own to find the cut, then the joined text decides it."""
    if not lines:
        return []
    start, total = len(lines), -1
    while start > 0 and total + 1 + count(lines[start - 1]) <= tokens:
        start -= 1
        total += 1 + count(lines[start])
    start = min(start, len(lines) - at_least)
    while start > 0 and count("\n".join(lines[start - 1 :])) <= tokens:  # BPE may join across a newline
        start -= 1
    while start < len(lines) - at_least and count("\n".join(lines[start:])) > tokens:
        start += 1
    return list(lines[start:])


@dataclass
class SummaryCut:
    """The newest lines of a running summary that fit in a number of tokens (summaries grow at
    the end), worked out again only when the summary or the room for it changed: cutting counts
    the summary once per line dropped, and the summary changes only when turns are evicted."""

    count_tokens: Callable[[str], int]
    _last: tuple[str, int, str] = ("", 0, "")

    def newest(self, summary: str, tokens: int) -> str:
        if self._last[:2] != (summary, tokens):
            cut = "\n".join(newest_lines(summary.splitlines(), tokens, self.count_tokens)) if tokens > 0 and summary else ""
            self._last = (summary, tokens, cut)
        return self._last[2]
