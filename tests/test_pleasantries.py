"""Packed turns without their pleasantries: a budget buys the sentences that hold facts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from memos.memtypes import Episode, Fact

from memos.retrieval.packing import pack, render_hits
from memos.retrieval.pleasantries import LONGEST, without_pleasantries
from memos.retrieval.ranking import Hit
from memos.store.scope import Scope
from memos.tokens import tokenizer_for

count = tokenizer_for("gpt-4o").count


@pytest.mark.parametrize(("said", "packed"), [
    ("Hey Caroline! I'm swamped with the kids & work. What's up with you?", "I'm swamped with the kids & work. What's up with you?"),
    ("Wow, Caroline! That's awesome! Taking in kids in need - you're so kind.", "Taking in kids in need - you're so kind."),
    ("Yep, Caroline. Taking care of ourselves is vital. I'm off swimming with the kids. Talk to you soon!",
     "Taking care of ourselves is vital. I'm off swimming with the kids."),
    ("Caroline, that's great! Thanks Nate! Of course! Take care. I went.", "I went."),
    ("That's great, Caroline!\nI loved it.", "I loved it."),
    ("Wow!! So cool... I did it (really). Nice!", "I did it (really)."),
])
def test_sentences_of_pleasantries_only_are_dropped_and_the_rest_kept_as_written(said, packed):
    assert without_pleasantries(said) == packed


@pytest.mark.parametrize("said", [
    "Thanks!",  # nothing but pleasantries: recalled for itself, kept whole
    "I'm happy. I'm so proud.",  # feelings may be the fact asked for
    "Go Sweden! A Buckeye!",  # a name that is not said to someone
    "Options:\nA.\nB.",  # a letter is not a pleasantry
    "I see. It costs 3.5 dollars, e.g. this. Look at this! (photo of a bowl)",
    "谢谢小明！",
])
def test_what_is_not_only_pleasantries_is_kept(said):
    assert without_pleasantries(said) == said


@pytest.mark.parametrize(("said", "packed"), [
    ("哈哈，太棒了！我昨天去了北京。", "我昨天去了北京。"),
    ("恭喜！装修是最累的。", "装修是最累的。"),
    ("我去了。哈哈", "我去了。"),
    ("太好了！I went to Beijing last week.", "I went to Beijing last week."),
    ("Thanks, Mel! 我下周去上海。", "我下周去上海。"),
    ("谢谢！你那边呢，最近有什么新鲜事？", "你那边呢，最近有什么新鲜事？"),
])
def test_chinese_and_mixed_pleasantries(said, packed):
    assert without_pleasantries(said) == packed


def test_a_long_text_is_packed_as_it_is():
    essay = "Thanks! " + "The migration plan has three stages and each one is reversible. " * (LONGEST // 60)
    assert len(essay) > LONGEST and without_pleasantries(essay) == essay
    assert without_pleasantries(essay[:LONGEST]).startswith("The migration plan")


def turn(text: str, hour: int, actor: str) -> Hit:
    return Hit("episodic", Episode(summary=text, actor=actor, occurred_at=datetime(2023, 5, 8, hour, tzinfo=UTC)), 1.0)


def test_a_packed_turn_pays_for_its_facts_only_so_the_next_turn_fits():
    chatty = "Wow, Caroline! That's awesome! Thanks so much! I signed up for a pottery class yesterday. Talk to you soon!"
    hits = [turn(chatty, 9, "Melanie"), turn("I went camping with the kids last weekend.", 10, "Melanie")]
    text = "[8 May 2023]\nMelanie: I signed up for a pottery class yesterday. … I went camping with the kids last weekend."
    kept = pack(hits, count(text), count)
    assert len(kept) == 2  # the pleasantries paid for, the second turn did not fit
    assert render_hits(kept) == text
    assert sum(h.tokens for h in kept) >= count(text)
    assert hits[0].record.summary == chatty  # the record itself is untouched


def test_records_without_a_speaker_render_as_they_are():
    hits = [Hit("semantic", Fact(subject="Caroline", summary="Thanks! Caroline likes tea."), 1.0)]
    assert render_hits(pack(hits, 100, count)) == hits[0].record.render()
    assert "Thanks!" in hits[0].record.render()


async def test_a_budgeted_search_packs_turns_without_pleasantries_and_stores_them_whole(mem):
    scope = Scope("u1")
    said = "Wow, that's awesome, Mel! Congrats! I adopted a dog named Oscar last week."
    [stored] = await mem.add(scope, Episode(summary=said, actor="Caroline", event_type="message"))
    hits = await mem.search("dog Oscar", scope, budget_tokens=500)
    assert [h.id for h in hits] == [stored.id]
    assert hits[0].text == "Caroline: I adopted a dog named Oscar last week."
    [top] = await mem.search("dog Oscar", scope, k=1)
    assert top.record.summary == said
