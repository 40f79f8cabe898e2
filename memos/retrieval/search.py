"""Hybrid retrieval across the typed stores: the one search every caller uses.

For each chosen store it runs a vector query and a native full-text query inside the scope
(and time / tag / status filters), concurrently, then fuses all lists by their scaled scores
(`memos.retrieval.ranking.fuse`; records in the time window the query names, if any, rise; with a
budget, the turns of a speaker the query names rise too, and the turns are matched without the
names the speakers call each other by, `memos.retrieval.speakers`), adds the
turns around the best conversation turns and, given a budget, packs the best hits into it
(`memos.retrieval.packing.pack`). Agents' active retrieval, the memory tools, the CLI and the
benchmarks all come through `search`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from memos.embeddings import TextEmbedder
from memos.store.fulltext import cjk_share, query_words
from memos.store.protocol import EVENT_TIME, RECORD, Store
from memos.store.read_cache import FORGET
from memos.store.scope import Scope, Where, valid_at
from memos.time_bounds import shift

from .aggregation import aggregates, spread_sessions
from .answer_types import expected_answer, favour_answers
from .budget_share import affordable, line_limit, priced
from .gaps import with_gaps
from .packing import pack, packed_line
from .passages import (
    PASSAGES,
    as_turn_matches,
    best_passage_form,
    lifted_turns,
    searched_with_passages,
    turn_of,
    without_repeats,
)
from .proper_names import favour_names
from .ranking import Candidate, Hit, RankingPolicy, RowView, fuse, rank_rows
from .replies import own_window, session_turns, with_replies
from .same_subject import with_same_subject
from .speakers import SpeakerTally, favour_speakers, named_speakers, without_speakers
from .temporal import parse_time_window

__all__ = ["RowView", "SearchRequest", "for_language", "fts_query", "interleave", "question_parts", "scope_speakers", "search"]

MAX_QUERY_CHARS = 4_000
SHARED = "*"
"""The job name of the shared search table's queries (their rows name their store)."""
PACKABLE_TOKENS = 8
"""A budget of B tokens is packed from the best B / 8 hits at most: a conversation turn
renders in ~30 tokens, so the deep candidate lists (`RankingPolicy.budget_candidates`) are
fused whole but only their head is built into records, measured and packed."""


def fts_query(text: str) -> str:
    """The query as plain words for the full-text index (no operators, quotes or field syntax;
    Chinese as bigrams, see `memos.store.fulltext`)."""
    return query_words(text[:MAX_QUERY_CHARS])


@dataclass(frozen=True)
class SearchRequest:
    """What to look for and where."""

    query: str
    scope: Scope
    types: Sequence[str]
    k: int = 10
    budget_tokens: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    tags: list[str] | None = None
    statuses: tuple[str, ...] = ("active",)
    policy: RankingPolicy = field(default_factory=RankingPolicy)
    replies: bool = True
    """A top-k hit that asks a question brings the reply it got, and one half of an exchange
    (statement, follow-up question, answer) the other (`memos.retrieval.replies`)."""
    empty: frozenset[str] = frozenset()
    """Stores the caller knows hold no record in `scope` with `statuses` (a chat step's counts,
    read at the step's table versions): their own queries are skipped. A store the shared
    search table covers stays in that table's queries, which it costs nothing."""
    exclude: frozenset[str] = frozenset()
    """Record ids left out of every list before it is ranked, as if they were not stored (a chat
    step's turns in context: the newest may be committing while the step searches)."""


