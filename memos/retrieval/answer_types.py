"""What kind of answer a question asks for, and whether a record's text can hold one.

A question often says what its answer looks like: "When did Caroline go to the support group?"
and `婚礼是哪一天？` want a time, "What book did Melanie read?" and `李明推荐王芳看什么书？` a title.
The record that answers holds one ("I went to a support group yesterday", `推荐你看...《流浪地球》`),
and most records around it do not (the shares, in English and Chinese, are in
docs/benchmarks.md). So the hits that carry the kind of answer asked for rise
by a multiplier, as the turns of a named speaker do (`memos.retrieval.speakers`): a boost, never a
filter, and a question that asks for no particular kind is ranked as before.

Pure: `favour_answers` takes fused hits and returns them re-ordered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from memos.store.fulltext import MARK

from .ranking import Hit, RowView, boosted
from .temporal import mentions_time

__all__ = ["AnswerKind", "carries", "expected_answer", "favour_answers"]

AnswerKind = Literal["time", "quantity", "title"]

_ASKS_TIME = re.compile(
    r"^\W*when\b|\b(?:what|which)\s+(?:date|day|year|month|week|time)\b|\bhow\s+long\s+ago\b"
    r"|什么时候|啥时候|哪天|哪一天|哪年|哪一年|哪个月|几月|几号|何时|多久以前|多久之前",
    re.IGNORECASE)
_ASKS_TITLE = re.compile(
    r"\b(?:books?|novels?|songs?|movies?|films?|tv\s+shows?|series|albums?|games?|podcasts?|poems?)\b"
    r"|书|歌|电影|剧|小说|游戏|专辑|节目|纪录片|动画",
    re.IGNORECASE)
_ASKS_QUANTITY = re.compile(
    r"\bhow\s+(?:many|much|long|often|old|far|big|tall|fast)\b|多少|多久|多长|多大|多远|多高|多重|多快|几[个次年岁级天周本首场遍倍口层]|几个?(?:小时|月|星期|礼拜|分钟)",
    re.IGNORECASE)
_NUMBER = re.compile(
    r"\d|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
    r"|hundred|thousand|dozen|twice)\b|\bevery\s+(?:day|week|month|year|weekend|morning|evening|night)\b"
    r"|[零〇一二两三四五六七八九十百千万半]+\s*(?:个|次|年|月|天|周|星期|礼拜|小时|钟头|分钟|分|秒|岁|级|公里|千米|米|斤|公斤|块|元|本|首|只|条|场|遍|倍|人|口|层|平米)"
    r"|每(?:天|日|周|星期|礼拜|个?月|年|晚|周[一二三四五六日末])",
    re.IGNORECASE)
_TITLE = re.compile(r"[《「『][^》」』\n]{1,60}[》」』]|\"[^\"\n]{2,80}\"|“[^”\n]{2,80}”")


def expected_answer(query: str) -> AnswerKind | None:
    """The kind of answer `query` asks for: a time ("when ...", `什么时候`), a title (a book,
    song, film, show, game; `书`, `歌`, `电影`), or None."""
    if _ASKS_TIME.search(query):
        return "time"
    if _ASKS_QUANTITY.search(query):
        return "quantity"
    if _ASKS_TITLE.search(query):
        return "title"
    return None


def carries(text: str, kind: AnswerKind) -> bool:
    """Whether `text` holds an answer of `kind`: a time expression memos can read
    (`memos.retrieval.temporal`), or a quoted title (`《三体》`, `"Charlotte's Web"`)."""
    if kind == "time":
        return mentions_time(text)
    if kind == "quantity":
        return _NUMBER.search(text) is not None
    return _TITLE.search(text) is not None


def favour_answers(hits: Sequence[Hit], query: str, weight: float) -> list[Hit]:
    """`hits` with those whose text carries the kind of answer `query` asks for scored
    (1 + weight) times higher, best first again (ties by record id)."""
    kind = expected_answer(query) if weight > 0 else None
    if kind is None:
        return list(hits)
    return boosted(hits, lambda hit: carries(_text(hit), kind), weight, "answer_kind")


def _text(hit: Hit) -> str:
    """The text a hit is found by (`search_text()`: a turn's words and the turn before's, as the
    full-text index holds them, less the CJK tokens appended there), from its record or its row."""
    if isinstance(hit.record, RowView):
        return (hit.record.row.get("text") or "").split(MARK, 1)[0]
    return hit.record.search_text()
