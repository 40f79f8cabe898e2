"""Speaker-aware ranking (memos.speakers): a query naming one of the speakers favours their turns."""

from __future__ import annotations

from memos import Scope
from memos.ranking import RankingPolicy
from memos.speakers import named_speakers

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
