"""Rows held in memory for the shared table's most searched filters
(`memos.store.lancedb.held_rows`): the same answers as LanceDB's own vector and full-text queries,
kept up to date by this process's writes, dropped when another process writes, never across scopes."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from memos.memtypes import Episode, Fact

from memos import MemoryOS, Scope
from memos.retrieval.search import fts_query
from memos.store.lancedb.held_reads import CHANGES_DIR
from memos.store.lancedb.held_rows import CATCH_UP_MAX_KEYS, UNEXPLAINED_SECONDS, HeldRows
from memos.store.lancedb.text_index import index_tokens
from memos.store.protocol import EVENT_TIME
from memos.store.scope import Where

ALICE, BOB = Scope("alice", "assistant", "s1"), Scope("bob", "assistant", "s1")


def shared_where(scope: Scope, **narrow) -> Where:
    """The filter a top-k search puts on the shared table."""
    return (Where(scope).status_in(narrow.get("statuses", ("active",))).time_range(EVENT_TIME, narrow.get("since"), narrow.get("until"))
            .tags_any(narrow.get("tags")))


async def both(mem: MemoryOS, query: str, where: Where, limit: int = 10) -> tuple[list, list]:
    """(LanceDB's answer, the held answer) for one vector search of the shared table."""
    index = mem.storage.search
    vector = await mem.embedder.embed_query(query)
    sql = where.condition()
    plain = await index.vector_search(vector, sql, limit)
    held = await index.vector_search(vector, sql, limit, test=where.test())
    return plain, held


def same(plain: list, held: list) -> None:
    assert [(r["memory_type"], r["id"]) for r in held] == [(r["memory_type"], r["id"]) for r in plain]
    assert [r["record"] for r in held] == [r["record"] for r in plain]
    assert np.allclose([r["_distance"] for r in held], [r["_distance"] for r in plain], atol=1e-5)


async def test_held_answers_are_lancedbs_and_follow_every_write(mem: MemoryOS) -> None:
    facts = [Fact(subject=f"topic {i}", summary=f"alice wrote note {i} about {w}") for i, w in
             zip(range(12), itertools.cycle(["hiking", "tea", "chess", "rain"]))]
    await mem.add(ALICE, facts)
    await mem.add(BOB, [Fact(subject="bob", summary=f"bob likes hiking trip {i}") for i in range(5)])
    held = mem.storage.search.held
    where = shared_where(ALICE)
    for _ in range(3):  # the first search notes the filter, the second loads it, the third is a hit
        same(*await both(mem, "hiking in the hills", where))
    assert held.loads == 1 and held.hits >= 2 and held.held_rows() == 12

    # an add, an archive that leaves the filter (status), a supersede, a delete: each one seen at once
    [new] = await mem.add(ALICE, [Fact(subject="trip", summary="alice went hiking in the Alps")])
    plain, found = await both(mem, "hiking in the Alps", where)
    same(plain, found)
    assert found[0]["id"] == new.id
    await mem.archive(ALICE, "semantic", facts[0].id)
    await mem.supersede(ALICE, "semantic", facts[4].id, Fact(subject="topic 4", summary="alice gave up hiking for cycling"))
    await mem.delete(ALICE, "semantic", new.id)
    loads = held.loads
    plain, found = await both(mem, "hiking in the Alps", where, limit=20)
    same(plain, found)
    ids = {r["id"] for r in found}
    assert new.id not in ids and facts[0].id not in ids and facts[4].id not in ids
    assert held.loads == loads  # kept up to date, not read again

    # another user's writes never reach alice's rows
    await mem.add(BOB, [Fact(subject="bob", summary="bob went hiking in the Alps")])
    plain, found = await both(mem, "hiking in the Alps", where, limit=50)
    same(plain, found)
    assert {r["id"] for r in found} <= {r["id"] for r in plain} and all("bob" not in r["record"] for r in found)


async def test_filters_held_are_the_sql_filters(mem: MemoryOS, clock) -> None:
    """Tags, time ranges, statuses and scopes narrowed to an agent or none: the held copy
    keeps what LanceDB's filter keeps, also for rows written after it was read."""
    start = clock()
    for day, tags in zip(range(6), itertools.cycle([["a"], ["b"], ["a", "b"], []])):
        await mem.add(Scope("carol", "planner" if day % 2 else "", "s1"),
                      [Episode(summary=f"carol walked the dog on day {day}", occurred_at=start + timedelta(days=day), tags=tags)])
    wheres = [
        shared_where(Scope("carol")),
        shared_where(Scope("carol", "planner")),
        shared_where(Scope("carol", "")),
        shared_where(Scope("carol"), tags=["a"]),
        shared_where(Scope("carol"), since=start + timedelta(days=2), until=start + timedelta(days=5)),
        shared_where(Scope("carol"), statuses=("active", "archived")),
    ]
    for where in wheres:
        for _ in range(3):
            same(*await both(mem, "walking the dog", where))
    await mem.add(Scope("carol", "planner", "s1"),
                  [Episode(summary="carol walked the dog in the rain", occurred_at=start + timedelta(days=3), tags=["a"])])
    for where in wheres:
        same(*await both(mem, "walking the dog in the rain", where))
    assert mem.storage.search.held.loads == len(wheres)


async def cats_held(db_path, embedder, clock, vault_key) -> tuple[MemoryOS, list, Where, HeldRows]:
    """A store whose first open holds alice's three cats (searched three times)."""
    one = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    cats = await one.add(ALICE, [Fact(subject="pets", summary=f"alice has a cat named {n}") for n in ("Tom", "Mia", "Leo")])
    where = shared_where(ALICE)
    for _ in range(3):
        same(*await both(one, "alice's cat", where))
    return one, cats, where, one.storage.search.held


async def test_another_process_writes_are_caught_up_from_its_notices(db_path, embedder, clock, vault_key) -> None:
    one, (tom, mia, leo), where, held = await cats_held(db_path, embedder, clock, vault_key)
    assert held.held_rows() == 3 and held.loads == 1
    # a second open of the store has counters of its own: to the first, its writes are another process's
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    [new] = await other.add(ALICE, [Fact(subject="pets", summary="alice adopted a cat named Kiwi")])
    await other.add(BOB, [Fact(subject="pets", summary="bob adopted a cat named Rex")])
    plain, found = await both(one, "alice adopted a cat", where)
    same(plain, found)
    assert found[0]["id"] == new.id and held.held_rows() == 4  # the other's rows read again, not the whole filter
    assert held.loads == 1 and held.catch_ups >= 1
    # an archive that leaves the filter, a supersede, a delete, and this process's own write between them
    await other.archive(ALICE, "semantic", tom.id)
    await one.add(ALICE, [Fact(subject="pets", summary="alice feeds the cats at seven")])
    leo2 = await other.supersede(ALICE, "semantic", leo.id, Fact(subject="pets", summary="alice's cat Leo is now called Leon"))
    await other.delete(ALICE, "semantic", mia.id)
    hits = held.hits
    plain, found = await both(one, "alice's cat", where)
    same(plain, found)
    assert held.hits == hits + 1 and held.loads == 1
    ids = {r["id"] for r in found}
    assert ids & {tom.id, mia.id, leo.id} == set() and leo2.id in ids and held.held_rows() == 3


async def test_a_version_nobody_explained_drops_what_is_held(db_path, embedder, clock, vault_key) -> None:
    """A commit with no notice (its process died between the two, or the notice file went before
    it was read): the held copies do not hide it for longer than `UNEXPLAINED_SECONDS`."""
    one, _, where, held = await cats_held(db_path, embedder, clock, vault_key)
    now = [0.0]
    held.clock = lambda: now[0]
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    [kiwi] = await other.add(ALICE, [Fact(subject="pets", summary="alice adopted a cat named Kiwi")])
    for notice in (db_path / CHANGES_DIR).iterdir():  # the notices are gone before the first process read them
        if not notice.name.startswith(one.storage.search.reads.changes._prefix):
            notice.unlink()
    await both(one, "alice adopted a cat", where)
    assert held.held_rows() == 3  # taken as the other's commit on its way ...
    now[0] += UNEXPLAINED_SECONDS + 1
    await other.add(ALICE, [Fact(subject="pets", summary="alice adopted a dog named Pip")])
    plain, found = await both(one, "alice adopted a cat", where)
    assert held.held_rows() == 0 and kiwi.id in [r["id"] for r in plain]  # ... until too long: dropped, asked of LanceDB
    for _ in range(2):
        same(*await both(one, "alice adopted a cat", where))
    assert held.held_rows() == 5


async def test_search_results_unchanged_by_held_rows(mem: MemoryOS) -> None:
    """The facade's top-k search gives the same hits with the held copy as without it."""
    await mem.add(ALICE, [Fact(subject=f"s{i}", summary=s) for i, s in enumerate(
        ["alice's sister lives in Lyon", "alice plays the cello", "alice works as a nurse", "alice's cat is called Tom",
         "alice ran a half marathon in May", "alice 的猫叫汤姆", "alice prefers green tea"])])
    first = await mem.search("what instrument does alice play", ALICE, k=5)
    for _ in range(2):
        again = await mem.search("what instrument does alice play", ALICE, k=5)
    assert mem.storage.search.held.hits >= 1
    assert [(h.record.id, round(h.score, 5)) for h in again] == [(h.record.id, round(h.score, 5)) for h in first]


# --- the copy's own rules, on rows made here ------------------------------------------------

def rows(keys: list[str], user: str = "u") -> list[dict]:
    rng = np.random.default_rng(7)
    return [{"key": k, "user_id": user, "agent_id": "", "session_id": "", "status": "active",
             "vector": rng.normal(size=4).astype(np.float32), "record": f'["semantic","{k}",0.5,0]\n{{}}'} for k in keys]


def load(held: HeldRows, data: list[dict], before: int, after: int | None = None, generation: int | None = None) -> bool:
    """A load's end: `keep` of rows read between versions `before` and `after`."""
    began = generation is None
    generation = held.begin() if generation is None else generation
    try:
        return held.keep("w", False, shared_where(Scope("u")).test(), 0, generation, before, before if after is None else after,
                         [r["key"] for r in data], np.stack([r["vector"] for r in data]), [r["record"] for r in data], None)
    finally:
        if began:
            held.end()


def keys_of(held: HeldRows, vector=np.ones(4), epoch: int = 0) -> list[str]:
    found = held.nearest("w", False, epoch, vector, 100)
    return sorted(r["record"].split('"')[3] for r in found) if found is not None else None


def test_a_load_is_kept_only_at_one_version_and_takes_the_writes_after_it() -> None:
    held = HeldRows()
    data = rows(["a", "b"])
    assert not load(held, data, 4, 5)  # a write landed while it read: which version it saw is unknown
    assert keys_of(held) is None
    held.wrote(2, rows(["y"]))  # before the load began: in what it reads, not logged
    generation = held.begin()
    held.wrote(5, rows(["c"]), ["a"])  # landed while it read, after the version it read
    held.wrote(3, rows(["z"]))  # reported late, older than the version it read: in it already (or removed since)
    assert load(held, data, 4, generation=generation)
    held.end()
    assert held._log == []  # nothing in flight: nothing logged
    assert keys_of(held) == ["b", "c"]
    held.wrote(7, [{**rows(["b"])[0], "status": "archived"}])  # leaves the filter
    held.wrote(6, rows(["b"]))  # an older write of the same key, reported late: changes nothing
    held.wrote(8, rows(["d"], user="other"))  # another scope's row
    assert keys_of(held) == ["c"]
    held.wrote(None)  # an outcome unknown: nothing is trusted
    assert keys_of(held) is None


def test_a_load_is_not_kept_after_a_clear_or_too_many_writes_beside_it() -> None:
    held = HeldRows()
    data = rows(["a", "b"])
    generation = held.begin()
    held.clear()
    assert not load(held, data, 1, generation=generation)
    held.end()
    generation = held.begin()
    held.wrote(2, rows([f"k{i}" for i in range(9_000)]))  # more than are logged for a load
    assert not load(held, data, 1, generation=generation)
    held.end()
    assert load(held, data, 3) and keys_of(held) == ["a", "b"]


def test_a_key_read_twice_is_held_once() -> None:
    held = HeldRows()
    data = rows(["a", "a", "b"])
    assert load(held, data, 1)
    held.wrote(2, (), ["a"])
    assert keys_of(held) == ["b"]


def test_nearest_is_cosine_and_skips_rows_without_vectors() -> None:
    held = HeldRows()
    data = rows(["a", "b", "c"])
    data[1]["vector"] = np.full(4, np.nan, dtype=np.float32)  # no vector stored
    data[2]["vector"] = np.zeros(4, dtype=np.float32)
    assert load(held, data, 1)
    query = np.array([1.0, 2.0, 0.0, -1.0], dtype=np.float32)
    found = held.nearest("w", False, 0, query, 10)
    a = data[0]["vector"]
    assert [r["record"] for r in found] == [data[0]["record"]]
    assert found[0]["_distance"] == pytest.approx(1 - a @ query / (np.linalg.norm(a) * np.linalg.norm(query)), abs=1e-6)


def test_filters_too_large_are_left_to_lancedb_and_not_read_again() -> None:
    held = HeldRows(budget=4 * 2_000)  # one filter may hold 2000 // (4 * 4 + 512) = 3 rows
    data = rows(["a", "b", "c", "d"])
    assert held.wanted("w", False, 0) is False and held.wanted("w", False, 0) is True
    assert not load(held, data, 1)
    assert held.wanted("w", False, 0) is False and held.wanted("w", False, 0) is False


def test_where_test_matches_its_sql_on_the_edges() -> None:
    when = datetime(2026, 5, 1, tzinfo=UTC)
    row = {"user_id": "u", "agent_id": "", "session_id": "s", "status": "active", "tags": ["x"], EVENT_TIME: when, "id": "r1"}
    check = lambda where: where.test()(row)  # noqa: E731
    assert check(Where(Scope("u", "bot")))  # the user's shared rows are seen by every agent
    assert not check(Where(Scope("u", "bot", "other")))
    assert not check(Where(Scope("v")))
    assert check(Where(Scope("u")).time_range(EVENT_TIME, when, when + timedelta(seconds=1)))
    assert not check(Where(Scope("u")).time_range(EVENT_TIME, None, when))  # until is exclusive
    assert check(Where(Scope("u")).time_range(EVENT_TIME, when.replace(tzinfo=None), None))  # naive is UTC
    assert not check(Where(Scope("u")).time_range(EVENT_TIME, when, None).eq("status", "archived"))
    assert not Where(Scope("u")).tags_any(["x"]).test()({**row, "tags": None})  # NULL: no match
    assert not Where(Scope("u")).time_range(EVENT_TIME, when, None).test()({**row, EVENT_TIME: None})
    assert check(Where(Scope("u")).any_time_window(EVENT_TIME, [(when - timedelta(days=1), when)]))
    assert check(Where(Scope("u")).id_in(["r1", "r2"])) and not check(Where(Scope("u")).any_of("id", []))
    assert Where(Scope("u")).raw("importance > 0.5").test() is None  # SQL alone: no test, nothing held


def test_removed_rows_make_room_for_new_ones() -> None:
    """A copy of a scope whose rows come and go stays the size of its live rows."""
    held = HeldRows()
    assert load(held, rows(["k0"]), 1)
    version = 2
    for i in range(1, 200):  # each new row replaces the one before it
        held.wrote(version, rows([f"k{i}"]), [f"k{i - 1}"])
        version += 1
    copy = held._held[("w", False)].rows
    assert keys_of(held) == ["k199"] and len(copy.alive) <= 32
    assert held.held_rows() == 1


# --- full text ----------------------------------------------------------------------------

TEXTS = ["alice plays the cello in an orchestra", "alice's cat is called Tom; the cat sleeps all day",
         "alice ran a half marathon in May, running with her sister", "alice 的猫叫汤姆，它很喜欢睡觉",
         "周末 alice 在杭州打羽毛球 with friends", "alice prefers green tea to coffee", "the the and of",
         "alice went running by the river and the cats ran after her"]
QUERIES = ["running cats", "cello orchestra", "猫 睡觉", "羽毛球 friends", "tea tea coffee", "the of", "unknownword"]


async def both_text(mem: MemoryOS, query: str, where: Where, limit: int = 10) -> tuple[list, list]:
    """(LanceDB's answer, the held answer) for one full-text search of the shared table."""
    index = mem.storage.search
    text, sql = fts_query(query), where.condition()
    return await index.text_search(text, sql, limit), await index.text_search(text, sql, limit, test=where.test())


def same_text(plain: list, held: list) -> None:
    """The same rows with the same scores (LanceDB's in float32), in the same order where the scores differ."""
    assert sorted((r["memory_type"], r["id"]) for r in held) == sorted((r["memory_type"], r["id"]) for r in plain)
    by_key = {(r["memory_type"], r["id"]): r["_score"] for r in plain}
    for r in held:
        assert r["_score"] == pytest.approx(by_key[r["memory_type"], r["id"]], rel=1e-5)
    assert [r["_score"] for r in held] == sorted((r["_score"] for r in held), reverse=True)


async def test_held_full_text_answers_are_lancedbs_and_follow_every_write(mem: MemoryOS) -> None:
    facts = [Fact(subject=f"note {i}", summary=text) for i, text in enumerate(TEXTS)]
    await mem.add(ALICE, facts)
    await mem.add(BOB, [Fact(subject="bob", summary=f"bob's cats were running in the park {i}") for i in range(4)])
    index = mem.storage.search
    await index.rebuild_text_index()  # an index of the rows as they are: LanceDB's scores are then BM25 over them
    held, where = index.held, shared_where(ALICE)
    for _ in range(3):  # noted, loaded (rows and terms), answered
        same_text(*await both_text(mem, "running cats", where))
    assert held.text_hits >= 2 and held.terms is not None and held.held_rows() == len(TEXTS)
    for query in QUERIES:
        plain, found = await both_text(mem, query, where)
        same_text(plain, found)
        assert all("bob" not in r["record"] for r in found)  # bob's rows count in the terms, never in the hits
    assert not (await both_text(mem, "the of", where))[1]  # stop words only: nothing, as LanceDB

    # an add, an archive that leaves the filter, a supersede, a delete, and another user's add
    loads = held.loads
    [new] = await mem.add(ALICE, [Fact(subject="cats", summary="alice adopted two cats who love running")])
    await mem.archive(ALICE, "semantic", facts[1].id)
    await mem.supersede(ALICE, "semantic", facts[2].id, Fact(subject="running", summary="alice stopped running; she swims"))
    await mem.delete(ALICE, "semantic", facts[7].id)
    await mem.add(BOB, [Fact(subject="bob", summary="bob's cats love running and cats and more cats")])
    found = {q: (await both_text(mem, q, where))[1] for q in QUERIES}
    assert held.loads == loads  # kept up to date, not read again
    assert found["running cats"][0]["id"] == new.id
    assert {facts[1].id, facts[2].id, facts[7].id}.isdisjoint(r["id"] for r in found["running cats"])
    await index.rebuild_text_index()  # LanceDB's answer from an index of the rows as they are now
    for query in QUERIES:
        plain, _ = await both_text(mem, query, where)
        same_text(plain, found[query])


async def test_held_full_text_with_narrower_filters_and_text(mem: MemoryOS, clock) -> None:
    start = clock()
    for day, tags in zip(range(6), itertools.cycle([["a"], ["b"], ["a", "b"], []])):
        await mem.add(Scope("carol", "planner" if day % 2 else "", "s1"),
                      [Episode(summary=f"carol walked the dog in the park on day {day}", occurred_at=start + timedelta(days=day),
                               tags=tags)])
    await mem.storage.search.rebuild_text_index()
    index = mem.storage.search
    wheres = [shared_where(Scope("carol", "planner")), shared_where(Scope("carol"), tags=["a"]),
              shared_where(Scope("carol"), since=start + timedelta(days=2), until=start + timedelta(days=5))]
    for where in wheres:
        sql = where.condition()
        for _ in range(3):
            plain = await index.text_search("walked dog park", sql, 10, with_text=True)
            found = await index.text_search("walked dog park", sql, 10, with_text=True, test=where.test())
            same_text(plain, found)
            assert [r["text"] for r in sorted(found, key=lambda r: r["id"])] == [r["text"] for r in sorted(plain, key=lambda r: r["id"])]
    assert index.held.text_hits >= len(wheres)


async def test_another_process_writes_are_caught_up_in_the_held_terms(db_path, embedder, clock, vault_key) -> None:
    one = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    await one.add(ALICE, [Fact(subject="pets", summary=f"alice has a cat named {n}") for n in ("Tom", "Mia", "Leo")])
    where = shared_where(ALICE)
    for _ in range(3):
        await both_text(one, "cat named", where)
    held = one.storage.search.held
    assert held.terms is not None and held.text_hits >= 1
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    [new] = await other.add(ALICE, [Fact(subject="pets", summary="alice adopted a cat named Kiwi")])
    await other.add(BOB, [Fact(subject="pets", summary="bob has a cat named Kiwi too")])  # in the terms, not in the filter
    await other.storage.search.rebuild_text_index()  # LanceDB's scores from every row, as the held terms give them
    hits = held.text_hits
    for query in ("Kiwi", "cat named", "adopted"):
        plain, found = await both_text(one, query, where)
        same_text(plain, found)
    assert held.text_hits == hits + 3 and [r["id"] for r in found] == [new.id] and held.loads == 1


async def test_index_tokens_are_the_indexs_text_by_text(mem: MemoryOS) -> None:
    """The tokens the held terms count are those the shared table's full-text index makes."""
    from memos.store.fulltext import index_form
    texts = ["Running cats, running DOGS!", None, "", "the and of", index_form("周末在杭州打羽毛球 badminton"),
             "a zqxjmemosdocbreakzqxj in the text", "naïve café façade", "x" * 60 + " long words", "C++ e-mail 3.14 @user #tag"]
    await mem.add(ALICE, [Fact(subject="note", summary="anything")])  # the shared table and its index exist
    table = mem.storage.search.table
    assert index_tokens(texts) == [[t.text for t in await table.tokenize(text, column="text")] if text else [] for text in texts]


def text_rows(texts: dict[str, str], user: str = "u") -> list[dict]:
    return [{**row, "text": texts[row["key"]]} for row in rows(list(texts), user)]


def load_text(held: HeldRows, data: list[dict], table: list[dict], before: int) -> None:
    """Load a filter's rows and the table's terms, both read at version `before`."""
    assert load(held, data, before)
    generation = held.begin()
    assert held.keep_terms(0, generation, before, before, [r["key"] for r in table], index_tokens([r["text"] for r in table]), True)
    held.end()


def best(held: HeldRows, query: str) -> list[tuple[str, float]] | None:
    found = held.best_text("w", False, 0, query, 10)
    return None if found is None else [(r["record"].split('"')[3], round(r["_score"], 6)) for r in found]


def bm25(table: dict[str, str], query: str, key: str) -> float:
    """BM25 as LanceDB's index computes it, from the texts alone."""
    tokens = dict(zip(table, index_tokens(list(table.values())), strict=True))
    docs = [t for t in tokens.values() if t]
    average = sum(map(len, docs)) / len(docs)
    score = 0.0
    for term in index_tokens([query])[0]:
        tf, df = tokens[key].count(term), sum(term in t for t in docs)
        if tf:
            score += math.log(1 + (len(docs) - df + 0.5) / (df + 0.5)) * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(tokens[key]) / average))
    return round(score, 6)


