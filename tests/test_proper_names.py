"""Questions that ask for a name favour the records that say one (memos.retrieval.proper_names)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memos import Scope
from memos.memtypes import Episode
from memos.retrieval.proper_names import asks_name, favour_names, says_name
from memos.retrieval.ranking import Hit, RankingPolicy


def test_a_question_asks_for_a_name_in_english_chinese_and_mixed_text():
    for question in ("What are the names of John's children?", "Where did Caroline move from 4 years ago?",
                     "Who supports Caroline when she has a negative experience?", "Which cities has Jon visited?",
                     "What people has Maria met while volunteering?", "What is her dog called?",
                     "She moved, but where?", "李明的女朋友叫什么名字？", "王芳在哪个城市工作？", "暑假豆豆寄养在谁家？",
                     "李明周末去哪里街拍？", "Anna 的猫叫什么？", "What areas has John been to or is planning to go to?"):
        assert asks_name(question), question
    for question in ("How many children does Melanie have?", "What did she cook for dinner?", "When did Jon open his studio?",
                     "What books has Melanie read?", "王芳什么时候搬家？", "李明买了什么相机？", "Is the place somewhere nice?",
                     # its answers are in the question: which of them, not a name to find
                     "Who became a parent first, Rachel or Alex?", "Who did I meet first, the woman selling jam or the tourist?",
                     "谁先结婚，李明还是王芳？"):
        assert not asks_name(question), question


def test_a_name_is_a_capitalised_word_inside_a_sentence_or_how_chinese_says_one():
    speakers = ["Caroline", "Melanie", "王芳", "李明"]
    for text in ("This necklace is a gift from my grandma in my home country, Sweden.", "Our one-year-old is so cute, his name is Kyle!",
                 "We went to the lake with Lisa's kids.", "我女朋友周婷说我弹得像锯木头。", "我们家养了一只猫，叫豆豆。",
                 "周末去武康路拍照。", "我们打算带她去青岛玩五天。", "我昨天去了Paris玩。", "I finally tried Xenoblade last night."):
        assert says_name(text, speakers), text
    for text in ("Hey Mel! Good to see you!",  # what a speaker is called by is not a name the answer holds
                 "Thanks, Caroline! That's awesome.", "I went to the park. Then we ate. Wow.",  # a sentence's first word
                 "See you on Monday, in August!", "I asked my Mom and Dad.", "我去了超市和医院。", "寄养在我妈家。",
                 "哈哈，王芳，太棒了！", "i love that place"):
        assert not says_name(text, speakers), text


def _hits(*turns: tuple[str, str, float]) -> list[Hit]:
    at = datetime(2024, 7, 3, tzinfo=UTC)
    return [Hit("episodic", Episode(id=f"t{i}", actor=who, summary=text, event_type="message", occurred_at=at, user_id="u"),
                score, {}) for i, (who, text, score) in enumerate(turns)]


def test_the_hits_that_say_a_name_rise_only_for_a_question_that_asks_for_one():
    turns = (("Maria", "Hey John! Volunteering at the shelter was great, I met so many people.", 0.9),
             ("John", "Thanks, Maria! The shelter sounds lovely.", 0.8),
             ("Maria", "One of the residents, Laura, wrote us a letter.", 0.6))
    favoured = favour_names(_hits(*turns), "Who has Maria met at the shelter?", 1.0)
    assert [h.id for h in favoured] == ["t2", "t0", "t1"]  # 0.6 x 2 over 0.9; "John" and "Maria" are the speakers
    assert favoured[0].parts["says_name"] == 1.0 and "says_name" not in favoured[1].parts
    for question, weight in (("What did Maria do at the shelter?", 1.0), ("Who has Maria met at the shelter?", 0.0)):
        hits = favour_names(_hits(*turns), question, weight)
        assert [(h.id, h.score) for h in hits] == [("t0", 0.9), ("t1", 0.8), ("t2", 0.6)]


TURNS = [
    ("Ana", "My brother keeps sending me photos of his kids at the beach."),
    ("Ben", "Family beach trips are the best, the kids love the water."),
    ("Ana", "Our youngest is Noah, he turned two in June and loves his kids' books."),
    ("Ben", "Kids grow up so fast. Mine are into swimming lessons now."),
    ("Ana", "The kids and I baked cookies for the school fair on Friday."),
    ("Ben", "Bake sales with kids are always chaotic but fun."),
]


async def test_a_budgeted_search_favours_the_turn_that_says_the_name_asked_for(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    query = "What are the names of Ana's kids?"
    mem.ranking = RankingPolicy(name_weight=0.0, neighbours=0)
    plain = await mem.search(query, scope, budget_tokens=2000)
    assert not any("says_name" in h.parts for h in plain)
    mem.ranking = RankingPolicy(neighbours=0)
    hits = await mem.search(query, scope, budget_tokens=2000)
    assert [h.source_ids[0] for h in hits if "says_name" in h.parts] == ["D1:3"]  # Noah; "Ana", "Ben" are the speakers'
    assert hits[0].source_ids == ["D1:3"]
    assert hits[0].score == pytest.approx(next(h.score for h in plain if h.source_ids == ["D1:3"]) * 2, rel=1e-4)
    # a top-k search is ranked as before
    mem.ranking = RankingPolicy(name_weight=0.0)
    before = [(h.id, round(h.score, 4)) for h in await mem.search(query, scope, k=4)]
    mem.ranking = RankingPolicy()
    assert [(h.id, round(h.score, 4)) for h in await mem.search(query, scope, k=4)] == before
