"""Passages in a budgeted search: a long turn's passages find it, one form of it is packed.

A long turn is stored whole and as passages (`memos.passages`). A budgeted search of the turns
searches the passages too (`searched_with_passages`, when `RankingPolicy.passages` is on). A
passage does not compete with its turn: its match counts as its turn's in each list before the
lists are fused (`as_turn_matches`), and a turn so found is packed whole within
`RankingPolicy.passage_whole_share` of the budget, else as that passage (`best_passage_form`).
A turn that stood in for a passage is read whole after ranking (`lifted_turns`): one no longer
found (deleted, superseded, outside the statuses asked for) is dropped. A passage stands for its
turn in the turns around it (`turn_of`) and is dropped where its whole turn is packed too
(`without_repeats`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from memos.store.protocol import Store
from memos.store.scope import Scope, Where, sql_in

from .ranking import Candidate, Hit, RowView

__all__ = ["PASSAGES", "as_turn_matches", "best_passage_form", "lifted_turns", "searched_with_passages", "turn_of",
           "without_repeats"]

PASSAGES = "passage"
"""The store of the passages of long turns (`memtypes.passage`)."""


def searched_with_passages(types: Sequence[str], turns: str | None, stores: Sequence[str]) -> list[str]:
    """`types` plus the passage store, right after the turns' store, when the turns are searched
    and the passage store exists (`stores`: those of the open memory)."""
    if turns is None or turns not in types or PASSAGES in types or PASSAGES not in stores:
        return list(types)
    at = list(types).index(turns) + 1
    return [*types[:at], PASSAGES, *types[at:]]


def turn_of(hit: Hit) -> str:
    """The id of the turn `hit` stands for: its own, or its turn's for a passage."""
    return str(getattr(hit.record, "turn_id", "")) if hit.memory_type == PASSAGES else hit.id


def without_repeats(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` less each passage whose whole turn is among them too, and less a whole turn whose
    passage came first (a neighbour brought it): the words are packed once, where they ranked."""
    out: list[Hit] = []
    seen: set[str] = set()
    for hit in hits:
        turn = turn_of(hit)
        if turn in seen:
            continue
        seen.add(turn)
        out.append(hit)
    return out


def as_turn_matches(candidates: Sequence[Candidate], turns: str, best: dict[str, RowView]) -> list[Candidate]:
    """The passage candidates as matches of their turns: in each
    list (vector, full text) a turn keeps the better of its own match and its passages' best
    (cosines, and BM25 scores, compared as read), so a passage lifts its turn instead of taking
    a place beside it. `best` gets each matched turn's best passage (by cosine, else BM25)."""
    out: list[Candidate] = []
    chosen: dict[tuple[str, str], int] = {}  # (turn id, list) -> its place in out
    for cand in candidates:
        if cand.source not in ("vector", "text") or cand.memory_type not in (turns, PASSAGES) or not isinstance(cand.record, RowView):
            out.append(cand)
            continue
        if cand.memory_type == PASSAGES:
            view, turn = cand.record, str(cand.record.row.get("turn_id", ""))
            prior = best.get(turn)
            if prior is None or (cand.source == "vector", cand.score) > prior.row["_best"]:
                best[turn] = replace(view, row={**view.row, "_best": (cand.source == "vector", cand.score)})
            cand = Candidate(turns, replace(view, id=turn), cand.source, cand.rank, cand.score)
        key = (cand.record.id, cand.source)
        at = chosen.get(key)
        if at is None:
            chosen[key] = len(out)
            out.append(cand)
        elif cand.score > out[at].score:
            out[at] = cand
    return out


async def lifted_turns(storage: Store, scope: Scope, statuses: tuple[str, ...], turns: str, hits: list[Hit]) -> list[Hit]:
    """`hits` whose turn stood in as one of its passages' rows given the turn's own row (one
    read); a turn no longer found with `statuses` is dropped."""
    stand_ins = [h for h in hits if h.memory_type == turns and isinstance(h.record, RowView) and "turn_id" in h.record.row]
    if not stand_ins:
        return hits
    rows = await storage.rows(turns, Where(scope).status_in(statuses).raw(sql_in("id", [h.id for h in stand_ins])).build())
    found = {row["id"]: row for row in rows}
    out = []
    for hit in hits:
        if hit in stand_ins:
            if hit.id not in found:
                continue
            hit.record = storage.type_table(turns).to_record(found[hit.id])
        out.append(hit)
    return out


def best_passage_form(storage: Store, hits: Sequence[Hit], best: dict[str, RowView], turns: str, budget: int,
                      count_tokens: Callable[[str], int], whole_share: float) -> list[Hit]:
    """Each turn a passage matched packed whole when it costs at most `whole_share` of the budget,
    else as that passage, at the turn's rank and score."""
    table = storage.type_table(PASSAGES)
    out = []
    for hit in hits:
        view = best.get(hit.id) if hit.memory_type == turns else None
        if view is not None and count_tokens(hit.record.render_line()) > budget * whole_share:
            row = {k: v for k, v in view.row.items() if k != "_best"}
            hit = Hit(PASSAGES, table.to_record(row), hit.score, {**hit.parts, "passage_of_turn": 1.0})
        out.append(hit)
    return out
