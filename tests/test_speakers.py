"""Speaker-aware ranking (memos.retrieval.speakers): a query naming one of the speakers favours their turns."""

from __future__ import annotations

from memos import Scope
from memos.retrieval.ranking import RankingPolicy
from memos.retrieval.speakers import named_speakers

TURNS = [
    ("Ana", "Hi Ben! How was your weekend?"),
    ("Ben", "Great, I went rock climbing and then played chess all evening. Climbing and chess are my favourite hobbies."),
    ("Ana", "Nice. I spent Saturday painting watercolours by the river, it always calms me down."),
    ("Ben", "Do you paint often?"),
    ("Ana", "Every weekend. I also started a pottery class last month."),
    ("Ben", "Pottery sounds fun. My hobbies keep me busy too."),
]


def test_a_speaker_is_named_by_the_first_word_of_their_name_as_written():
    speakers = {"Caroline", "Will Smith", "user", "王芳", "李明"}
    assert named_speakers("What is Caroline's identity?", speakers) == {"Caroline"}
    assert named_speakers("What did Will buy?", speakers) == {"Will Smith"}
    assert named_speakers("Will it rain in Lisbon?", speakers) == {"Will Smith"}
    assert named_speakers("What will Caroline do next?", speakers) == {"Caroline"}  # "will" is not "Will"
    assert named_speakers("what did caroline paint", speakers) == {"Caroline"}  # an all-lower-case query
    assert named_speakers("what did the user say about rent", speakers) == set()  # a role is not a name
    assert named_speakers("王芳在哪个城市工作？", speakers) == {"王芳"}
    assert named_speakers("Who likes hiking?", speakers) == set()


