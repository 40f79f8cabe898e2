"""Fusion (pure): scaled-score fusion, RRF, ties, the time-window boost."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from memos.memtypes import Episode, Fact

from memos.retrieval.ranking import Candidate, RankingPolicy, fuse
from memos.retrieval.temporal import parse_time_window

NOW = datetime(2026, 1, 5, tzinfo=UTC)


def ep(rid: str, when: datetime = datetime(2023, 5, 1, tzinfo=UTC)) -> Episode:
    return Episode(id=rid, summary=rid, occurred_at=when)


def cands(source: str, scored: list[tuple[Episode, float]], memory_type: str = "episodic") -> list[Candidate]:
    return [Candidate(memory_type, rec, source, rank, score) for rank, (rec, score) in enumerate(scored)]


def test_score_fusion_keeps_how_far_apart_the_scores_are():
    a, b, c = ep("a"), ep("b"), ep("c")
    # b is a close second in the dense list and first by keywords; c is far behind in both
    vector = cands("vector", [(a, 0.90), (b, 0.88), (c, 0.20)])
    text = cands("text", [(b, 12.0), (a, 2.0), (c, 1.0)])
    hits = fuse(vector + text, RankingPolicy(), NOW)
    assert [h.id for h in hits] == ["b", "a", "c"]
    assert hits[0].parts["vector_score"] == 0.88 and hits[0].parts["text_rank"] == 0.0
    # rank fusion sees a and b as equal (1st + 2nd each) and breaks the tie by id
    rrf = fuse(vector + text, RankingPolicy(fusion="rrf"), NOW)
    assert [h.id for h in rrf][:2] == ["a", "b"] and rrf[0].score == rrf[1].score


def test_a_record_missing_from_a_list_scores_zero_there_and_single_lists_scale_to_one():
    a, b = ep("a"), ep("b")
    hits = fuse(cands("vector", [(a, 0.5)]) + cands("text", [(b, 3.0)]), RankingPolicy(vector_weight=0.6, text_weight=0.4), NOW)
    assert [h.id for h in hits] == ["a", "b"]
    assert abs(hits[0].parts["fused"] - 0.6) < 1e-9 and abs(hits[1].parts["fused"] - 0.4) < 1e-9


def test_vector_scores_are_scaled_across_stores_and_text_scores_per_store():
    strong, weak = ep("strong"), Fact(id="weak", subject="x", summary="weak")
    vector = cands("vector", [(strong, 0.9)]) + cands("vector", [(weak, 0.1)], "semantic")
    hits = fuse(vector, RankingPolicy(), NOW)
    assert [h.id for h in hits] == ["strong", "weak"] and hits[1].parts["fused"] == 0.0
    text = cands("text", [(strong, 9.0)]) + cands("text", [(weak, 0.5)], "semantic")  # BM25 of two tables: not comparable
    assert {h.id: h.parts["fused"] for h in fuse(text, RankingPolicy(), NOW)} == {"strong": 0.5, "weak": 0.5}


def test_ties_are_broken_by_record_id_whatever_the_input_order():
    records = [ep(r) for r in ("c", "a", "b")]
    forward = fuse(cands("vector", [(r, 0.5) for r in records]), RankingPolicy(), NOW)
    backward = fuse(cands("vector", [(r, 0.5) for r in reversed(records)]), RankingPolicy(), NOW)
    assert [h.id for h in forward] == [h.id for h in backward] == ["a", "b", "c"]


def test_records_in_the_named_time_window_rise_and_others_stay():
    december = ep("dec", datetime(2023, 12, 9, tzinfo=UTC))
    march = ep("mar", datetime(2023, 3, 9, tzinfo=UTC))
    lists = cands("vector", [(march, 0.8), (december, 0.7), (ep("z"), 0.1)])
    window = parse_time_window("what did she donate in December 2023?", NOW)
    boosted = fuse(lists, RankingPolicy(), NOW, window)
    assert [h.id for h in boosted][:2] == ["dec", "mar"] and boosted[0].parts["in_time_window"] == 1.0
    assert [h.id for h in fuse(lists, RankingPolicy(), NOW)][:2] == ["mar", "dec"]
    assert [h.id for h in fuse(lists, RankingPolicy(time_weight=0.0), NOW, window)][:2] == ["mar", "dec"]


def test_a_small_cosine_gap_is_not_stretched_to_the_full_range():
    first, second = ep("first"), ep("second")
    vector = cands("vector", [(first, 0.14), (second, 0.12)])  # nearly equal: both weak matches
    text = cands("text", [(second, 4.0)])  # only the second has the query's words
    hits = fuse(vector + text, RankingPolicy(), NOW)
    assert [h.id for h in hits] == ["second", "first"]
    assert abs(hits[0].parts["fused"] - (0.5 * 0.9 + 0.5)) < 1e-9
    stretched = fuse(vector + text, RankingPolicy(vector_min_spread=0.0), NOW)
    assert stretched[0].score == stretched[1].score  # a plain min-max would call it a tie


def test_a_list_read_deeper_keeps_its_scale_when_fused_with_the_depth_it_stands_for():
    # The shared search table reads `depth` rows for every store with records in the scope, so
    # one more such store (a vault item) deepens the turns' list. Min-max scaling over the deeper
    # list moved b above a; with `depth` the bounds are those of the first `depth` rows.
    a, b, c = ep("a"), ep("b"), ep("c")
    deep = [ep(f"z{i}") for i in range(6)]
    vector = [(c, 0.70), (a, 0.66), (b, 0.60)]
    text = [(a, 7.5), (b, 9.0), (c, 1.0)]
    shallow = fuse(cands("vector", vector) + cands("text", text), RankingPolicy(), NOW, depth=3)
    read_deeper = cands("vector", vector + [(z, 0.30 - 0.01 * i) for i, z in enumerate(deep)]) + cands("text", text)
    assert [h.id for h in fuse(read_deeper, RankingPolicy(), NOW)][:3] == ["b", "a", "c"]  # what the deeper read did
    kept = fuse(read_deeper, RankingPolicy(), NOW, depth=3)
    assert [h.id for h in kept][:3] == [h.id for h in shallow] == ["a", "b", "c"]
    assert all(h.parts["fused"] == 0.0 for h in kept if h.id.startswith("z"))  # below the first 3: nothing from the list


@settings(max_examples=200, deadline=None)
@given(depth=st.integers(1, 8), data=st.data())
def test_a_full_text_candidate_ranked_below_its_stores_depth_adds_nothing(depth, data):
    """What lets a top-k search make candidates of each store's first `depth` full-text rows only
    (`memos.retrieval.search._shared_candidates`): the fused scores of every other hit are the same
    without the rows below, and those rows score 0 unless another list found them."""
    lists = []
    for store in ("episodic", "semantic"):
        for source in ("vector", "text"):
            scores = sorted(data.draw(st.lists(st.floats(0, 20, allow_nan=False), max_size=14)), reverse=True)
            ids = data.draw(st.lists(st.sampled_from("abcdefghijklmnop"), min_size=len(scores), max_size=len(scores), unique=True))
            lists.append(cands(source, [(ep(f"{store}-{i}"), s) for i, s in zip(ids, scores)], store))
    whole = fuse([c for cs in lists for c in cs], RankingPolicy(), NOW, depth=depth)
    cut = fuse([c for cs in lists for c in cs if c.source != "text" or c.rank < depth], RankingPolicy(), NOW, depth=depth)
    kept = {h.id: h.score for h in cut}
    for hit in whole:
        assert abs(kept.get(hit.id, 0.0) - hit.score) < 1e-12
