"""Pure ranking: fuse ranked candidate lists and weigh them by recency and importance.

No I/O here. `memos.retrieval.search` runs the queries and hands their ranked rows to `fuse`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from memos.memtypes import MemoryRecord

from .temporal import TimeWindow

__all__ = ["Candidate", "Hit", "RankingPolicy", "RowView", "boosted", "fuse", "rank_rows"]


@dataclass(frozen=True)
class RankingPolicy:
    """Knobs of the fused score. Defaults are tuned on half of a benchmark's dev split and checked
    on the other half (docs/benchmarks.md)."""

    fusion: Literal["score", "rrf"] = "score"
    """How the dense and full-text lists combine. "score": a weighted sum of each list's scores
    scaled to 0-1 (min-max over its candidates; a record missing from a list scores 0 there).
    "rrf": reciprocal-rank fusion, which ignores how far apart the scores are."""
    vector_weight: float = 0.5
    """Weight of the dense (embedding) list in the fusion."""
    text_weight: float = 0.5
    """Weight of the full-text (BM25) list in the fusion."""
    vector_min_spread: float = 0.2
    """Scaling the vector list never stretches a cosine gap smaller than this to the full 0-1
    range: among three candidates 0.14, 0.13 and 0.12 apart, the last is not scored 0."""
    rrf_k: float = 60.0
    """Reciprocal-rank-fusion constant (fusion="rrf"): larger flattens the top ranks' lead."""
    importance_weight: float = 0.2
    """Multiplier 1 + w * (importance - 0.5): important records rise, trivial ones sink."""
    recency_weight: float = 0.1
    """Multiplier 1 + w * 2^(-age / half_life): recent records get a small lift."""
    recency_half_life_days: float = 30.0
    time_weight: float = 1.0
    """Multiplier 1 + w for records inside the time window the query names ("in May 2023",
    "the week before August 3"; see `memos.retrieval.temporal`). A boost, never a filter."""
    neighbours: int = 8
    """At most this many of the best conversation turns bring the turn before and after them
    along (the question a reply answers, the answer a question got) in budgeted searches;
    0 turns it off."""
    neighbour_budget_tokens: int = 500
    """With a token budget, one best turn brings its neighbours per this many tokens (a small
    budget is better spent on more hits than on context). 500 since named speakers are
    favoured: the reply a favoured turn got, from the other speaker, comes along at 500 too."""
    gap_tokens: int = 25
    """With a token budget, a turn said between two packed turns (read with the neighbours) is
    packed right behind the later of them when its line costs at most this many tokens: the short
    reply or question they frame (`memos.retrieval.gaps`). 0 turns it off."""
    neighbour_window_minutes: float = 30.0
    """How far apart two turns of one session can be and still be neighbours."""
    graph_weight: float = 0.3
    """Weight of the entity-graph list (records linked to the entities the query names, and
    their relations; see `memos.graph.entities`) in the fusion; 0 turns it off."""
    graph_hops: int = 2
    """1: the query's entities only; 2: also the entities their relations reach."""
    graph_max_share: float = 0.1
    """An entity mentioned in more than this share of the linked records (the two speakers of a
    conversation) says too little to link by."""
    graph_max_records: int = 2_000
    """At most this many linked records are searched within (the most specific links first)."""
    speaker_weight: float = 1.0
    """Multiplier 1 + w for the turns of a speaker the query names, in budgeted searches, when
    the hits have other speakers too (`memos.retrieval.speakers`); 0 turns it off."""
    answer_weight: float = 0.5
    """Multiplier 1 + w, in top-k searches, for the hits whose text carries the kind of answer the
    query asks for: a time for "when" (`什么时候`), a number for "how many / how long" (`多少`,
    `多久`), a quoted title for a book, song or film (`memos.retrieval.answer_types`); 0 turns it off."""
    name_weight: float = 1.0
    """Multiplier 1 + w, in budgeted searches for a question that asks for a name (who, where, "the
    names of", `谁`, `哪里`, `叫什么`), for the hits whose own words say a name other than the
    speakers' (`memos.retrieval.proper_names`); 0 turns it off."""
    addressed_share: float = 0.1
    """In budgeted searches, the conversation turns are searched (vector and full-text) without
    the names of the speakers the query names that the other speakers call them by, in at least
    this share of their turns (`memos.retrieval.speakers`): who said a turn is weighed by `speaker_weight`,
    and a name said to someone tells nothing of what a turn is about. Other stores (facts about
    a person) get the query as it is; above 1 turns it off."""
    session_spread: float = 1.0
    """In budgeted searches for a question that collects or counts across sessions ("how many",
    `一共`; `memos.retrieval.aggregation`), a session's n-th hit ranks as if it scored this to the
    n-th power of its score: one strong hit per session before more of one. 1 (the default)
    turns it off: where a session's best hit is the long reply and the fact is in the turn it
    answers, spreading pushed the fact below other sessions' replies (docs/benchmarks.md)."""
    subject_anchors: int = 0
    """In budgeted searches, at most this many of the best turns (one per session) bring the turns
    about the same subject from other sessions (`memos.retrieval.same_subject`), one anchor per
    `subject_budget_tokens`. 0 (the default) turns it off: with 3 it found both values of updated
    facts more often but lost as many other questions at some budgets (docs/benchmarks.md)."""
    subject_budget_tokens: int = 1000
    """One anchor of the same-subject round per this many tokens of budget: below it, none (a
    small budget is better spent on the first round's best hits)."""
    subject_matches: int = 2
    """At most this many same-subject turns join each anchor."""
    subject_min_similarity: float = 0.5
    """The cosine a turn of another session needs with an anchor to count as about its subject."""
    passages: bool = True
    """Budgeted searches search the passages of long turns too (`memos.retrieval.passages`): a
    passage that matches finds its turn, and a small budget can pack the passage alone."""
    passage_whole_share: float = 0.15
    """A long turn found by one of its passages is packed whole when it costs at most this share
    of the budget, else as its best passage (0.15 measured better than 0.25 and 0.5:
    docs/benchmarks.md)."""
    budget_share: float = 0.15
    """In budgeted searches, a hit whose line costs more than this share of the budget (or more
    than `budget_line_cap` tokens) ranks at its score × that limit / its cost, and a turn around
    a hit comes along only within the limit (`memos.retrieval.budget_share`): a small budget
    buys more, smaller hits instead of one long reply. 1 turns it off (docs/benchmarks.md)."""
    budget_line_cap: float | None = 150
    """The most tokens a line may cost before it is priced down, whatever the budget: without
    it a large budget's share (600 tokens of 4000) let long replies, and the replies around
    each hit, fill it again."""
    budget_line_floor: float = 75
    """The fewest tokens the limit of `budget_share` comes to, whatever the budget: at 200 tokens
    15% is 30, the size of an ordinary turn, and pricing those lost a sixth of LOCOMO's questions."""
    budget_candidates: int = 400
    """A budgeted search fuses at least this many candidates of each list (vector, full-text):
    shallow lists leave a record found by one list but just below the other's cut-off with
    nothing from that list, and starve the speaker multiplier of the named speaker's turns."""


