"""Bad input at the facade: memos errors naming the fix, unique ids, secrets kept out of captions.

The property test drives the public `MemoryOS` methods with hostile arguments: each call
either succeeds as documented or raises a `MemosError`, and on error every table (history
and meta included) hashes the same as before.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from conftest import store_hashes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memos.memtypes import Episode, Fact, MemoryRecord, VaultItem
from pydantic_ai.embeddings import Embedder, TestEmbeddingModel

from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.crypto import VaultAccessError
from memos.exceptions import ConfigError, DuplicateIdError, InvalidFilterError, InvalidRecordError, MemosError
from memos.portability import export_scope, import_lines
from memos.retrieval.ranking import Hit
from memos.store.history import HistoryEntry

ALICE, BOB = Scope("alice", "bot", "s1"), Scope("bob", "bot", "s1")


# --- the cases the issue reported, one by one ---------------------------------------------------

async def test_reported_inputs_get_memos_errors_that_name_the_fix(mem, alice):
    with pytest.raises(InvalidRecordError, match="unpaired surrogates"):
        await mem.add(alice, Fact.model_construct(subject="a", summary="x\ud800y"))
    with pytest.raises(InvalidRecordError, match="the limit is 1,000,000"):
        await mem.add(alice, Fact.model_construct(subject="a", summary="x" * 10_000_000))
    with pytest.raises(InvalidRecordError, match="unpaired surrogates|cannot be stored"):
        await mem.ingest(alice, [{"speaker": "alice", "text": "hi \udc00"}])
    with pytest.raises(InvalidFilterError, match="k must be between 1 and 1,000"):
        await mem.search("tea", alice, k=10**18)
    with pytest.raises(InvalidFilterError, match="budget_tokens must be between"):
        await mem.search("tea", alice, budget_tokens=10**18)
    with pytest.raises(InvalidFilterError, match="scope must be a memos.Scope"):
        await mem.search("tea", "alice")
    with pytest.raises(InvalidFilterError, match="tags must be a list"):
        await mem.list(alice, "semantic", tags="tea")
    with pytest.raises(InvalidRecordError, match="changes must be a dict"):
        await mem.update(alice, "semantic", "x" * 32, 5)
    with pytest.raises(InvalidFilterError, match="outside the years 1 to 9999"):
        await mem.search("tea", alice, since=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))
    with pytest.raises(InvalidFilterError, match="scope must be a memos.Scope"):
        await mem.session("alice")
    with pytest.raises(ConfigError, match="32 random bytes"):
        await mem.rotate_vault_key(b"short")  # used to write a 5-byte key file, breaking the vault
    with pytest.raises(ConfigError, match="model must be"):
        await MemoryOS.open(mem.storage.uri, embedder=None, model=5)
    assert await mem.counts(alice) == {name: 0 for name in mem.type_names}
    assert not mem.key_file.exists()


async def test_dates_from_year_one_are_a_range_not_a_crash(mem, alice):
    await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea"))
    for since in (datetime(1, 1, 1), datetime(999, 1, 1), datetime(1, 1, 1, tzinfo=UTC)):
        assert [r.summary for r in await mem.list(alice, "semantic", since=since)] == ["Alice likes tea"]
        assert [h.record.summary for h in await mem.search("tea", alice, since=since)] == ["Alice likes tea"]
    assert await mem.list(alice, "semantic", until=datetime(999, 1, 1)) == []
    assert await mem.list(alice, "semantic", since=datetime(9999, 12, 31)) == []


# --- unique ids ---------------------------------------------------------------------------------

async def test_an_explicit_id_already_used_by_the_same_user_is_refused(mem, alice):
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea"))
    with pytest.raises(DuplicateIdError, match=fact.id):
        await mem.add(alice, Fact(id=fact.id, subject="Alice", summary="Alice likes coffee"))
    with pytest.raises(DuplicateIdError, match=fact.id):  # ids are unique across stores too
        await mem.add(alice, Episode(id=fact.id, summary="a turn"))
    with pytest.raises(DuplicateIdError, match="twice in this batch"):
        await mem.add(alice, [Fact(id="same-1", subject="a", summary="b"), Fact(id="same-1", subject="c", summary="d")])
    assert [r.summary for r in await mem.list(alice, "semantic")] == ["Alice likes tea"]
    assert await mem.list(alice, "episodic") == []


async def test_a_user_cannot_create_a_row_carrying_another_users_id(mem, alice, bob):
    [theirs] = await mem.add(bob, Fact(subject="Bob", summary="Bob's bank is Acme"))
    history = await mem.history(bob)
    with pytest.raises(DuplicateIdError, match=theirs.id) as refused:
        await mem.add(alice, Fact(id=theirs.id, subject="Bob", summary="Bob's bank is Evil Corp"))
    assert "bob" not in str(refused.value)  # the error does not say whose id it is
    assert [r.summary for r in await mem.list(bob, "semantic")] == ["Bob's bank is Acme"]
    assert await mem.list(alice, "semantic") == []
    assert await mem.history(bob) == history
    fresh = Fact(subject="Alice", summary="Alice likes tea")  # an id left unset is fresh: no lookup, no clash
    assert (await mem.add(alice, fact := fresh))[0].id == fact.id


async def test_import_replaces_its_own_records_and_reids_ids_held_by_others(mem, alice, bob, vault_key):
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea"))
    [later] = await mem.add(alice, Fact(subject="Alice", summary="Alice prefers green tea", source_ids=[fact.id]))
    [item] = await mem.add(alice, VaultItem(caption="wifi password", secret="hunter22", entry_type="credential"))
    lines = list(await export_scope(mem, Scope("alice")))
    before = await mem.counts(Scope("alice"))

    again = await import_lines(mem, lines)  # the same export into the same store: idempotent
    assert again["reassigned"] == 0 and await mem.counts(Scope("alice")) == before
    assert await mem.get(Scope("alice"), "semantic", fact.id)

    copied = await import_lines(mem, lines, user_id="bob")  # every id is alice's: bob gets fresh ones
    assert copied["reassigned"] == 3
    assert sorted(r.summary for r in await mem.list(Scope("alice"), "semantic")) == ["Alice likes tea", "Alice prefers green tea"]
    bobs = {r.summary: r for r in await mem.list(Scope("bob"), "semantic")}
    assert set(bobs) == {"Alice likes tea", "Alice prefers green tea"}
    assert not {r.id for r in bobs.values()} & {fact.id, later.id}
    assert bobs["Alice prefers green tea"].source_ids == [bobs["Alice likes tea"].id]  # references follow the new id
    [bob_item] = await mem.list(Scope("bob"), "vault")
    assert bob_item.id != item.id
    assert await mem.reveal(Scope("bob"), bob_item.id, approved_by="test") == "hunter22"
    assert await mem.reveal(Scope("alice"), item.id, approved_by="test") == "hunter22"
    alice_history = [h for h in await mem.history(Scope("alice")) if h.op != "reveal"]
    assert len(alice_history) == 3  # alice's audit trail was not overwritten by bob's copy
    assert {h.record_id for h in await mem.history(Scope("bob")) if h.op == "add"} == {r.id for r in bobs.values()} | {bob_item.id}


# --- vault secrets ------------------------------------------------------------------------------

async def test_a_vault_caption_holding_its_secret_is_refused_with_the_reason(mem, alice):
    with pytest.raises(InvalidRecordError, match="caption must not contain its secret"):
        await mem.add(alice, VaultItem(caption="bank PIN 4921", secret="4921"))
    with pytest.raises(InvalidRecordError, match="tags must not contain its secret"):
        await mem.add(alice, VaultItem(caption="bank PIN", secret="4921", tags=["4921"]))
    [item] = await mem.add(alice, VaultItem(caption="bank PIN", secret="4921"))
    with pytest.raises(InvalidRecordError, match="caption must not contain its secret"):
        await mem.update(alice, "vault", item.id, {"caption": "bank PIN (4921)"})  # checked against the stored secret
    with pytest.raises(InvalidRecordError, match="caption must not contain its secret"):
        await mem.update(alice, "vault", item.id, {"secret": "bank"})
    for caption, secret in [("wifi password Hunter2", "hunter2"), ("PIN 49-21", "4921"), ("PIN ４９２１", "4921"),
                            ("card 4111 1111 1111 1111", "4111111111111111")]:  # case, dashes, width and spaces aside
        with pytest.raises(InvalidRecordError, match="caption must not contain its secret"):
            await mem.add(alice, VaultItem(caption=caption, secret=secret))
    assert [r.caption for r in await mem.list(alice, "vault")] == ["bank PIN"]
    assert await mem.reveal(alice, item.id, approved_by="test") == "4921"


async def test_the_vault_store_tool_refuses_a_caption_holding_the_secret(mem, alice):
    from memos.agents import memory_toolset
    from memos.agents.deps import MemoryDeps
    from pydantic_ai import ModelRetry

    tools = memory_toolset(MemoryDeps(await mem.session(alice))).tools
    with pytest.raises(ModelRetry, match="caption must not contain the secret"):
        await tools["vault_store"].function(caption="door code 7781", secret="7781")
    with pytest.raises(ModelRetry, match="caption must not contain the secret"):
        await tools["vault_store"].function(caption="router password Tr0ub4dor", secret="tr0ub4dor")
    assert await mem.list(alice, "vault") == []


# --- the property test over the public facade ---------------------------------------------------

odd_text = st.one_of(st.text(max_size=30), st.sampled_from(["", " ", "\x00", "' OR 1=1 --", "\ud800", "x\udfffy", "é" * 300,
                                                             "9" * 300, "active", "semantic"]))
huge = st.sampled_from(["x" * 1_000_001, "y" * 100_001])
odd_time = st.one_of(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
                     st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))])),
                     st.sampled_from(["2024-01-01", 0, 10**20]))
good_time = st.one_of(st.none(), st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2030, 1, 1)))
odd_int = st.one_of(st.integers(-5, 30), st.sampled_from([0, 10**18, -(10**18), 2**63, True]), st.none(), st.floats(), st.just("5"))
good_limit = st.one_of(st.none(), st.integers(0, 50))
good_scope = st.sampled_from([ALICE, BOB, Scope("alice"), Scope("carol")])
odd_scope = st.sampled_from(["alice", None, 7, ("alice",)])
good_type = st.sampled_from(["semantic", "episodic", "vault", "core", "procedural", Fact])
odd_type = st.sampled_from(["nope", "", 5, None, ["semantic"], "Semantic"])


_HASHED: dict[tuple[int, ...], dict[str, str]] = {}


def state(mem: MemoryOS) -> dict[str, str]:
    """Row count and a hash of every row of every table, history and meta included.

    Hashed again only when a table's version moved: LanceDB gives every commit a new version, so
    rows under the same versions are the same rows (the property test reads state 400 times)."""
    async def versions() -> tuple[int, ...]:
        tables = [t.table for t in mem.storage.tables.values()] + [mem.storage.history, mem.storage.meta]
        return (id(mem), *[await table.version() for table in tables])

    run_sync(mem.storage.flush_queued())  # journaled rows are stored data: in their tables first
    key = run_sync(versions())
    if key not in _HASHED:
        _HASHED[key] = run_sync(store_hashes(mem))
    return dict(_HASHED[key])


_STORE: dict[str, tuple[MemoryOS, list[str]]] = {}


def store(factory) -> tuple[MemoryOS, list[str]]:
    if "facade" not in _STORE:
        mem = MemoryOS.open_sync(factory.mktemp("facade"), embedder=None, vault_key_file=factory.mktemp("k") / "v.key")
        ids = [r.id for r in mem.add_sync(ALICE, [Fact(subject="Alice", summary="Alice likes tea"),
                                                  Episode(summary="hello there", actor="alice")])]
        ids += [r.id for r in mem.add_sync(ALICE, VaultItem(caption="wifi password", secret="hunter22"))]
        ids += [r.id for r in mem.add_sync(BOB, Fact(subject="Bob", summary="Bob sails"))]
        _STORE["facade"] = (mem, ids)
    return _STORE["facade"]


def records(ids: list[str], *, odd: bool):
    """Records built without validation (as a careless caller might): good ones, or with odd values and ids."""
    good_id, odd_id = st.none(), st.one_of(st.sampled_from(ids), st.sampled_from(["fresh-1", "bad id!", "", "x" * 200]))
    good_text, odd_value = st.text(min_size=1, max_size=30), st.one_of(odd_text, huge)

    def build(kind, id_, text, other):
        fields = {"subject": other, "summary": text} if kind is Fact else (
            {"summary": text, "actor": other} if kind is Episode else {"caption": text, "secret": other})
        if id_ is not None:
            fields["id"] = id_
        return kind.model_construct(**fields)

    kinds = st.sampled_from([Fact, Episode, VaultItem])
    if not odd:
        return st.builds(build, kinds, good_id, good_text, st.text(min_size=1, max_size=10))
    return st.one_of(st.builds(build, kinds, odd_id, good_text, st.text(min_size=1, max_size=10)),
                     st.builds(build, kinds, good_id, odd_value, st.text(min_size=1, max_size=10)),
                     st.builds(build, kinds, good_id, good_text, odd_value))


def signatures(ids: list[str]) -> dict[str, tuple[dict, dict]]:
    """Per public method: a good strategy for every argument, and odd ones for some."""
    good_id, odd_id = st.sampled_from(ids), st.one_of(odd_text, st.none(), st.just(5))
    good_changes = st.dictionaries(st.sampled_from(["summary", "subject", "caption", "importance", "tags"]),
                                   st.text(min_size=1, max_size=20), max_size=2)
    odd_changes = st.one_of(
        st.dictionaries(st.sampled_from(["summary", "caption", "secret", "id", "user_id", "importance", "tags", "nope", "status"]),
                        st.one_of(odd_text, huge, odd_int, st.lists(odd_text, max_size=2)), min_size=1, max_size=3),
        st.sampled_from([None, 5, "summary", ["summary"]]))
    by_id = ({"scope": good_scope, "memory_type": good_type, "record_id": good_id},
             {"scope": odd_scope, "memory_type": odd_type, "record_id": odd_id})
    return {
        "add": ({"scope": good_scope, "records": st.one_of(records(ids, odd=False), st.lists(records(ids, odd=False), min_size=1, max_size=3))},
                {"scope": odd_scope, "records": st.one_of(records(ids, odd=True), st.lists(records(ids, odd=True), min_size=1, max_size=3),
                                                          st.sampled_from([None, 5, "text", {"a": 1}, [5]]))}),
        "update": ({**by_id[0], "changes": good_changes}, {**by_id[1], "changes": odd_changes}),
        "supersede": ({"scope": good_scope, "memory_type": good_type, "old_id": good_id, "new": records(ids, odd=False)},
                      {"scope": odd_scope, "memory_type": odd_type, "old_id": odd_id, "new": st.one_of(records(ids, odd=True), st.just("x"))}),
        "archive": by_id, "delete": by_id, "get": by_id,
        "list": ({"scope": good_scope, "memory_type": good_type, "status": st.sampled_from(["active", None, ["active", "archived"]]),
                  "tags": st.one_of(st.none(), st.lists(st.sampled_from(["x", "y"]), max_size=2)), "since": good_time, "until": good_time,
                  "limit": good_limit},
                 {"scope": odd_scope, "memory_type": odd_type, "status": st.sampled_from(["bogus", 5, ["active", 3]]),
                  "tags": st.one_of(st.lists(odd_text, min_size=1, max_size=2), odd_text), "since": odd_time, "until": odd_time, "limit": odd_int}),
        "history": ({"scope": good_scope, "record_id": st.one_of(st.none(), good_id), "limit": good_limit},
                    {"scope": odd_scope, "record_id": odd_id, "limit": odd_int}),
        "counts": ({"scope": good_scope, "status": st.sampled_from(["active", None, "archived"])},
                   {"scope": odd_scope, "status": st.sampled_from(["bogus", 5])}),
        "search": ({"query": st.sampled_from(["tea", "Alice", "hello", "wifi", "Bob sails", ""]), "scope": good_scope,
                    "types": st.one_of(st.none(), st.lists(good_type, min_size=1, max_size=2)), "k": st.integers(1, 20),
                    "budget_tokens": st.one_of(st.none(), st.integers(20, 2000)), "since": good_time, "until": good_time,
                    "tags": st.one_of(st.none(), st.just(["x"])), "include_inactive": st.booleans()},
                   {"query": st.one_of(odd_text, huge, st.none(), st.just(5)), "scope": odd_scope,
                    "types": st.one_of(st.lists(odd_type, min_size=1, max_size=2), st.just("semantic")), "k": odd_int,
                    "budget_tokens": odd_int, "since": odd_time, "until": odd_time,
                    "tags": st.one_of(st.lists(odd_text, min_size=1, max_size=2), odd_text), "include_inactive": st.just("yes")}),
        "ingest": ({"scope": good_scope, "messages": st.lists(st.fixed_dictionaries({"speaker": st.just("alice"), "text": st.text(max_size=30)}),
                                                              max_size=3)},
                   {"scope": odd_scope, "messages": st.one_of(
                       st.lists(st.fixed_dictionaries({"speaker": odd_text, "text": st.one_of(odd_text, huge, odd_int)}), min_size=1, max_size=3),
                       st.sampled_from([None, "hello", 5, [5], [{}]]))}),
        "reveal": ({"scope": good_scope, "record_id": good_id, "approved_by": st.just("tester"),
                    "clearance": st.sampled_from(["high", "low", "medium"])},
                   {"scope": odd_scope, "record_id": odd_id, "approved_by": odd_text, "clearance": st.sampled_from(["top", None, 3])}),
        "reindex": ({}, {"embedder": st.sampled_from([None, "none", "", "nope", 5, "x:y:z"])}),
    }


@st.composite
def calls(draw, ids: list[str]) -> tuple[str, dict]:
    """A method and its arguments: all good, or good but for one odd argument."""
    name = draw(st.sampled_from(sorted(signatures(ids))))
    good, odd = signatures(ids)[name]
    spoiled = draw(st.sampled_from([None, *sorted(odd)])) if good else sorted(odd)[0]
    args = {arg: draw(odd[arg] if arg == spoiled else strategy) for arg, strategy in good.items()}
    if spoiled is not None and spoiled not in args:
        args[spoiled] = draw(odd[spoiled])
    return name, args


def documented(name: str, result: object, args: dict) -> bool:
    if name in ("add", "ingest"):
        return isinstance(result, list) and all(isinstance(r, MemoryRecord) for r in result)
    if name == "search":
        return isinstance(result, list) and len(result) <= args["k"] and all(isinstance(h, Hit) for h in result)
    if name == "list":
        return isinstance(result, list) and (args["limit"] is None or len(result) <= args["limit"])
    if name == "history":
        return isinstance(result, list) and all(isinstance(h, HistoryEntry) for h in result)
    if name == "counts":
        return isinstance(result, dict) and all(isinstance(v, int) for v in result.values())
    if name == "reveal":
        return isinstance(result, str)
    return name == "delete" and result is None or isinstance(result, MemoryRecord)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(data=st.data())
def test_every_public_method_either_works_or_raises_a_memos_error_changing_nothing(tmp_path_factory, data):
    mem, ids = store(tmp_path_factory)
    name, args = data.draw(calls(ids))
    before = state(mem)
    try:
        result = getattr(mem, f"{name}_sync")(**args)
    except MemosError as exc:
        after = state(mem)
        if isinstance(exc, VaultAccessError):  # a refused reveal is audited by design (README: Security)
            assert after.pop("history") != before.pop("history"), "a refused reveal must be written to history"
        assert after == before, f"{name}({args!r:.300}) raised {exc!r} but changed stored data"
        return
    assert documented(name, result, args), f"{name}({args!r:.300}) returned {result!r:.300}"
    if name in ("get", "list", "history", "counts", "search"):
        assert state(mem) == before, f"{name} is a read but changed stored data"


class _NaNForPoison(TestEmbeddingModel):
    """An embedder whose vector for any text holding "poison" is all NaN (a broken model file
    does this for some inputs); other texts get an ordinary vector."""

    async def embed(self, inputs, *, input_type, settings=None):
        result = await super().embed(inputs, input_type=input_type, settings=settings)
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        vectors = [[math.nan] * len(v) if "poison" in t else [(i % 7) + 0.5 for i in range(len(v))]
                   for t, v in zip(texts, result.embeddings, strict=True)]
        return replace(result, embeddings=vectors)


async def test_an_embedder_returning_nan_is_refused_and_the_store_keeps_working(tmp_path):
    """A NaN vector used to be acknowledged; LanceDB then refused the write, and every later
    write, list and search of every user raised its raw error, the next open included."""
    mem = await MemoryOS.open(tmp_path / "db", embedder=Embedder(_NaNForPoison(dimensions=8)))
    await mem.ingest(BOB, [{"speaker": "bob", "text": "bob likes green tea"}])
    await mem.add(BOB, Fact(subject="Bob", summary="Bob drinks tea at four"))
    before = await store_hashes(mem)
    with pytest.raises(ConfigError, match="NaN or infinite value; nothing was stored"):
        await mem.ingest(ALICE, [{"speaker": "alice", "text": "a poison turn about tea"}])
    with pytest.raises(ConfigError, match="NaN or infinite value"):
        await mem.add(ALICE, Fact(subject="Alice", summary="a poison fact about tea"))
    with pytest.raises(ConfigError, match="NaN or infinite value"):
        await mem.search("poison tea", ALICE)
    assert await store_hashes(mem) == before
    assert "bob: bob likes green tea" in {h.record.text for h in await mem.search("tea", BOB, k=5)}
    await mem.ingest(ALICE, [{"speaker": "alice", "text": "alice likes tea too"}])
    assert [h.record.text for h in await mem.search("tea", ALICE, k=5)] == ["alice: alice likes tea too"]
    with pytest.raises(InvalidRecordError, match="NaN or infinite value"):  # the storage boundary refuses one too
        mem.storage.type_table("semantic").to_row(Fact(subject="Alice", summary="x", text="x"), [math.inf] * 8)


async def test_an_active_fact_whose_validity_ends_before_it_starts_is_refused(mem, alice, snapshot):
    """The type accepted it and `mem.update` stored it: only an add checked (validation.check_validity).
    (`update` refuses valid_to itself, a lifecycle field: `revise` is the path that sets it.)"""
    march, january = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="valid_to 2026-01-01.* is before valid_from 2026-03-01"):
        Fact(subject="Alice", summary="Alice lives in Lisbon", valid_from=march, valid_to=january)
    with pytest.raises(ValueError, match="valid_to .* is before valid_from"):  # naive and aware dates compare (naive is UTC)
        Fact(subject="Alice", summary="Alice lives in Lisbon", valid_from=march, valid_to=datetime(2026, 1, 1))
    with pytest.raises(InvalidRecordError, match="valid_to .* is before valid_from"):  # one built without validation too
        await mem.add(alice, Fact.model_construct(subject="Alice", summary="Alice lives in Lisbon", valid_from=march, valid_to=january))
    assert await mem.list(alice, "semantic") == []
    [lisbon] = await mem.add(alice, Fact(subject="Alice", summary="Alice lived in Lisbon", valid_from=january, valid_to=march))
    before = await snapshot(mem)
    with pytest.raises(InvalidRecordError, match="valid_to .* is before valid_from"):
        await mem.update(alice, "semantic", lisbon.id, {"valid_from": datetime(2026, 4, 1, tzinfo=UTC)})
    with pytest.raises(InvalidRecordError, match="valid_to .* is before valid_from"):  # the lifecycle's own path checks it too
        await mem.revise(alice, "semantic", lisbon.id, {"valid_to": datetime(2025, 12, 1, tzinfo=UTC)}, actor="test")
    assert await snapshot(mem) == before
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice will live in Rome", valid_from=datetime(2030, 1, 1, tzinfo=UTC)))
    [rome] = [await mem.supersede(alice, "semantic", fact.id, Fact(subject="Alice", summary="Alice will live in Milan"))]
    closed = await mem.get(alice, "semantic", fact.id)  # superseded before it began: closed before it starts, and kept
    assert closed.status == "superseded" and closed.valid_to < closed.valid_from and rome.status == "active"


async def test_an_item_stored_before_the_folded_caption_check_can_still_change_its_importance(mem, alice, monkeypatch):
    """Items stored while the check was an exact substring test may hold their secret in another
    case; changing their importance or status is not refused for it, changing the caption is."""
    from memos import validation

    monkeypatch.setattr(validation, "folded", lambda text: text)  # as versions before the folded check
    [item] = await mem.add(alice, VaultItem(caption="wifi Hunter2", secret="hunter2"))
    monkeypatch.undo()
    assert (await mem.update(alice, "vault", item.id, {"importance": 0.9})).importance == 0.9
    with pytest.raises(InvalidRecordError, match="caption must not contain its secret"):
        await mem.update(alice, "vault", item.id, {"caption": "wifi Hunter2 (home)"})


async def test_merge_into_needs_an_active_record_and_a_survivor_its_scope_sees(mem, alice, bob):
    """merge_into archived a record and linked it to any well-formed id: itself, one that does not
    exist, another user's (the record then disappeared from its owner's searches); and merging a
    superseded record overwrote the link to its successor."""
    from memos import RecordNotFoundError

    [fact, other] = await mem.add(alice, [Fact(subject="Alice", summary="Alice likes tea"), Fact(subject="Alice", summary="tea!")])
    [bobs] = await mem.add(bob, Fact(subject="Bob", summary="Bob likes coffee"))
    [old] = await mem.add(alice, Fact(subject="Alice", summary="Alice lives in Porto"))
    await mem.supersede(alice, "semantic", old.id, Fact(subject="Alice", summary="Alice lives in Lisbon"))
    before = await store_hashes(mem)
    with pytest.raises(InvalidRecordError, match="cannot be merged into itself"):
        await mem.merge_into(alice, "semantic", fact.id, fact.id)
    for survivor in ("f" * 32, bobs.id):  # no such record; another user's
        with pytest.raises(RecordNotFoundError):
            await mem.merge_into(alice, "semantic", fact.id, survivor)
    with pytest.raises(InvalidRecordError, match="is superseded .*only an active record is merged"):
        await mem.merge_into(alice, "semantic", old.id, fact.id)
    with pytest.raises(InvalidFilterError, match="reason"):
        await mem.merge_into(alice, "semantic", other.id, fact.id, reason="x\x00y")
    assert await store_hashes(mem) == before
    merged = await mem.merge_into(alice, "semantic", other.id, fact.id)
    assert merged.status == "archived" and merged.superseded_by == fact.id


async def test_tags_a_filter_cannot_select_and_a_state_entry_that_is_no_string_are_refused(mem, alice):
    """A tag with a NUL or of 5,000 characters was stored by add and update, though no filter can
    select by it; set_state(5, "v") wrote its row, then raised Python's own AttributeError."""
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea", tags=["drinks"]))
    before = await store_hashes(mem)
    for tags in (["a\x00b"], ["x" * 5_000]):
        with pytest.raises(InvalidRecordError, match="a tag is what a filter selects"):
            await mem.add(alice, Fact(subject="Alice", summary="Alice likes cake", tags=tags))
        with pytest.raises(InvalidRecordError, match="a tag is what a filter selects"):
            await mem.update(alice, "semantic", fact.id, {"tags": tags})
    with pytest.raises(InvalidRecordError, match="state entry"):
        await mem.set_state(5, "v")
    with pytest.raises(InvalidRecordError, match="state entry"):
        await mem.set_state("k", {"v": 1})
    assert await store_hashes(mem) == before
    assert [f.id for f in await mem.list(alice, "semantic", tags=["drinks"])] == [fact.id]