async def search(
    storage: Store,
    embedder: TextEmbedder | None,
    request: SearchRequest,
    now: datetime,
    count_tokens: Callable[[str], int],
) -> list[Hit]:
    """Ranked hits for `request`; with a budget, only those that fit it."""
    if request.budget_tokens is not None and request.policy.passages:  # the passages of long turns find them (memos.retrieval.passages)
        turn_store = next((name for name in request.types if storage.type_table(name).record_type.holds_turns), None)
        request = replace(request, types=searched_with_passages(request.types, turn_store, storage.memory_types()))
    per_list = max(2 * request.k, 20, (request.budget_tokens or 0) // 15)  # enough candidates to fill the budget
    if request.budget_tokens is not None:  # and deep enough lists to fuse well (README, entity graph)
        per_list = max(per_list, request.policy.budget_candidates)
    # A top-k search reads only what ranking needs and builds the k winners afterwards: from the
    # record each shared-table row carries, or from their own store's rows read by id (reading
    # every column of every candidate was a third of a query's time); packing a budget may reach
    # far down the list, so a budgeted search reads candidates whole.
    lean = request.budget_tokens is None
    parts = question_parts(request.query)
    # a lean read takes a candidate's text too when the question asks for a kind of answer (a
    # time, a number, a title): favouring the hits that carry one reads it (memos.retrieval.answer_types)
    with_text = lean and request.policy.answer_weight > 0 and any(map(expected_answer, [request.query, *parts]))
    wheres: dict[str, str | None] = {}
    known = {name: storage.known_rows(name) for name in request.types}  # no read for a table already seen
    unknown = [name for name, has in known.items() if has is None]
    known |= dict(zip(unknown, await asyncio.gather(*(storage.has_rows(name) for name in unknown)), strict=True))
    # In a top-k search the stores the shared search table mirrors (every store searched by
    # default, the vault without its secrets) are searched there: one vector and one full-text
    # query for all of them, whose rows carry the records (memos.store.lancedb.search_index); the others with
    # their own queries. A budgeted search keeps its per-store lists: through the shared table
    # it had to read the head of its fused list by id afterwards (up to budget / 8 rows), which
    # cost more than the queries it saved (docs/benchmarks.md).
    shared = [n for n in request.types if known[n] and lean and storage.search.usable and storage.search.covers(n)
              and not _as_of(storage, request, n)]
    # the store filter is left out of the shared queries when it would keep every row anyway:
    # every store the table mirrors is searched there or holds no row at all (a row that lands in
    # one meanwhile is of a store the request names); rows the indexes do not cover yet (a chat's
    # newest) are filtered column by column, and this one costs each query a little
    whole = all(n in shared or (n in known and not known[n] and not _as_of(storage, request, n)) for n in storage.search.types)
    known |= {name: False for name in request.empty if name in known and name not in shared}
    searched = [n for n in request.types if known[n]]
    for name in searched:
        table = storage.type_table(name)
        conditions = (
            Where(request.scope)
            .status_in(request.statuses)
            .time_range(table.record_type.time_field, request.since, request.until)
            .tags_any(request.tags)
        )
        if request.until is not None and getattr(table.record_type, "bitemporal", False):
            conditions.raw(valid_at(request.until))  # a closed relation was true only until it closed
        wheres[name] = conditions.build()
    named = request.since is None and request.until is None and request.policy.time_weight
    window = parse_time_window(request.query, now) if named else None  # explicit since/until already filter
    turns = next((name for name in request.types if storage.type_table(name).record_type.holds_turns), None)
    # with a budget, the turns are matched against the query less the names the speakers are
    # called by (memos.retrieval.speakers): who said a turn is its actor, weighed by the speaker multiplier
    speakers = (await scope_speakers(storage, request.scope, turns)
                if request.budget_tokens is not None and request.policy.addressed_share <= 1 and turns in searched else None)

    lift = PASSAGES in searched  # a passage's match is its turn's (memos.retrieval.passages)
    best_passages: dict[str, RowView] = {}

    async def ranked(query: str) -> list[Hit]:
        """The fused hits of one query text (the request's, or one part of a question in parts)."""
        turn_query = query
        if speakers is not None:
            called = {s for s in named_speakers(query, set(speakers.said)) if speakers.addressed(s) >= request.policy.addressed_share}
            turn_query = without_speakers(query, called)
        needed = {turn_query} if turns in searched else set()
        if shared or any(name not in (turns, PASSAGES) for name in searched):
            needed.add(query)
        wanted = [q for q in needed if embedder and q.strip()]
        texts = {q: fts_query(q) for q in needed | {query}}  # the full-text forms, worked out once
        text = texts[query]
        own = {name: turn_query if name in (turns, PASSAGES) else query for name in searched}  # a passage is part of a turn
        columns = {name: RowView.columns(storage.type_table(name).record_type.time_field, with_text) if lean else None
                    for name in searched}
        if shared:
            conditions = (Where(request.scope).status_in(request.statuses).time_range(EVENT_TIME, request.since, request.until)
                          .tags_any(request.tags))
            if not whole:
                conditions.any_of("memory_type", shared)
            where = conditions.condition()
            limit = per_list * len(shared)  # as many candidates as the per-store lists gave together
        with storage.behind.excused(request.exclude):  # queued rows of excluded records may stay queued
            # the full-text queries need no vector: they run while the query is embedded
            early: dict[str, asyncio.Future[list[Any]]] = {
                name: asyncio.ensure_future(storage.text_search(name, texts[own[name]], wheres[name], per_list, columns[name]))
                for name in searched if name not in shared and texts[own[name]]}
            if shared and text:
                early[SHARED] = asyncio.ensure_future(storage.search.text_search(text, where, limit, with_text=with_text,
                                                                                      test=conditions.test()))
            try:
                found = await asyncio.gather(*(embedder.embed_query(q[:MAX_QUERY_CHARS]) for q in wanted)) if embedder else []
            except BaseException:
                for task in early.values():
                    task.cancel()
                await asyncio.gather(*early.values(), return_exceptions=True)
                raise
            vectors: dict[str, list[float]] = dict(zip(wanted, found, strict=True))
            vector = vectors.get(query)
            jobs: list[tuple[str, str, Awaitable[list[Any]]]] = []  # (store, source, its rows; the graph's: candidates)
            for name in searched:
                if name in shared:
                    continue
                if (own_vector := vectors.get(own[name])) is not None:
                    jobs.append((name, "vector", storage.vector_search(name, own_vector, wheres[name], per_list, columns[name])))
                if name in early:
                    jobs.append((name, "text", early[name]))
            if shared:
                if vector is not None:
                    jobs.append((SHARED, "vector", storage.search.vector_search(vector, where, limit, with_text=with_text,
                                                                                test=conditions.test())))
                if SHARED in early:
                    jobs.append((SHARED, "text", early[SHARED]))
            if "entity" in storage.memory_types() and request.policy.graph_weight > 0:
                jobs.append(("", "graph", _graph_list(storage, embedder, replace(request, query=query), vector, text, wheres,
                                                      RowView.columns("occurred_at", with_text) if lean else None)))
            lists = await asyncio.gather(*(job for _, _, job in jobs))
        if request.exclude:
            lists = [[r for r in rows if (r.record.id if source == "graph" else r["id"]) not in request.exclude
                      and (source == "graph" or r.get("turn_id") not in request.exclude)]  # nor the passages of those turns
                     for (_, source, _), rows in zip(jobs, lists, strict=True)]
        views: dict[tuple[str, str], RowView] = {}  # a row both queries returned is read once
        candidates: list[Candidate] = []
        for (name, source, _), rows in zip(jobs, lists, strict=True):
            if source == "graph":
                candidates.extend(rows)
            elif name == SHARED:
                candidates.extend(_shared_candidates(rows, source, views, per_list))
            else:
                candidates.extend(rank_rows(name, rows, source, _viewer(views, name, storage.type_table(name).record_type.time_field)))
        if lift and turns is not None:
            candidates = as_turn_matches(candidates, turns, best_passages)
        hits = fuse(candidates, for_language(request.policy, query, embedder), now, window, depth=per_list)
        if request.budget_tokens is not None:  # a budgeted search has its candidates' rows (speakers, words) at hand
            hits = favour_speakers(hits, query, request.policy.speaker_weight)
            return favour_names(hits, query, request.policy.name_weight)
        # a top-k search favours the hits that carry the kind of answer asked for (a budgeted one
        # measured no gain from it: docs/languages.md)
        return favour_answers(hits, query, request.policy.answer_weight)

    # a question in parts ("where did he propose, and in which city is the wedding?") is searched
    # whole and part by part; the lists are interleaved, so each part's best hits are near the top
    hits = interleave(await asyncio.gather(*(ranked(q) for q in [request.query, *parts]))) if parts else await ranked(request.query)
    if request.budget_tokens is not None:
        hits = hits[: max(request.k, request.budget_tokens // PACKABLE_TOKENS)]
    # Records are built only for the hits that can be returned: those a budget can reach when
    # packing one, the first k (their rows taken now) otherwise.
    hits = await _taken(storage, hits[: request.k], wheres) if lean else hits
    if lift and turns is not None:
        hits = await lifted_turns(storage, request.scope, request.statuses, turns, hits)
    for hit in hits:
        if isinstance(hit.record, RowView):
            hit.record = storage.type_table(hit.memory_type).to_record(hit.record.row)
    if lift and turns is not None and request.budget_tokens is not None:
        hits = best_passage_form(storage, hits, best_passages, turns, request.budget_tokens, count_tokens,
                                 request.policy.passage_whole_share)
    if request.budget_tokens is not None:  # a hit over its share of the budget must score more (memos.retrieval.budget_share)
        hits = priced(hits, _line_limit(request), count_tokens)
    if request.budget_tokens is not None and request.policy.session_spread < 1 and aggregates(request.query):
        hits = spread_sessions(hits, request.policy.session_spread)  # coverage across sessions first
    if request.budget_tokens is not None and turns in wheres:
        hits = await _second_round(storage, request, hits, turns, wheres)
    stretches: list[list[Any]] = []
    if request.policy.neighbours and turns is not None:
        hits, stretches = await _with_neighbours(storage, request, hits, turns, count_tokens)
    if request.budget_tokens is not None:
        hits = without_repeats(hits) if PASSAGES in request.types else hits
        gap = request.policy.gap_tokens
        return pack(hits, request.budget_tokens, count_tokens,  # an excerpt without holes (memos.retrieval.gaps)
                    replan=lambda ranked, kept: with_gaps(ranked, kept, stretches, turns or "",
                                                          lambda hit: count_tokens(packed_line(hit.record)), gap)
                    if stretches and turns is not None and gap > 0 else None)
    if request.replies and turns is not None:  # a question its reply, an exchange its other half (memos.retrieval.replies)
        return await with_replies(storage, request.scope, request.statuses, request.policy.neighbour_window_minutes,
                                  hits[: request.k], turns)
    return hits[: request.k]


async def _graph_list(storage: Store, embedder: TextEmbedder | None, request: SearchRequest, vector: list[float] | None,
                      text: str, wheres: dict[str, str | None], columns: list[str] | None) -> list[Candidate]:
    """The entity graph's list (records linked to the query's entities; `memos.graph.entities`), with the
    query's own vector, embedded here when only the turns' was needed so far and the graph has
    entities."""
    from memos.graph.entities import graph_candidates

    if not await storage.has_rows("entity"):
        return []
    if vector is None and embedder is not None and request.query.strip():
        vector = await embedder.embed_query(request.query[:MAX_QUERY_CHARS])
    return await graph_candidates(storage, request, vector, text, wheres, columns)


async def scope_speakers(storage: Store, scope: Scope, turns: str) -> SpeakerTally:
    """Who speaks in `scope`'s turns and how often the others call them by name (any status):
    one read of who said what per version of the turns table, remembered in `storage.reads` and
    carried past this process's own adds; another process's commit makes it read again."""
    version = await storage.version(turns)
    if storage.reads.seen.get(turns) != version:
        storage.reads.check({turns: version})
    key = ("speakers", turns, scope)
    found = storage.reads.get(key)
    if found is not FORGET:
        return found
    at = await storage.label(turns)
    said = _said_column(storage, turns)
    found = await storage.columns(turns, Where(scope).build(), ["actor", said])
    tally = SpeakerTally.of(found["actor"], found[said])
    storage.reads.put(key, turns, tally, _tally_added(scope, said), at=at)
    return tally


def _said_column(storage: Store, turns: str) -> str:
    """The column holding what a turn said: `summary` for an `Episode`, else the indexed text."""
    return "summary" if "summary" in storage.type_table(turns).record_type.model_fields else "text"


def _tally_added(scope: Scope, said: str) -> Callable[[SpeakerTally, Sequence[dict]], Any]:
    def rule(tally: SpeakerTally, added: Sequence[dict]) -> Any:
        mine = [(r.get("actor") or "", r.get(said) or "") for r in added
                if scope.contains(r["user_id"], r["agent_id"], r["session_id"])]
        counted = tally.plus(mine)
        return FORGET if counted is None else counted
    return rule


_PART_BREAK = re.compile(r"(?<=[?？；;，])\s*")
MIN_PART_CHARS = 4
"""A part shorter than this (in characters, after trimming) is not searched on its own."""


def question_parts(query: str) -> list[str]:
    """The parts of a question asked in several (`暑假豆豆寄养在谁家？这个人后来做了什么手术？`,
    `李明在哪里求婚，婚礼在哪个城市办？`): split after ?, ？, ；, ; and the Chinese comma ，, each
    part long enough to search on its own and each a question or a clause of one (a trailing
    instruction such as "Answer yes or no." is not a part); none for a question in one part."""
    parts = [p.strip() for p in _PART_BREAK.split(query[:MAX_QUERY_CHARS]) if p.strip()]
    if len(parts) < 2 or any(p[-1] not in "?？；;，" for p in parts):
        return []
    return parts if all(len(p[:-1].strip()) >= MIN_PART_CHARS for p in parts) else []


def interleave(lists: Sequence[list[Hit]]) -> list[Hit]:
    """One list from several ranked ones: the first of each, then the second of each, ...; a
    record met again keeps its first place."""
    out: list[Hit] = []
    seen: set[tuple[str, str]] = set()
    for rank in range(max(map(len, lists), default=0)):
        for hits in lists:
            if rank < len(hits) and (key := (hits[rank].memory_type, hits[rank].id)) not in seen:
                seen.add(key)
                out.append(hits[rank])
    return out


def _shared_candidates(rows: list[dict], source: str, views: dict[tuple[str, str], RowView], depth: int) -> list[Candidate]:
    """Candidates from one shared-table list, ranked within their own store as the per-store
    lists were (a row a repair left twice counts once); of a full-text list, the first `depth`
    of each store.

    `memos.retrieval.ranking.fuse` scales a store's full-text scores by its first `depth` rows, so a row
    ranked lower adds 0 to a fused score and is left out: the shared list reads `depth` rows
    per store, most of them one store's, and making candidates of all of them was half of a
    top-30 search's ranking. A vector list is scaled over every store's rows
    at once, so a lower-ranked row of one store may still score: it is kept whole."""
    limit = depth if source == "text" else len(rows)
    by_store: dict[str, list[dict]] = {}
    seen: set[tuple[str, str]] = set()
    for row in rows:
        key = (row["memory_type"], row["id"])
        if key not in seen:
            seen.add(key)
            kept = by_store.setdefault(row["memory_type"], [])
            if len(kept) < limit:
                kept.append(row)
    out: list[Candidate] = []
    for name, store_rows in by_store.items():
        out.extend(rank_rows(name, store_rows, source, _viewer(views, name, EVENT_TIME)))
    return out


def _viewer(views: dict[tuple[str, str], RowView], name: str, time_field: str) -> Callable[[dict], RowView]:
    """The view of a row of store `name`, made once per row for all the lists that return it."""
    def view(row: dict) -> RowView:
        key = (name, row["id"])
        return views.get(key) or views.setdefault(key, RowView.of(row, time_field))
    return view


def for_language(policy: RankingPolicy, query: str, embedder: TextEmbedder | None) -> RankingPolicy:
    """`policy` with an English-only embedder's list weighed by the query's non-CJK share: the
    default MiniLM's vectors of a Chinese query are mostly noise, which pulled the hybrid top-3
    on the Chinese set below full-text alone (0.526 vs 0.667; see README "Languages"). An
    English query, and any embedder not marked `english_only`, keep the policy as it is."""
    share = cjk_share(query) if embedder is not None and embedder.english_only else 0.0
    return replace(policy, vector_weight=policy.vector_weight * (1.0 - share)) if share else policy


async def _taken(storage: Store, hits: list[Hit], wheres: dict[str, str | None]) -> list[Hit]:
    """The hits with their full rows: a hit of the shared search table from the record its row
    carries (`memos.store.lancedb.search_index.RECORD`, no read), any other read from its own store (one read
    per store, concurrently); a hit whose record was deleted since the search is dropped."""
    for hit in hits:
        if (view := _lean(hit)) is not None and view.row.get(RECORD) is not None:
            view.row = storage.search.typed_row(hit.memory_type, view.row[RECORD])
    stores = list(dict.fromkeys(hit.memory_type for hit in hits if _lean(hit)))
    taken = await asyncio.gather(*(
        storage.take(name, [view.row for hit in hits if hit.memory_type == name and (view := _lean(hit))], wheres[name])
        for name in stores))
    rows = {(name, row["id"]): row for name, store_rows in zip(stores, taken, strict=True) for row in store_rows}
    kept = []
    for hit in hits:
        view = _lean(hit)
        if view is None:  # a graph relation, or a row a budgeted search read whole
            kept.append(hit)
            continue
        row = rows.get((hit.memory_type, hit.id))
        if row is not None:
            view.row = row
            kept.append(hit)
    return kept


def _as_of(storage: Store, request: SearchRequest, name: str) -> bool:
    """Whether a store is searched as of `until` with its own queries: a bitemporal store (a closed
    relation was true only until it closed), which the shared table's rows cannot say."""
    return request.until is not None and getattr(storage.type_table(name).record_type, "bitemporal", False)


def _lean(hit: Hit) -> RowView | None:
    """The view of a hit known only by the ranking columns of its row (its full row still to be
    read), else None."""
    record = hit.record
    return record if isinstance(record, RowView) and "user_id" not in record.row else None


async def _second_round(storage: Store, request: SearchRequest, hits: list[Hit], turns: str,
                        wheres: dict[str, str | None]) -> list[Hit]:
    """The turns about the best turns' subjects from other sessions, behind them, newest first
    (`memos.retrieval.same_subject`): one anchor per `subject_budget_tokens` of the budget."""
    policy = request.policy
    anchors = min(policy.subject_anchors, (request.budget_tokens or 0) // max(1, policy.subject_budget_tokens))
    if anchors <= 0 or policy.subject_matches <= 0:
        return hits
    return await with_same_subject(storage, wheres[turns], turns, hits, anchors, policy.subject_matches,
                                   policy.subject_min_similarity, request.exclude)


def _line_limit(request: SearchRequest) -> float | None:
    """The most tokens one line may cost in this budgeted search (`memos.retrieval.budget_share`)."""
    policy = request.policy
    return line_limit(request.budget_tokens or 0, policy.budget_share, policy.budget_line_cap, policy.budget_line_floor)


async def _with_neighbours(storage: Store, request: SearchRequest, hits: list[Hit], turns_store: str,
                           count_tokens: Callable[[str], int]) -> tuple[list[Hit], list[list[Any]]]:
    """Put the turn before and after each of the best turns right behind it (one extra query),
    each that costs at most `RankingPolicy.budget_share` of the budget (context the budget affords);
    and the stretches of conversation read for it (each best turn's window, in order)."""
    policy = request.policy
    if request.budget_tokens is None:  # a top-k search returns k records, not context around them
        return hits, []
    count = min(policy.neighbours, request.budget_tokens // max(1, policy.neighbour_budget_tokens))
    anchors = [h for h in hits if (h.memory_type == turns_store and getattr(h.record, "event_type", "") == "message")
               or h.memory_type == PASSAGES][:count]  # a passage stands for its turn
    if not anchors:
        return hits, []
    reach = timedelta(minutes=policy.neighbour_window_minutes)
    limit = _line_limit(request)
    by_session = await session_turns(storage, request.scope, request.statuses, turns_store,
                                     [(shift(a.record.event_time(), -reach), shift(a.record.event_time(), reach)) for a in anchors])
    extra: dict[str, list[Hit]] = {}
    stretches: list[list[Any]] = []
    for anchor in anchors:
        turns = by_session.get((anchor.record.user_id, anchor.record.agent_id, anchor.record.session_id), [])
        stretches.append(own_window(by_session, anchor.record, reach))
        ids = [t.id for t in turns]
        if turn_of(anchor) not in ids:
            continue
        at = ids.index(turn_of(anchor))
        for record in (turns[at - 1] if at > 0 else None, turns[at + 1] if at + 1 < len(turns) else None):
            if record is None:
                continue
            neighbour = Hit(turns_store, record, anchor.score, {"neighbour_of": 1.0})
            if affordable(neighbour, limit, count_tokens):
                extra.setdefault(anchor.id, []).append(neighbour)
    out: list[Hit] = []
    seen: set[str] = set()
    found = {hit.id: hit for hit in hits}
    for hit in hits:
        if hit.id in seen:
            continue
        out.append(hit)
        seen.add(hit.id)
        for neighbour in extra.get(hit.id, []):
            if neighbour.id not in seen:
                if neighbour.id in found:  # a hit in its own right keeps why it ranked (its parts)
                    found[neighbour.id].parts["neighbour_of"] = 1.0
                    neighbour = found[neighbour.id]
                out.append(neighbour)
                seen.add(neighbour.id)
    return out, stretches