@dataclass(frozen=True)
class Candidate:
    """A row returned by one of the searches, with its rank (0 = best) in that list."""

    memory_type: str
    record: MemoryRecord | RowView
    """The record, or (a lean search) the view of its row that ranking reads."""
    source: str  # "vector", "text" or "graph"
    rank: int
    score: float = 0.0
    """The list's own score: cosine similarity (vector) or BM25 (text); higher is better."""


@dataclass
class Hit:
    """One search result: a record, the store it came from and why it ranked where it did."""

    memory_type: str
    record: MemoryRecord
    """The record. Inside a lean search a `RowView` stands in for it until the hits that can be
    returned have their rows read (`memos.retrieval.search`); a search returns records only."""
    score: float
    parts: dict[str, float] = field(default_factory=dict)
    text: str = ""
    """The record as rendered into a prompt."""
    tokens: int = 0
    """Tokens of `text` for the serving model (set when packed)."""
    attached: list[Hit] = field(default_factory=list)
    """The turns that complete this one in a top-k search: the reply it got (`reply_to` in
    their parts), the other half of its exchange (`exchange`), the turn it refers back to
    (`refers_to`); part of this hit, not counted against k (`memos.retrieval.replies`)."""

    @property
    def id(self) -> str:
        return self.record.id

    def lines(self) -> list[str]:
        """The hit as text: its record, then each attached turn on a line of its own marked `↳`."""
        return [self.text or self.record.render(), *(f"  ↳ {a.record.render()}" for a in self.attached)]

    @property
    def source_ids(self) -> list[str]:
        return list(self.record.source_ids)


def boosted(hits: Sequence[Hit], chosen: Callable[[Hit], bool], weight: float, part: str) -> list[Hit]:
    """`hits` with the `chosen` ones scored (1 + weight) times higher and marked with `part`, best
    first again (ties by record id); in their order when none is chosen. A boost, never a filter:
    the speaker, answer-kind and name multipliers (`memos.retrieval.speakers`, `answer_types`,
    `proper_names`)."""
    changed = False
    for hit in hits:
        if chosen(hit):
            hit.score *= 1.0 + weight
            hit.parts[part] = 1.0
            changed = True
    return sorted(hits, key=lambda hit: (-hit.score, hit.record.id)) if changed else list(hits)