async def test_the_kernel_services_refuse_bad_arguments_with_memos_errors(mem, alice):
    """Each of these raised Python's or LanceDB's own error (a SQL parser error for no scopes),
    and record_job stored a kind of 5 and an actor with a NUL."""
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea"))
    before = await store_hashes(mem)
    calls = [
        lambda: mem.list_in([], "semantic"), lambda: mem.list_in("alice", "semantic"), lambda: mem.list_in(["alice"], "semantic"),
        lambda: mem.list_in([alice], "semantic", status=5), lambda: mem.get_many("alice", "semantic", [fact.id]),
        lambda: mem.get_many(alice, "semantic", [fact.id], status=5), lambda: mem.counts(alice, status=[]),
        lambda: mem.counts(alice, status="gone"), lambda: mem.added_since(alice, "semantic", "2024-01-01"),
        lambda: mem.maintain(min_rows="x"), lambda: mem.record_job("alice", "decay", {}, actor="t", note="n"),
        lambda: mem.record_job(alice, 5, {}, actor="t", note="n"), lambda: mem.record_job(alice, "decay", {}, actor="a\x00", note="n"),
        lambda: mem.stored_vectors("alice", "semantic"),
    ]
    for index, call in enumerate(calls):
        with pytest.raises(MemosError):
            await call()
        assert await store_hashes(mem) == before, index
    assert [r.id for r in await mem.list_in([alice], "semantic")] == [fact.id]
    assert [r.id for r in await mem.get_many(alice, "semantic", [fact.id], status="active")] == [fact.id]