async def test_a_budgeted_search_favours_the_turns_of_the_speaker_the_query_names(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    query = "What hobbies does Ana have?"
    mem.ranking = RankingPolicy(speaker_weight=0.0, neighbours=0)
    plain = [h.source_ids[0] for h in await mem.search(query, scope, budget_tokens=2000)]
    assert plain.index("D1:6") < plain.index("D1:5")  # Ben's "my hobbies" outranks Ana's pottery class
    mem.ranking = RankingPolicy(neighbours=0)
    hits = await mem.search(query, scope, budget_tokens=2000)
    ranked = [h.source_ids[0] for h in hits]
    assert ranked[:2] == ["D1:3", "D1:5"]  # both of Ana's pastimes first
    assert ranked.index("D1:5") < min(ranked.index("D1:6"), ranked.index("D1:2"))
    assert all(h.parts.get("named_speaker") == 1.0 for h in hits if h.record.actor == "Ana")
    assert not any("named_speaker" in h.parts for h in hits if h.record.actor == "Ben")


async def test_a_query_naming_every_speaker_or_none_keeps_the_fused_order(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    for query in ("Which hobbies do Ana and Ben share?", "Which hobbies came up?"):
        orders = []
        for weight in (0.0, 1.0):
            mem.ranking = RankingPolicy(speaker_weight=weight, neighbours=0)
            orders.append([(h.id, round(h.score, 9)) for h in await mem.search(query, scope, budget_tokens=2000)])
        assert orders[0] == orders[1]


async def test_a_top_k_search_is_ranked_as_before(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    found = []
    for weight in (0.0, 1.0):
        mem.ranking = RankingPolicy(speaker_weight=weight)
        found.append([h.id for h in await mem.search("What hobbies does Ana have?", scope, k=3)])
    assert found[0] == found[1]


async def test_a_budgeted_search_fuses_deep_candidate_lists(mem, dialogue, monkeypatch):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    asked = []
    for name in ("vector_search", "text_search"):
        real = getattr(mem.storage, name)

        async def spy(memory_type, query, where, limit, columns=None, real=real):
            asked.append(limit)
            return await real(memory_type, query, where, limit, columns)

        monkeypatch.setattr(mem.storage, name, spy)
        shared = getattr(mem.storage.search, name)  # the stores the shared search table holds (one here)

        async def shared_spy(query, where, limit, real=shared, **options):
            asked.append(limit)
            return await real(query, where, limit, **options)

        monkeypatch.setattr(mem.storage.search, name, shared_spy)
    await mem.search("hobbies", scope, budget_tokens=500)
    assert asked and min(asked) == RankingPolicy().budget_candidates
    asked.clear()
    await mem.search("hobbies", scope, k=3)
    assert asked and max(asked) == 20  # a top-k search keeps its small lists
    asked.clear()
    mem.ranking = RankingPolicy(budget_candidates=0)
    await mem.search("hobbies", scope, budget_tokens=500)
    assert asked and max(asked) == 500 // 15


async def test_a_500_token_search_brings_the_reply_to_its_best_turn(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)
    hits = await mem.search("Do you paint often?", scope, budget_tokens=500)
    ids = [s for h in hits for s in h.source_ids]
    assert ids[0] == "D1:4" and "D1:5" in ids[:3]  # the answer Ana gave comes along
    assert any(h.parts.get("neighbour_of") for h in hits)


CHAT = [
    ("Ben", "Hey Ana, long time no see!"),
    ("Ana", "Hi Ben! Yes, it has been ages."),
    ("Ben", "Ana, how is the new job going?"),
    ("Ana", "Busy, but I like it a lot."),
    ("Ben", "Good to hear, Ana."),
    ("Ana", "Thanks Ben, you are kind."),
    ("Ben", "What do you do when work gets too much?"),
    ("Ana", "Well, the week was long and the office was loud and my manager kept changing the plan, so on Sunday mornings "
            "I swim laps at the lake before anyone else is up."),
    ("Ben", "Ana, that sounds lovely."),
    ("Ana", "It is, Ben. See you soon!"),
    ("Ben", "Bye Ana, take care."),
    ("Ana", "Bye!"),
]


def test_a_query_loses_the_names_of_the_speakers_it_names():
    from memos.retrieval.speakers import without_speakers

    assert without_speakers("What activities does Melanie partake in?", {"Melanie"}) == "What activities does partake in?"
    assert without_speakers("What are Melanie's pets' names?", {"Melanie"}) == "What are pets' names?"
    assert without_speakers("what do jon and gina have in common?", {"Jon", "Gina"}) == "what do and have in common?"
    assert without_speakers("Did Will Smith call Smithers?", {"Will Smith"}) == "Did call Smithers?"
    assert without_speakers("What will Will do?", {"Will Smith"}) == "What will do?"  # as written: "will" stays
    assert without_speakers("王芳在哪个城市工作？", {"王芳"}) == "在哪个城市工作？"
    assert without_speakers("Melanie?", {"Melanie"}) == "Melanie?"  # nothing would be left
    assert without_speakers("Who likes hiking?", set()) == "Who likes hiking?"


def test_a_tally_counts_the_turns_that_call_a_speaker_by_name():
    from memos.retrieval.speakers import SpeakerTally

    turns = [("Ana", "Hi Ben!"), ("Ben", "Thanks, Ana."), ("Ben", "Anathema is a word."), ("user", "hello Ana"),
             ("王芳", "李明，你好"), ("李明", "好的")]
    tally = SpeakerTally.of([who for who, _ in turns], [said for _, said in turns])
    assert tally.said == {"Ana": 1, "Ben": 2, "user": 1, "王芳": 1, "李明": 1}
    assert tally.called == {"Ben": 1, "Ana": 2, "李明": 1}  # a whole word, as written; a role is never called
    assert tally.addressed("Ana") == 2 / 5 and tally.addressed("王芳") == 0.0
    more = tally.plus([("Ben", "Bye Ana"), ("Ana", "Bye, Ben!"), ("Ben", "Anathema.")])
    assert more is not None and more.said == {**tally.said, "Ana": 2, "Ben": 4} and more.called == {"Ben": 2, "Ana": 3, "李明": 1}
    assert tally.plus([("Cleo", "Hi Ana")]) is None  # a new speaker: count again from the start


async def test_the_turns_are_matched_without_the_name_a_speaker_is_called_by(mem, dialogue):
    # Ben calls Ana by name in most of his turns, and her short turns carry little but her name
    # ("Ana: Bye!"): with the name in the query both outranked the one turn that says how she unwinds
    scope = Scope("u")
    await dialogue(mem, scope, CHAT)
    for query in ("How does Ana unwind?", "What sport does Ana do?"):
        mem.ranking = RankingPolicy(addressed_share=2.0, neighbours=0)  # off: the name stays
        before = [h.source_ids[0] for h in await mem.search(query, scope, budget_tokens=4000)]
        assert before.index("D1:8") >= 5
        mem.ranking = RankingPolicy(neighbours=0)
        hits = await mem.search(query, scope, budget_tokens=4000)
        assert [h.source_ids[0] for h in hits][0] == "D1:8"
        assert all(h.parts.get("named_speaker") == 1.0 for h in hits if h.record.actor == "Ana")  # still Ana's turns first
        top = await mem.search(query, scope, k=3)  # a top-k search is ranked as before
        mem.ranking = RankingPolicy(addressed_share=2.0, neighbours=0)
        assert [h.id for h in top] == [h.id for h in await mem.search(query, scope, k=3)]


async def test_a_name_nobody_calls_a_speaker_by_stays_in_the_query(mem, dialogue):
    scope = Scope("u")
    await dialogue(mem, scope, TURNS)  # Ben never says "Ana"
    orders = []
    for share in (0.1, 2.0):
        mem.ranking = RankingPolicy(addressed_share=share, neighbours=0)
        orders.append([(h.id, round(h.score, 9)) for h in await mem.search("What hobbies does Ana have?", scope, budget_tokens=2000)])
    assert orders[0] == orders[1]


async def test_other_stores_are_searched_with_the_names(mem, dialogue):
    from memos.memtypes import Fact

    scope = Scope("u")
    await dialogue(mem, scope, CHAT)
    await mem.add(scope, [Fact(subject="Ben", summary="Ben's favourite dish is a mushroom risotto."),
                          Fact(subject="Ana", summary="Ana's favourite dish is a mushroom risotto.")])
    hits = await mem.search("What is Ana's favourite dish?", scope, budget_tokens=2000)
    ana, ben = (next(h for h in hits if h.memory_type == "semantic" and h.record.subject == who) for who in ("Ana", "Ben"))
    assert ana.parts["vector_score"] > ben.parts["vector_score"] + 0.02
    assert hits.index(ana) < hits.index(ben)


async def test_the_speakers_of_a_scope_are_read_once_and_follow_its_adds(mem, dialogue):
    from memos.retrieval.search import scope_speakers

    scope, other = Scope("u"), Scope("v")
    await dialogue(mem, scope, TURNS)
    await mem.ingest(other, [{"speaker": "Cleo", "text": "Hello Ana, from another user."}])
    tally = await scope_speakers(mem.storage, scope, "episodic")
    assert tally.said == {"Ana": 3, "Ben": 3} and tally.called == {"Ben": 1}
    reads = mem.storage.reads.misses
    assert await scope_speakers(mem.storage, scope, "episodic") == tally
    assert mem.storage.reads.misses == reads  # remembered at the table's version
    await mem.ingest(scope, [{"speaker": "Ben", "text": "Ana, you should try bouldering."}])
    tally = await scope_speakers(mem.storage, scope, "episodic")
    assert tally.said == {"Ana": 3, "Ben": 4} and tally.called == {"Ben": 1, "Ana": 1}
    assert mem.storage.reads.misses == reads  # carried past this process's own add
    await mem.ingest(scope, [{"speaker": "Dora", "text": "Hi Ana and Ben, I just joined."}])
    tally = await scope_speakers(mem.storage, scope, "episodic")
    assert tally.said["Dora"] == 1 and tally.called == {"Ben": 2, "Ana": 2}  # a new speaker: read again
    assert (await scope_speakers(mem.storage, other, "episodic")).said == {"Cleo": 1}