def fuse(candidates: Sequence[Candidate], policy: RankingPolicy, now: datetime, window: TimeWindow | None = None,
         depth: int | None = None) -> list[Hit]:
    """Merge candidates by record, score them and return hits best-first (ties by record id).

    Records whose time falls in `window` (the time the query names) are boosted.

    Each list's scores are scaled to 0-1 before they are weighed: vector similarities over all
    vector candidates (cosine is comparable across stores), BM25 scores per store (its term
    statistics are not). With `depth`, the scale is set by each store's best `depth` candidates
    of a list, as a per-store query that deep would have read them, however many were read (see
    `_scaled`)."""
    merged: dict[tuple[str, str], Hit] = {}
    scaled = _scaled(candidates, policy.vector_min_spread, depth)
    for cand, value in zip(candidates, scaled, strict=True):
        key = (cand.memory_type, cand.record.id)
        hit = merged.get(key)
        if hit is None:
            # a RowView stays a stand-in until search reads the winners' rows (see Hit.record)
            hit = merged[key] = Hit(cand.memory_type, cast(MemoryRecord, cand.record), 0.0, {"fused": 0.0})
        weight = {"vector": policy.vector_weight, "graph": policy.graph_weight}.get(cand.source, policy.text_weight)
        part = 1.0 / (policy.rrf_k + cand.rank + 1) if policy.fusion == "rrf" else value
        hit.parts["fused"] += weight * part
        hit.parts.setdefault(f"{cand.source}_rank", float(cand.rank))
        hit.parts.setdefault(f"{cand.source}_score", cand.score)
    for hit in merged.values():
        age_days = max(0.0, (now - hit.record.event_time()).total_seconds() / 86400.0)
        recency = math.pow(2.0, -age_days / policy.recency_half_life_days)
        hit.parts["recency"] = recency
        hit.parts["importance"] = hit.record.importance
        in_window = window is not None and hit.record.event_time() in window
        if in_window:
            hit.parts["in_time_window"] = 1.0
        hit.score = (
            hit.parts["fused"]
            * (1.0 + policy.importance_weight * (hit.record.importance - 0.5))
            * (1.0 + policy.recency_weight * recency)
            * (1.0 + policy.time_weight * in_window)
        )
    return sorted(merged.values(), key=_order)


def _scaled(candidates: Sequence[Candidate], vector_min_spread: float = 0.0, depth: int | None = None) -> list[float]:
    """Each candidate's score min-max scaled within its list (all vector candidates form one
    list, whose range is at least `vector_min_spread`; text candidates one list per store). A
    list whose scores are all equal scales to 1.

    With `depth`, the bounds come from the candidates ranked within the first `depth` of their
    own store (`Candidate.rank`), and one ranked lower scales to 0 at most (to 0 also when those
    first `depth` all score the same: a list that deep would not have read it). Min-max scaling
    depends on how deep a list was read: the shared search table's query reads `depth` rows for
    every store with records in the scope, so one vault item in a scope made its turns' lists
    twice as deep and re-ranked them (the demo's "What restaurant did Noor find for her
    sister?" lost its answer); the bounds are now those of per-store lists `depth` deep, as
    before the vault was mirrored."""
    bounds: dict[tuple[str, str], tuple[float, float]] = {}
    for cand in candidates:
        if depth is not None and cand.rank >= depth:
            continue
        lo, hi = bounds.get(_list_of(cand), (math.inf, -math.inf))
        bounds[_list_of(cand)] = (min(lo, cand.score), max(hi, cand.score))
    if _VECTORS in bounds:
        lo, hi = bounds[_VECTORS]
        bounds[_VECTORS] = (min(lo, hi - vector_min_spread), hi)
    out = []
    for cand in candidates:
        lo, hi = bounds.get(_list_of(cand), (cand.score, cand.score))
        if depth is not None and cand.rank >= depth and not hi > lo:  # below a head of equal scores
            out.append(0.0)
        else:
            out.append(max(0.0, (cand.score - lo) / (hi - lo)) if hi > lo else 1.0)
    return out


_VECTORS = ("", "vector")


def _list_of(cand: Candidate) -> tuple[str, str]:
    """The list a candidate's score is scaled in: one for all vector hits, one per store's text hits."""
    return _VECTORS if cand.source == "vector" else (cand.memory_type, cand.source)


def _order(hit: Hit) -> tuple[float, str]:
    return (-hit.score, hit.record.id)


def rank_rows(memory_type: str, rows: list[dict[str, Any]], source: str,
              to_record: Callable[[dict[str, Any]], MemoryRecord | RowView]) -> list[Candidate]:
    """Turn one query's rows (already in rank order) into candidates with their scores."""
    return [Candidate(memory_type, to_record(row), source, rank, _row_score(row, source)) for rank, row in enumerate(rows)]


def _row_score(row: dict[str, Any], source: str) -> float:
    if source == "vector":
        return 1.0 - float(row.get("_distance", 1.0))  # cosine distance -> similarity
    return float(row.get("_score", 0.0))


@dataclass(slots=True)
class RowView:
    """What ranking reads of a stored record (id, importance, time), straight from its row:
    building the full record is left until a hit is known to be returned."""

    id: str
    importance: float
    time: datetime
    row: dict[str, Any]

    @staticmethod
    def columns(time_field: str, with_text: bool = False) -> list[str]:
        """The columns `of` reads: all a lean search needs of a candidate (and its indexed
        `text`, for a query asking for a kind of answer: `memos.retrieval.answer_types`)."""
        return list(dict.fromkeys(["id", "importance", time_field, "created_at", *(["text"] if with_text else [])]))

    @classmethod
    def of(cls, row: dict[str, Any], time_field: str) -> RowView:
        when = row.get(time_field) or row["created_at"]
        importance = row.get("importance")
        return cls(row["id"], 0.5 if importance is None else float(importance), when, row)

    def event_time(self) -> datetime:
        return self.time
