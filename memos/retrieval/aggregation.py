"""Questions that collect or count across sessions, and hits spread over the sessions they need.

"How many weddings did I go to this year?", "which books have I finished?", `我一共去过几次医院？`,
`每次去健身房都练什么？`: the answer is put together from several sessions, each holding one piece.
Ranked by similarity alone, the one session that talks about the subject longest fills a budget
with five turns and the three other sessions that hold one mention each are left out. So for an
aggregating question (`aggregates`) a session's second, third, ... hit is worth less than the
best hit of a session not yet represented (`spread_sessions`): coverage across sessions first,
depth within one after.

A session is a record's session id and its day (the heading it is rendered under): turns ingested
in one scope without session ids are told apart by their dates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memos.memtypes import MemoryRecord

from .ranking import Hit

__all__ = ["aggregates", "session_of", "spread_sessions"]

_EN = re.compile(
    r"\bhow\s+many\b(?!\s+(?:\w+\s+)?(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?)\s+ago\b)"
    r"|\bhow\s+much\b.*\b(?:total|in\s+all|altogether|combined|so\s+far|overall)\b"
    r"|\b(?:in\s+)?total\b|\baltogether\b|\bcombined\b|\bin\s+all\b|\bnumber\s+of\b|\bhow\s+often\b"
    r"|\ball\s+(?:the|of\s+the|of\s+my|my|of)\b|\bevery\s+time\b|\beach\s+time\b|\bso\s+far\b",
    re.IGNORECASE)
_AGO_ZH = re.compile(r"多少(?:天|周|个?星期|个?月|年|个?小时|分钟)(?:以)?前")
_ZH = re.compile(r"多少|几次|几个|几种|几家|几本|几位|一共|总共|总计|合计|共计|加起来|累计|每次|每一次|哪些|所有|全部|分别|都有|都去|都做")


def aggregates(query: str) -> bool:
    """Whether a question collects or counts over several occasions ("how many", "in total", "all
    the", "every time", "so far"; `多少`, `一共`, `每次`, `哪些`, `所有`): its answer is spread over
    sessions. "How many days ago" (`多少天前`) asks when one thing happened: not aggregating."""
    if _EN.search(query):
        return True
    return bool(_ZH.search(_AGO_ZH.sub("", query)))


def session_of(record: MemoryRecord) -> tuple[str, str, str, str]:
    """The session a record belongs to: its ids and its day (its rendered heading, else its date)."""
    day = record.render_group() or f"{record.event_time():%Y-%m-%d}"
    return (record.user_id, record.agent_id, record.session_id, day)


def spread_sessions(hits: Sequence[Hit], decay: float) -> list[Hit]:
    """`hits` re-ordered so a session's n-th hit counts `decay ** n` of its score (its best counts
    whole): one strong hit from each session comes before a second from the same one. Pure; a
    hit keeps its score, its place is what changes (`session_rank` among its parts)."""
    seen: dict[tuple[str, str, str, str], int] = {}
    keyed = []
    for order, hit in enumerate(hits):
        session = session_of(hit.record)
        rank = seen.get(session, 0)
        seen[session] = rank + 1
        hit.parts["session_rank"] = float(rank)
        keyed.append((-hit.score * decay ** rank, order, hit))
    return [hit for *_, hit in sorted(keyed, key=lambda k: (k[0], k[1]))]