def test_held_terms_follow_writes_in_version_order() -> None:
    held = HeldRows(tokenizer=index_tokens)
    table = {"a": "cats running", "b": "dogs running fast", "c": "cats and dogs", "z": "cats cats cats"}
    mine = text_rows({k: v for k, v in table.items() if k != "z"})
    load_text(held, mine, text_rows({"z": table["z"]}, user="other") + mine, 4)
    assert best(held, "cats") == [(k, bm25(table, "cats", k)) for k in ("a", "c")]
    held.wrote(6, text_rows({"d": "cats sleeping"}), ["c"])
    held.wrote(5, text_rows({"c": "cats everywhere"}))  # older than the delete of c, reported late: changes nothing
    held.wrote(3, text_rows({"e": "cats"}))  # older than the load: in it already (or removed since)
    now = {"a": table["a"], "b": table["b"], "d": "cats sleeping", "z": table["z"]}
    assert best(held, "cats") == sorted([(k, bm25(now, "cats", k)) for k in ("a", "d")], key=lambda x: -x[1])
    held.wrote(7, [{**text_rows({"a": "cats running"})[0], "status": "archived"}])  # leaves the filter, stays in the terms
    assert best(held, "cats") == [("d", bm25(now, "cats", "d"))]
    held.wrote(None)
    assert best(held, "cats") is None and held.terms is None


