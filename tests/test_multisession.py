"""Questions over several sessions: counting ones get a hit from each session, an updated fact
both its values, newest first (`memos.retrieval.aggregation`, `memos.retrieval.same_subject`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memos import Scope
from memos.retrieval.aggregation import aggregates, spread_sessions
from memos.retrieval.ranking import Hit, RankingPolicy

START = datetime(2024, 3, 4, 18, 0, tzinfo=UTC)


async def sessions(mem, scope: Scope, days: list[list[str]], gap_days: int = 9) -> None:
    """Each list one session of the user's turns, `gap_days` apart, ids D<session>:<turn>."""
    await mem.ingest(scope, [{"speaker": "user", "text": text, "id": f"D{s + 1}:{i + 1}",
                              "timestamp": START + timedelta(days=gap_days * s, seconds=30 * i)}
                             for s, turns in enumerate(days) for i, text in enumerate(turns)])


def session_ids(hits: list[Hit]) -> set[str]:
    return {source.split(":")[0] for hit in hits for source in hit.source_ids}


@pytest.mark.parametrize(("question", "expected"), [
    ("How many hiking trips did I go on this spring?", True),
    ("What is the total I spent on concert tickets?", True),
    ("Which of all the books have I finished so far?", True),
    ("我一共去了几次徒步？", True),
    ("每次去健身房我都练什么？", True),
    ("我读过哪些书？", True),
    ("Where did I go hiking last weekend?", False),
    ("What is my dog called?", False),
    ("我的狗叫什么名字？", False),
])
def test_an_aggregating_question_is_told_apart_in_english_and_chinese(question, expected):
    assert aggregates(question) is expected


def test_spreading_puts_each_sessions_best_hit_before_a_second_from_one_session():
    from memos.memtypes import Episode

    def hit(day: int, score: float) -> Hit:
        return Hit("episodic", Episode(summary="x", occurred_at=START + timedelta(days=day)), score)

    hits = [hit(0, 1.0), hit(0, 0.9), hit(0, 0.8), hit(5, 0.6), hit(9, 0.55)]
    spread = spread_sessions(hits, 0.5)
    assert [h.score for h in spread] == [1.0, 0.6, 0.55, 0.9, 0.8]
    assert spread_sessions(hits, 1.0) == hits  # 1 keeps the ranking as it was


HIKING = [
    [f"On the hiking trip to the Blue Ridge mountains {what}." for what in
     ["the trail was steep", "we camped by the river", "we saw the best views", "my boots gave me blisters",
      "we hiked again in the morning", "it rained on the second day", "we met a park ranger", "we cooked on a tiny stove",
      "we crossed a rope bridge", "I carried the heavy tent", "we got lost for an hour", "we saw a black bear"]],
    ["Work was busy, we shipped the new billing system.", "Also did a short hiking trip at Eagle Peak on Sunday."],
    ["My sister visited and we cooked dumplings.", "Then we went on a hiking trip along the coast path."],
    ["I repainted the kitchen a pale green.", "Last Saturday I did a hiking trip around Crater Lake with friends."],
]

HIKING_ZH = [
    [f"这次去黄山徒步，{what}。" for what in
     ["山路很陡", "我们在河边露营", "看到了最美的日出", "我的脚磨出了水泡", "第二天早上又走了一段", "第二天下了雨",
      "遇到了一位护林员", "我们用小炉子做饭", "走过了一座吊桥", "我背着很重的帐篷", "我们迷路了一个小时", "看到了一群猴子"]],
    ["这周工作很忙，新系统终于上线了。", "周日还去香山徒步了一趟。"],
    ["妹妹来看我，我们一起包了饺子。", "然后我们沿着海边徒步走了一下午。"],
    ["我把厨房刷成了浅绿色。", "上周六和朋友去泰山徒步了。"],
]


BUDGET = 200


@pytest.mark.parametrize(("question", "days"), [
    ("How many hiking trips did I go on?", HIKING),
    ("我一共去徒步了几次？", HIKING_ZH),
])
async def test_a_counting_question_gets_a_hit_from_every_session_within_the_budget(mem, question, days):
    scope = Scope("u")
    await sessions(mem, scope, days)
    mem.ranking = RankingPolicy(session_spread=0.5)  # off by default (docs/benchmarks.md)
    hits = await mem.search(question, scope, budget_tokens=BUDGET)
    # one session talks about it twelve times, three others once each: all four are in a budget
    # that the first session's turns alone would fill
    assert session_ids(hits) >= {"D1", "D2", "D3", "D4"}
    assert {"D2:2", "D3:2", "D4:2"} <= {s for h in hits for s in h.source_ids}


RUNNING = [
    ["My current 5k personal best is 27 minutes 30 seconds.",
     *[f"I ran {km} km along the canal this morning, {note}." for km, note in
       [(5, "a slow and easy pace"), (6, "windy all the way"), (4, "with my running club"), (5, "then stretched for ten minutes"),
        (7, "my longest run this month"), (5, "in the rain"), (3, "short because of work"), (5, "with my neighbour"),
        (6, "new shoes felt great"), (5, "tempo pace for the middle 2 km"), (4, "easy recovery run"), (5, "hill repeats at the end")]]],
    ["We adopted a cat from the shelter, she is called Miso.", "Miso sleeps on the radiator all day."],
    ["Great news: I set a new 5k PB today, 25:50!", "The park run was flat and cool, perfect conditions."],
]

RUNNING_ZH = [
    ["我现在五公里的最好成绩是二十七分三十秒。",
     *[f"今天早上沿着河边跑了{km}公里，{note}。" for km, note in
       [("五", "配速很慢"), ("六", "一路都是大风"), ("四", "跟跑团一起"), ("五", "跑完拉伸了十分钟"), ("七", "这个月最长的一次"),
        ("五", "下着雨"), ("三", "因为工作跑得很短"), ("五", "和邻居一起"), ("六", "新鞋感觉很好"), ("五", "中间两公里是节奏跑")]]],
    ["我们从收容所领养了一只猫，叫味噌。", "味噌整天睡在暖气片上。"],
    ["好消息：今天五公里跑出了新的最好成绩，二十五分五十秒！", "公园跑的路线很平，天气凉快。"],
]


@pytest.mark.parametrize(("question", "days", "old", "new"), [
    ("What is my current 5k personal best?", RUNNING, "D1:1", "D3:1"),
    ("我现在五公里最好成绩是多少？", RUNNING_ZH, "D1:1", "D3:1"),
])
async def test_an_updated_fact_surfaces_both_values_newest_first(mem, question, days, old, new):
    scope = Scope("u")
    await sessions(mem, scope, days, gap_days=40)
    mem.ranking = RankingPolicy(subject_anchors=3)  # off by default (docs/benchmarks.md)
    hits = await mem.search(question, scope, budget_tokens=1000)
    ids = [s for h in hits for s in h.source_ids]
    assert old in ids and new in ids
    assert ids.index(new) < ids.index(old)  # the newer value first: it is the current one
