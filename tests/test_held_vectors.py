"""Vectors held in memory for the shared table's most searched filters
(`memos.store.lancedb.held_vectors`): the same answers as LanceDB's own vector query, kept
up to date by this process's writes, dropped when another process writes, never across scopes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from memos.memtypes import Episode, Fact

from memos import MemoryOS, Scope
from memos.store.lancedb.held_vectors import HeldVectors
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

    # an add, an update that leaves the filter (status), a supersede, a delete: each one seen at once
    [new] = await mem.add(ALICE, [Fact(subject="trip", summary="alice went hiking in the Alps")])
    plain, found = await both(mem, "hiking in the Alps", where)
    same(plain, found)
    assert found[0]["id"] == new.id
    await mem.update(ALICE, "semantic", facts[0].id, {"status": "archived"})
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


async def test_another_process_write_is_found_and_drops_the_copy(db_path, embedder, clock, vault_key) -> None:
    one = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    await one.add(ALICE, [Fact(subject="pets", summary=f"alice has a cat named {n}") for n in ("Tom", "Mia", "Leo")])
    where = shared_where(ALICE)
    for _ in range(3):
        same(*await both(one, "alice's cat", where))
    held = one.storage.search.held
    assert held.held_rows() == 3
    # a second open of the store has counters of its own: to the first, its writes are another process's
    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    [new] = await other.add(ALICE, [Fact(subject="pets", summary="alice adopted a cat named Kiwi")])
    plain, found = await both(one, "alice adopted a cat", where)
    same(plain, found)
    assert found[0]["id"] == new.id
    assert held.held_rows() == 0  # dropped, asked of LanceDB
    for _ in range(2):  # two searches with no other write in between: held again
        same(*await both(one, "alice adopted a cat", where))
    assert held.held_rows() == 4


async def test_search_results_unchanged_by_held_vectors(mem: MemoryOS) -> None:
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


def load(held: HeldVectors, data: list[dict], before: int, after: int | None = None, generation: int | None = None) -> bool:
    """A load's end: `keep` of rows read between versions `before` and `after`."""
    began = generation is None
    generation = held.begin() if generation is None else generation
    try:
        return held.keep("w", False, shared_where(Scope("u")).test(), 0, generation, before, before if after is None else after,
                         [r["key"] for r in data], np.stack([r["vector"] for r in data]), [r["record"] for r in data], None)
    finally:
        if began:
            held.end()


def keys_of(held: HeldVectors, vector=np.ones(4)) -> list[str]:
    found = held.nearest("w", False, 0, vector, 100)
    return sorted(r["record"].split('"')[3] for r in found) if found is not None else None


def test_a_load_is_kept_only_at_one_version_and_takes_the_writes_after_it() -> None:
    held = HeldVectors()
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
    held = HeldVectors()
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
    held = HeldVectors()
    data = rows(["a", "a", "b"])
    assert load(held, data, 1)
    held.wrote(2, (), ["a"])
    assert keys_of(held) == ["b"]


def test_nearest_is_cosine_and_skips_rows_without_vectors() -> None:
    held = HeldVectors()
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
    held = HeldVectors(budget=4 * 2_000)  # one filter may hold 2000 // (4 * 4 + 512) = 3 rows
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
    held = HeldVectors()
    assert load(held, rows(["k0"]), 1)
    version = 2
    for i in range(1, 200):  # each new row replaces the one before it
        held.wrote(version, rows([f"k{i}"]), [f"k{i - 1}"])
        version += 1
    copy = held._held[("w", False)].rows
    assert keys_of(held) == ["k199"] and len(copy.alive) <= 32
    assert held.held_rows() == 1