def test_held_terms_are_not_kept_across_versions_or_for_a_table_too_large() -> None:
    held = HeldRows(tokenizer=index_tokens)
    data = text_rows({"a": "cats"})
    assert load(held, data, 1)
    generation = held.begin()
    assert not held.keep_terms(0, generation, 1, 2, ["a"], [["cat"]], True)  # a write landed while it read
    assert not held.keep_terms(0, generation, 1, 1, [], [], False)  # more rows than are held
    held.end()
    assert held.best_text("w", False, 1, "cats", 10) is None  # a search at another epoch (another process committed)
    assert held.terms is None and not held.terms_wanted(0) and held.terms_wanted(1)
    assert best(held, "cats") is None
    assert not HeldRows(tokenizer=None).terms_wanted(0)  # no tokenizer: full text is LanceDB's


def test_held_postings_survive_rows_moving_together() -> None:
    held = HeldRows(tokenizer=index_tokens)
    texts = {"k0": "cats"}
    load_text(held, text_rows(texts), text_rows(texts), 1)
    assert best(held, "cats") == [("k0", bm25(texts, "cats", "k0"))]
    for i in range(1, 120):  # each new row replaces the one before it: the rows move together now and then
        held.wrote(i + 1, text_rows({f"k{i}": "cats " * (i % 3 + 1)}), [f"k{i - 1}"])
    now = {"k119": "cats " * (119 % 3 + 1)}
    assert best(held, "cats") == [("k119", bm25(now, "cats", "k119"))]


