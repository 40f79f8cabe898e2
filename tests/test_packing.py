"""Pure packing and rendering of hits within a token budget."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from memos.memtypes import Episode, Fact

from memos.retrieval.packing import pack, render_hits
from memos.retrieval.ranking import Hit
from memos.tokens import tokenizer_for

count = tokenizer_for("gpt-4o").count


def episode(text: str, day: int, month: int = 5, year: int = 2023, actor: str = "Caroline") -> Hit:
    return Hit("episodic", Episode(summary=text, actor=actor, occurred_at=datetime(year, month, day, 12, tzinfo=UTC)), 1.0)


def fact(text: str) -> Hit:
    return Hit("semantic", Fact(subject="x", summary=text), 1.0)


def test_a_shared_date_is_paid_for_once_and_rendered_once():
    hits = [episode("I went to the lake.", 8), episode("Mel said hi.", 8, actor="Melanie"), episode("Then it rained.", 9)]
    kept = pack(hits, 200, count)
    text = render_hits(kept)
    assert text == "[8 May 2023]\nCaroline: I went to the lake.\nMelanie: Mel said hi.\n[9 May 2023]\nCaroline: Then it rained."
    assert count(text) <= sum(h.tokens for h in kept)
    assert kept[1].tokens < kept[0].tokens  # the second hit of a day pays no heading


def at(text: str, hour: int, actor: str) -> Hit:
    return Hit("episodic", Episode(summary=text, actor=actor, occurred_at=datetime(2023, 5, 8, hour, tzinfo=UTC)), 1.0)


def test_a_speakers_consecutive_lines_name_them_once_and_pay_for_it_once():
    hits = [at("I went to the lake.", 9, "Caroline"), at("We swam until noon.", 11, "Caroline"), at("Lovely!", 10, "Melanie")]
    two = pack(hits[:2], 200, count)
    assert render_hits(two) == "[8 May 2023]\nCaroline: I went to the lake. … We swam until noon."
    assert two[1].tokens == count(" … We swam until noon.\n")  # no name, no heading
    three = pack(hits, 200, count)  # Melanie's line falls between them: Caroline is named twice
    assert render_hits(three) == "[8 May 2023]\nCaroline: I went to the lake.\nMelanie: Lovely!\nCaroline: We swam until noon."
    assert count(render_hits(three)) <= sum(h.tokens for h in three)


def test_a_packing_pays_for_what_it_renders_and_no_more():
    """A line's newline merges with its last punctuation in BPE: counted apart, a tenth of the
    lines' cost was paid for and never rendered."""
    hits = [at(f"Sentence number {i} ends here!", i, "Caroline" if i % 3 else "Melanie") for i in range(24)]
    kept = pack(hits, 10_000, count)
    assert 0 <= sum(h.tokens for h in kept) - count(render_hits(kept)) <= 1  # the last line has no newline


def test_a_hit_bigger_than_the_budget_is_skipped_and_smaller_later_ones_still_fit():
    big = fact("word " * 300)
    small = [fact("Alice likes tea."), fact("Bob has a cat.")]
    kept = pack([small[0], big, small[1]], 40, count)
    assert [h.record.summary for h in kept] == ["Alice likes tea.", "Bob has a cat."]
    assert pack([big], 40, count) == []


def test_zero_or_negative_budget_keeps_nothing():
    assert pack([fact("a")], 0, count) == [] and pack([fact("a")], -5, count) == []


def test_ties_keep_rank_order_and_never_reorder():
    hits = [fact(f"fact number {i}") for i in range(10)]
    kept = pack(hits, 30, count)
    assert kept == hits[: len(kept)] and 0 < len(kept) < 10


def test_dates_across_a_year_end_render_in_time_order():
    hits = [episode("new year", 1, 1, 2024), episode("eve", 31, 12, 2023), episode("party again", 1, 1, 2024)]
    text = render_hits(pack(hits, 500, count))
    assert text.index("[31 Dec 2023]") < text.index("[1 Jan 2024]") and text.count("[1 Jan 2024]") == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=80), st.integers(1, 28), st.booleans(), st.sampled_from(["A", "B", ""])),
                max_size=25), st.integers(0, 400))
def test_the_rendering_never_exceeds_the_budget(items, budget):
    hits = [episode(t, d, actor=a) if is_episode else fact(t) for t, d, is_episode, a in items if t.strip()]
    kept = pack(hits, budget, count)
    assert count(render_hits(kept)) <= budget
    assert [h for h in hits if h in kept] == kept
