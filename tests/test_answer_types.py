"""Answer kinds (memos.retrieval.answer_types): a question that asks for a time, a number or a title favours
the hits that carry one in a top-k search, in English and Chinese."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memos import Scope
from memos.retrieval.answer_types import carries, expected_answer
from memos.retrieval.ranking import RankingPolicy
from memos.retrieval.temporal import mentions_time


@pytest.mark.parametrize(("question", "kind"), [
    ("When did Caroline go to the LGBTQ support group?", "time"),
    ("What date is the wedding?", "time"),
    ("How long ago did Jon start his business?", "time"),
    ("李明的婚礼是哪一天？", "time"),
    ("王芳什么时候开始学吉他？", "time"),
    ("How many children does Melanie have?", "quantity"),
    ("How long did the first half marathon take?", "quantity"),
    ("李明第一次跑半马用了多长时间？", "quantity"),
    ("小雨学钢琴，考过了几级？", "quantity"),
    ("What book did Melanie read?", "title"),
    ("Which songs has he learned on the guitar?", "title"),
    ("李明推荐王芳看什么书？", "title"),
    ("李明用吉他学过哪些歌？", "title"),
    ("What does Caroline paint?", None),
    ("王芳在哪个城市工作？", None),
    ("Is the showroom open?", None),  # "show" only as a whole word
])
def test_a_question_says_what_kind_of_answer_it_wants(question, kind):
    assert expected_answer(question) == kind


def test_a_text_carries_a_time_a_number_or_a_title():
    assert carries("I went to a support group yesterday.", "time")
    assert carries("We moved there in May 2023.", "time")
    assert carries("我上个月去了杭州。", "time")
    assert carries("2023年5月8日是周一", "time")
    assert not carries("See you before lunch.", "time")  # "before" alone names no time
    assert not carries("May I join you?", "time")
    assert carries("两小时零八分，第一次跑就这个成绩", "quantity")
    assert carries("I have 3 kids.", "quantity")
    assert carries("We play every week.", "quantity")
    assert carries("现在每周日下午打两个小时", "quantity")
    assert not carries("我们一起去吧", "quantity")  # 一 in 一起 counts nothing
    assert carries("推荐你看刘慈欣的短篇集《流浪地球》。", "title")
    assert carries('I just finished "Charlotte\'s Web" with the kids.', "title")
    assert not carries("I love reading books before bed.", "title")


def test_mentions_time_agrees_with_the_parser_on_what_it_finds():
    # every expression the query parser reads as a window is a time mention too
    from memos.retrieval.temporal import parse_time_window

    now = datetime(2024, 3, 1, tzinfo=UTC)
    for text in ("yesterday", "last weekend", "three days ago", "on 8 May 2023", "in June", "in 2022",
                 "昨天", "上周六", "去年五月", "三天前", "春节前", "2023年5月8日"):
        assert parse_time_window(text, now) is not None, text
        assert mentions_time(text), text
        assert mentions_time(text.upper()), text  # case does not matter


TURNS = [
    ("Ana", "Reading is my favourite thing, I read every night."),
    ("Ben", "Which books do you like?"),
    ("Ana", 'Right now "The Left Hand of Darkness", a gift from my sister.'),
    ("Ben", "Ana, you should go climbing, the climbing gym was great."),
    ("Ana", "Yesterday I finally tried it, for the first time."),
    ("Ben", "Ana推荐的书我都爱看，她推荐书最在行。"),
    ("Ana", "我推荐你看《三体》。"),
]


@pytest.mark.parametrize(("question", "answer", "beaten_by"), [
    ("What book is Ana reading?", "D1:3", "D1:1"),
    ("When did Ana go climbing?", "D1:5", "D1:4"),
    ("Ana推荐了什么书？", "D1:7", "D1:6"),
])
async def test_a_top_k_search_favours_the_hit_that_carries_the_answer_asked_for(mem, dialogue, question, answer, beaten_by):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    mem.ranking = RankingPolicy(answer_weight=0.0)
    plain = [h.source_ids[0] for h in await mem.search(question, scope, k=7, replies=False)]
    assert plain.index(beaten_by) < plain.index(answer), plain  # without answer kinds the other ranks first
    mem.ranking = RankingPolicy()
    hits = await mem.search(question, scope, k=7, replies=False)
    ranked = [h.source_ids[0] for h in hits]
    assert ranked.index(answer) < ranked.index(beaten_by), ranked
    assert next(h for h in hits if h.source_ids[0] == answer).parts.get("answer_kind") == 1.0
    assert "answer_kind" not in next(h for h in hits if h.source_ids[0] == beaten_by).parts
    # a budgeted search is ranked as before (it measured no gain from answer kinds)
    budgeted = []
    for weight in (0.0, 0.5):
        mem.ranking = RankingPolicy(answer_weight=weight)
        budgeted.append([h.id for h in await mem.search(question, scope, budget_tokens=2000)])
    assert budgeted[0] == budgeted[1]


async def test_a_question_asking_for_no_kind_keeps_the_fused_order(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    orders = []
    for weight in (0.0, 0.5):
        mem.ranking = RankingPolicy(answer_weight=weight)
        orders.append([h.id for h in await mem.search("What does Ana like?", scope, k=7)])
    assert orders[0] == orders[1]