def test_held_postings_of_rows_set_again_and_again_stay_exact() -> None:
    """A row written again leaves its old tokens dead in the copy's postings until they are packed."""
    held = HeldRows(tokenizer=index_tokens)
    words = ["cats", "dogs", "river", "tea", "pottery", "sweden"]
    texts = {"a": "cats", "b": "dogs"}
    load_text(held, text_rows(texts), text_rows(texts), 1)
    assert best(held, "cats") == [("a", bm25(texts, "cats", "a"))]
    copy = held._held[("w", False)].rows
    for i in range(150):  # 40 tokens a write: the dead entries pass 1,024 and half of all, and are packed
        texts = {"a": " ".join(words[(i + j) % 6] for j in range(40)), "b": " ".join(words[(i * j) % 6] for j in range(40))}
        held.wrote(i + 2, text_rows(texts))
        if i in (20, 149):
            for query in ("cats", "river tea", "pottery sweden dogs"):
                assert best(held, query) == sorted([(k, bm25(texts, query, k)) for k in texts if bm25(texts, query, k)],
                                                   key=lambda x: -x[1])
    postings = copy.postings
    assert postings is not None and postings.used < 1_200 and postings.dead < 1_100


def test_held_postings_sorted_by_token_and_the_rows_added_after() -> None:
    """A search reads the entries sorted by token, and the ones added since it sorted them."""
    held = HeldRows(tokenizer=index_tokens)
    words = ["cats", "dogs", "river", "tea", "pottery", "sweden", "running", "coffee", *(f"w{i}" for i in range(22))]
    texts = {f"k{i}": " ".join(words[(i * j + j // 3) % 30] for j in range(20)) for i in range(60)}
    load_text(held, text_rows(texts), text_rows(texts), 1)

    def check(query: str) -> None:
        """The ten best scores, each of the row it names (rows of one score may come in any order)."""
        scores = {k: bm25(texts, query, k) for k in texts}
        found = best(held, query)
        assert found is not None and [score for _, score in found] == sorted((x for x in scores.values() if x), reverse=True)[:10]
        assert all(scores[k] == score for k, score in found)

    check("river tea")
    postings = held._held[("w", False)].rows.postings
    assert postings is not None and postings.sorted == postings.used >= 600
    for i in range(60, 70):
        texts[f"k{i}"] = "pottery pottery sweden " + " ".join(words[(i + j) % 30] for j in range(i % 5))
    held.wrote(2, text_rows({k: texts[k] for k in list(texts)[60:]}), ["k1", "k2"])
    del texts["k1"], texts["k2"]
    for query in ("pottery sweden", "cats dogs coffee", "river"):
        check(query)
    assert postings.used > postings.sorted  # the rows added since were read apart


def test_terms_dropped_soon_are_read_again_later_and_later() -> None:
    """A store whose held rows are dropped all the time: the whole table's terms are not read at every lull."""
    held = HeldRows(tokenizer=index_tokens)
    texts = {"a": "cats"}
    waits = []
    for _ in range(5):
        searches = 1
        while held.best_text("w", False, 0, "cats", 10) is None and not held.terms_wanted(0):
            searches += 1
        waits.append(searches)
        generation = held.begin()
        assert held.keep_terms(0, generation, 1, 1, list(texts), index_tokens(list(texts.values())), True)
        held.end()
        held.clear()  # dropped before it served many searches
    assert waits == [1, 2, 4, 8, 16]


def test_a_catch_up_takes_the_others_keys_at_the_version_it_read_them() -> None:
    held = HeldRows()
    assert load(held, rows(["a", "b", "c"]), 4)
    assert held.behind(1) and not held.behind(0)
    held.noticed(5, 5, ["a", "x"])  # another process set a and x at 5 ...
    held.noticed(9, 9, ["b"])  # ... and b at 9, a version the catch-up below reads before
    held.wrote(6, rows(["a"]))  # this process's write of a, newer than the other's
    held.known([6, 7, 8])
    generation = held.begin()
    assert sorted(held.pending()) == ["a", "b", "x"]
    # read at version 8: x set, b as it was before 9, a gone (a delete after this process's write at 6)
    assert held.caught_up(1, generation, 8, held.pending(), rows(["x", "b"]))
    held.end()
    assert not held.behind(1) and keys_of(held, epoch=1) == ["b", "c", "x"]
    assert held.pending() == ["b"]  # changed at 9, after what was read: read again next time
    held.wrote(7, rows(["a"]))  # this process's write of a reported late, older than what the catch-up read
    assert keys_of(held, epoch=1) == ["b", "c", "x"]


def test_a_catch_up_during_a_load_reaches_the_loaded_copy() -> None:
    held = HeldRows()
    generation = held.begin()  # a load reads at version 3
    catch = held.begin()
    held.noticed(4, 4, ["z"])
    assert held.caught_up(0, catch, 4, ["z"], rows(["z"]))
    held.end()
    assert load(held, rows(["a"]), 3, generation=generation)
    held.end()
    assert keys_of(held) == ["a", "z"]


def test_versions_nobody_explained_drop_everything_after_a_while() -> None:
    now = [0.0]
    held = HeldRows(clock=lambda: now[0])
    assert load(held, rows(["a"]), 4)
    held.known([5, 7])  # 6: committed by someone who posted no notice (yet)
    assert held.caught_up(1, held.begin(), 7, [], [])
    held.end()
    assert keys_of(held, epoch=1) == ["a"]  # a notice on its way: still held
    now[0] += UNEXPLAINED_SECONDS / 2
    held.noticed(6, 6, [])
    assert held.caught_up(2, held.begin(), 7, [], [])
    held.end()
    held.known([8])
    now[0] += UNEXPLAINED_SECONDS * 2
    assert held.caught_up(3, held.begin(), 9, [], [])  # 9 unexplained from now on
    held.end()
    now[0] += UNEXPLAINED_SECONDS + 1
    assert not held.caught_up(3, held.begin(), 9, [], [])
    held.end()
    assert keys_of(held, epoch=3) is None and held.empty()
    assert load(held, rows(["a"]), 9)
    held.noticed(10, 10, [f"k{i}" for i in range(CATCH_UP_MAX_KEYS + 1)])  # more than one catch-up reads
    assert held.empty()


async def test_a_notice_not_understood_drops_what_is_held(db_path, embedder, clock, vault_key) -> None:
    one, _, where, held = await cats_held(db_path, embedder, clock, vault_key)
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    other.storage.search.reads.changes.post({"v": "not versions"})  # a file written by something else, or damaged
    [kiwi] = await other.add(ALICE, [Fact(subject="pets", summary="alice adopted a cat named Kiwi")])
    plain, found = await both(one, "alice adopted a cat", where)
    assert held.held_rows() == 0 and found[0]["id"] == plain[0]["id"] == kiwi.id


async def test_two_opens_writing_and_searching_in_turn_answer_as_lancedb(db_path, embedder, clock, vault_key) -> None:
    """Two opens of one store (two processes, to each other) interleave adds, updates, supersedes
    and deletes of two users' records with searches of both kinds: every held answer is LanceDB's,
    and the held copies were kept through the other's commits (caught up), not read again each time."""
    import random

    rng = random.Random(2)
    opens = [await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key) for _ in range(2)]
    words = ["cat", "tea", "hiking", "chess", "rain", "猫", "羽毛球", "garden", "piano", "boat"]
    live: dict[Scope, list[str]] = {ALICE: [], BOB: []}
    for step in range(60):
        mem, scope = rng.choice(opens), rng.choice([ALICE, BOB])
        roll = rng.random()
        if roll < 0.45 or len(live[scope]) < 3:
            summary = " ".join(rng.sample(words, 3)) + f" note {step}"
            [fact] = await mem.add(scope, [Fact(subject=rng.choice(words), summary=summary)])
            live[scope].append(fact.id)
        elif roll < 0.55:
            await mem.archive(scope, "semantic", live[scope].pop(rng.randrange(len(live[scope]))))
        elif roll < 0.62:
            old = live[scope].pop(rng.randrange(len(live[scope])))
            live[scope].append((await mem.supersede(scope, "semantic", old, Fact(subject="new", summary=f"{rng.choice(words)} again"))).id)
        elif roll < 0.68:
            await mem.delete(scope, "semantic", live[scope].pop(rng.randrange(len(live[scope]))))
        else:
            where, query = shared_where(scope), " ".join(rng.sample(words, 2))
            plain, found = await both(mem, query, where, limit=50)  # records of one text tie: their order is either's
            assert sorted((round(r["_distance"], 5), r["id"], r["record"]) for r in found) == sorted(
                (round(r["_distance"], 5), r["id"], r["record"]) for r in plain)
            assert [r["_distance"] for r in found] == sorted(r["_distance"] for r in found)
            plain, found = await both_text(mem, query, where, limit=50)
            assert sorted(r["id"] for r in found) == sorted(r["id"] for r in plain)
            assert {r["id"] for r in found} <= set(live[scope])
    for mem in opens:
        held = mem.storage.search.held
        assert held.hits > 0 and held.loads <= 4, (held.hits, held.loads)
    assert sum(mem.storage.search.held.catch_ups for mem in opens) > 0
