"""The typed client behaves as the facade: one set of tests, run on `MemoryOS` in process and on
`memos.Client` against a real uvicorn on loopback (`memory` is parametrized over both).

The same calls, the same record classes back, the same exception classes for the same mistakes.
What in process lives beside the facade (core blocks, export, forget) goes through `Side`, which
names each way once. Both stores live for the module (one server start); each test works in a
user of its own.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest

import memos
from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.bench.serve import free_port
from memos.context.core_memory import CoreMemory
from memos.crypto import VaultAccessError
from memos.exceptions import (
    BlockLimitError,
    InvalidFilterError,
    InvalidRecordError,
    RecordNotFoundError,
    RecordSupersededError,
    ScopeError,
    TextNotFoundError,
    UnknownBlockError,
    UnknownMemoryTypeError,
)
from memos.memtypes import CoreBlock, Episode, Fact, Procedure, VaultItem
from memos.portability import export_scope, forget_user
from memos.retrieval.ranking import Hit
from memos.serve import ServeConfig, create_app
from memos.store.history import HistoryEntry

ADMIN = "admin-key-for-client-tests-0123456789"
_users = itertools.count()


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder) -> Iterator[str]:
    """A real uvicorn on a loopback port in a thread of this process, over its own store (the shared embedder)."""
    import uvicorn

    root = tmp_path_factory.mktemp("served")
    app = create_app(ServeConfig(uri=str(root / "db"), embedder=embedder, admin_key=ADMIN, vault_key_file=root / "vault.key"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn-client-tests", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.config.port}"
    assert httpx2.get(url + "/healthz", timeout=60).status_code == 200
    yield url
    server.should_exit = True
    thread.join(timeout=20)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, embedder) -> MemoryOS:
    root = tmp_path_factory.mktemp("embedded")
    return MemoryOS.open_sync(root / "db", embedder=embedder, vault_key_file=root / "vault.key")


def make_key(url: str, user: str, **options: Any) -> str:
    r = httpx2.post(url + "/admin/keys", json={"user_id": user, **options}, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["token"]


class SyncCore:
    """`CoreMemory` run synchronously, as `Client.core` is."""

    def __init__(self, core: CoreMemory) -> None:
        self.core = core

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.core, name)
        return lambda *args, **kwargs: run_sync(method(*args, **kwargs))


@dataclass
class Side:
    """One way to reach memory: `api` takes the facade's calls; the rest are spelled differently in process."""

    kind: str
    api: Any
    scope: Scope

    def core(self, scope: Scope) -> Any:
        return SyncCore(CoreMemory(self.api, scope)) if self.kind == "embedded" else self.api.core(scope)

    def export(self, scope: Scope) -> list[str]:
        return list(run_sync(export_scope(self.api, scope))) if self.kind == "embedded" else self.api.export(scope)

    def forget(self, user_id: str) -> dict[str, int]:
        return run_sync(forget_user(self.api, user_id)) if self.kind == "embedded" else self.api.forget(user_id)


@pytest.fixture(params=["embedded", "http"])
def memory(request) -> Iterator[Side]:
    user = f"user{next(_users)}"
    scope = Scope(user, "assistant")
    if request.param == "embedded":
        yield Side("embedded", request.getfixturevalue("embedded"), scope)
        return
    url = request.getfixturevalue("served")
    with memos.Client(url, key=make_key(url, user)) as client:
        yield Side("http", client, scope)


def raises_exactly(cls: type[BaseException], call: Any, *args: Any, **kwargs: Any) -> BaseException:
    with pytest.raises(cls) as caught:
        call(*args, **kwargs)
    assert type(caught.value) is cls, f"{type(caught.value).__name__}: {caught.value}"
    assert str(caught.value)
    return caught.value


# --- one set of tests, both ways ---------------------------------------------------------------

def test_add_get_update_supersede_history_delete(memory):
    api, scope = memory.api, memory.scope
    [fact] = api.add_sync(scope, Fact(subject="Alice", summary="Alice lives in Lisbon", tags=["home"]))
    assert type(fact) is Fact and fact.user_id == scope.user_id and fact.agent_id == "assistant" and fact.tags == ["home"]
    got = api.get_sync(scope, Fact, fact.id)
    assert type(got) is Fact and got.summary == "Alice lives in Lisbon" and got.id == fact.id
    assert api.get_sync(scope, "semantic", fact.id) == got
    updated = api.update_sync(scope, "semantic", fact.id, {"importance": 0.9})
    assert type(updated) is Fact and updated.importance == 0.9
    new = api.supersede_sync(scope, Fact, fact.id, Fact(subject="Alice", summary="Alice lives in Porto"))
    assert type(new) is Fact and new.summary == "Alice lives in Porto" and new.valid_from is not None
    old = api.get_sync(scope, Fact, fact.id)
    assert old.status == "superseded" and old.superseded_by == new.id
    history = api.history_sync(scope, fact.id)
    assert all(type(e) is HistoryEntry for e in history)
    assert [e.op for e in history] == ["add", "update", "supersede"] and history[1].after["importance"] == 0.9
    assert [(e.op, e.record_id) for e in api.history_sync(scope, limit=2)] == [("add", new.id), ("supersede", fact.id)]
    assert api.delete_sync(scope, Fact, new.id) is None
    raises_exactly(RecordNotFoundError, api.get_sync, scope, Fact, new.id)
    assert api.history_sync(scope, new.id) == []
    raises_exactly(RecordNotFoundError, api.delete_sync, scope, Fact, new.id)


def test_a_record_superseded_already_is_not_superseded_again(memory):
    """One successor a record: a second supersede (perhaps a moment after another caller's) is
    refused with the successor's id, and leaves one current version (before: two, both active)."""
    api, scope = memory.api, memory.scope
    [fact] = api.add_sync(scope, Fact(subject="car", summary="the car is red"))
    new = api.supersede_sync(scope, Fact, fact.id, Fact(subject="car", summary="the car is blue"))
    refused = raises_exactly(RecordSupersededError, api.supersede_sync, scope, Fact, fact.id, Fact(subject="car", summary="the car is green"))
    assert new.id in str(refused)
    assert api.get_sync(scope, Fact, new.id).status == "active" and api.get_sync(scope, Fact, fact.id).superseded_by == new.id
    assert sorted(e.op for e in api.history_sync(scope)) == ["add", "add", "supersede"]  # nothing of the refused one


def test_add_many_records_of_several_stores_in_one_call_keeps_their_classes(memory):
    api, scope = memory.api, memory.scope
    added = api.add_sync(scope, [Fact(subject="Bo", summary="Bo plays the cello"),
                                 Procedure(summary="How Bo tunes the cello", steps=["A string", "D", "G", "C"])])
    assert [type(r) for r in added] == [Fact, Procedure]
    assert api.add_sync(scope, []) == []
    assert api.get_sync(scope, Procedure, added[1].id).steps == ["A string", "D", "G", "C"]
    assert [h.id for h in api.search_sync("cello tuning", scope, types=[Procedure])] == [added[1].id]


def test_search_with_k_and_with_budget_tokens_returns_hits_of_records(memory):
    api, scope = memory.api, memory.scope
    api.add_sync(scope, [Fact(subject="Cy", summary="Cy is allergic to peanuts", importance=0.9),
                         Fact(subject="Cy", summary="Cy's cat is called Miso"),
                         Fact(subject="Cy", summary="Cy runs every morning before work")])
    hits = api.search_sync("what is Cy allergic to?", scope, k=1)
    assert len(hits) == 1 and type(hits[0]) is Hit and type(hits[0].record) is Fact
    assert hits[0].record.summary == "Cy is allergic to peanuts" and hits[0].memory_type == "semantic"
    assert {"fused", "recency", "importance"} <= set(hits[0].parts)
    packed = api.search_sync("Cy", scope, budget_tokens=40)
    assert packed and 0 < sum(h.tokens for h in packed) <= 40 and all(h.text for h in packed)
    assert api.search_sync("Cy", scope, until=datetime(2000, 1, 1, tzinfo=UTC)) == []
    everything = api.search_sync("Cy", scope, k=10)
    kept = api.search_sync("Cy", scope, k=10, exclude=[everything[0].id])
    assert everything[0].id not in [h.id for h in kept] and len(kept) == len(everything) - 1


def test_ingest_stores_turns_in_batches_that_search_finds_in_chinese_too(memory):
    api, scope = memory.api, Scope(memory.scope.user_id, "assistant", "s1")
    seen: list[int] = []
    turns = api.ingest_sync(scope, [
        {"speaker": "dora", "text": "我上个月搬到了杭州", "timestamp": datetime(2026, 1, 10, 9, tzinfo=UTC), "id": "m1"},
        {"speaker": "assistant", "text": "Hangzhou is lovely by the West Lake.", "id": "m2"},
    ], progress=seen.append)
    assert [type(t) for t in turns] == [Episode, Episode] and seen == [2]
    assert turns[0].session_id == "s1" and turns[0].source_ids == ["m1"] and turns[0].occurred_at == datetime(2026, 1, 10, 9, tzinfo=UTC)
    [more] = api.ingest_sync(scope, [memos.Message(actor="dora", text="Any tea houses there?")], previous=turns[1])
    assert "West Lake" in more.context
    hits = api.search_sync("搬到杭州", scope, k=3)
    assert hits[0].id == turns[0].id


def test_core_blocks_read_edit_and_keep_their_limit(memory):
    core = memory.core(memory.scope)
    assert [b.label for b in core.blocks()] == ["persona", "human"]
    assert all(type(b) is CoreBlock for b in core.blocks())
    assert core.append("human", "Name: Eli.", actor="user").value.endswith("Name: Eli.")
    assert "Eli Smith" in core.replace("human", "Eli", "Eli Smith", actor="user").value
    assert core.rethink("persona", "A patient tutor.", actor="user").value == "A patient tutor."
    assert core.get("persona").value == "A patient tutor."
    raises_exactly(BlockLimitError, core.rethink, "human", "x" * (core.get("human").limit + 1), actor="user")
    raises_exactly(UnknownBlockError, core.append, "nope", "hi", actor="user")
    raises_exactly(TextNotFoundError, core.replace, "human", "absent", "x", actor="user")
    assert core.get("human").value == "Name: Eli Smith."


def test_a_vault_secret_goes_in_and_comes_back_redacted(memory):
    api, scope = memory.api, memory.scope
    [item] = api.add_sync(scope, VaultItem(caption="Gus's bank PIN", secret="4921"))
    assert type(item) is VaultItem and item.secret == ""
    assert api.get_sync(scope, VaultItem, item.id).secret == ""
    hits = api.search_sync("bank PIN", scope, types=["vault"])
    assert [h.id for h in hits] == [item.id] and "4921" not in hits[0].text + hits[0].record.model_dump_json()


def test_export_then_forget_the_user(memory):
    api, scope = memory.api, memory.scope
    [fact] = api.add_sync(scope, Fact(subject="Fay", summary="Fay collects stamps"))
    lines = memory.export(scope)
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds[0] == "header" and kinds.count("record") == 1 and "history" in kinds
    assert json.loads(lines[1])["record"]["id"] == fact.id
    removed = memory.forget(scope.user_id)
    assert removed["semantic"] == 1
    raises_exactly(RecordNotFoundError, api.get_sync, scope, Fact, fact.id)


@pytest.mark.parametrize(("error", "call"), [
    (RecordNotFoundError, lambda api, s: api.get_sync(s, Fact, "no-such-id")),
    (UnknownMemoryTypeError, lambda api, s: api.get_sync(s, "recipes", "abc")),
    (UnknownMemoryTypeError, lambda api, s: api.search_sync("x", s, types=["recipes"])),
    (InvalidFilterError, lambda api, s: api.search_sync("x", s, k=0)),
    (InvalidFilterError, lambda api, s: api.get_sync(s, Fact, "bad id!")),
    (InvalidRecordError, lambda api, s: api.update_sync(s, Fact, api.add_sync(s, Fact(subject="G", summary="G"))[0].id,
                                                        {"importance": 5})),
    (InvalidRecordError, lambda api, s: api.update_sync(s, Fact, api.add_sync(s, Fact(subject="G", summary="G"))[0].id,
                                                        {"no_such_field": 1})),
    (InvalidRecordError, lambda api, s: api.supersede_sync(s, Fact, api.add_sync(s, Fact(subject="G", summary="G"))[0].id,
                                                           Procedure(summary="not a fact"))),
    (InvalidRecordError, lambda api, s: api.add_sync(s, Fact(subject="G", summary="G", user_id="someone-else"))),
    # the lifecycle's fields (supersede, merge_into, archive, delete set them), refused by the client before a request
    (InvalidRecordError, lambda api, s: api.update_sync(s, Fact, api.add_sync(s, Fact(subject="G", summary="G"))[0].id,
                                                        {"status": "archived"})),
    (InvalidRecordError, lambda api, s: api.update_sync(s, Fact, api.add_sync(s, Fact(subject="G", summary="G"))[0].id,
                                                        {"superseded_by": "0" * 32, "valid_to": datetime(2026, 1, 1, tzinfo=UTC)})),
], ids=["not-found", "unknown-store", "unknown-store-in-search", "bad-k", "bad-id", "bad-value", "unknown-field",
        "supersede-other-type", "record-of-another-scope", "lifecycle-status", "lifecycle-successor"])
def test_the_same_mistake_raises_the_same_class_both_ways(memory, error, call):
    raises_exactly(error, call, memory.api, memory.scope)


# --- over HTTP only: what the key decides -------------------------------------------------------

def test_a_key_acts_only_for_its_user_and_its_agent(served):
    with memos.Client(served, key=make_key(served, "hal")) as hal:
        [fact] = hal.add(Scope("hal", "planner", "s9"), Fact(subject="Hal", summary="Hal likes maps"))
        assert (fact.user_id, fact.agent_id, fact.session_id) == ("hal", "planner", "s9")  # a user-wide key names any agent
        assert hal.get(Scope("hal"), Fact, fact.id) == fact
        [note] = hal.add(Scope("hal", "助手", "会话1"), Fact(subject="Hal", summary="Hal 喜欢地图"))
        assert (note.agent_id, note.session_id) == ("助手", "会话1")  # any id survives the header
        raises_exactly(ScopeError, hal.get, Scope("ivy"), Fact, fact.id)
        raises_exactly(ScopeError, hal.add, Scope("ivy"), Fact(subject="Ivy", summary="Ivy"))
    with memos.Client(served, key=make_key(served, "hal", agent_id="planner")) as planner:
        assert planner.get(Scope("hal", "planner"), Fact, fact.id) == fact
        raises_exactly(ScopeError, planner.get, Scope("hal"), Fact, fact.id)
        raises_exactly(ScopeError, planner.search, "maps", Scope("hal", "other"))
        raises_exactly(ScopeError, planner.forget, "hal")
    with memos.Client(served, key="mk_not-a-key") as stranger:
        raises_exactly(memos.ConfigError, stranger.get, Scope("hal"), Fact, fact.id)
    with memos.Client(f"http://127.0.0.1:{free_port()}", key="mk_x", timeout=5) as nowhere:
        raises_exactly(memos.StoreUnavailableError, nowhere.get, Scope("hal"), Fact, fact.id)


def test_the_scope_header_can_only_narrow_the_keys_scope(served):
    headers = {"Authorization": f"Bearer {make_key(served, 'lu', agent_id='bot')}"}

    def core(scope_header: str) -> httpx2.Response:
        return httpx2.get(served + "/v1/core", headers={**headers, "X-Memos-Scope": scope_header}, timeout=60)

    assert core('{"user_id": "lu", "agent_id": "bot", "session_id": "s1"}').status_code == 200
    for other in ('{"user_id": "max"}', '{"user_id": "lu", "agent_id": "other"}', '{"user_id": "lu"}'):
        r = core(other)
        assert r.status_code == 403 and r.json()["error"]["exception"] == "ScopeError", r.text
    for bad in ("not json", '["lu"]', '{"user_id": "lu", "tenant": "x"}', '{"user_id": 7}'):
        r = core(bad)
        assert r.status_code == 400 and r.json()["error"]["exception"] == "InvalidFilterError", r.text


def test_a_vault_reveal_refusal_comes_back_as_the_vault_error(served):
    with memos.Client(served, key=make_key(served, "jo")) as jo:
        raises_exactly(VaultAccessError, jo.request, "POST", "/v1/vault/abc/reveal", Scope("jo"))


async def test_the_async_client_takes_the_same_calls(served):
    async with memos.AsyncClient(served, key=make_key(served, "kim")) as kim:
        scope = Scope("kim", "assistant")
        [fact] = await kim.add(scope, Fact(subject="Kim", summary="Kim speaks Korean and Portuguese"))
        assert type(await kim.get(scope, Fact, fact.id)) is Fact
        hits = await kim.search("which languages does Kim speak", scope, budget_tokens=100)
        assert [h.id for h in hits] == [fact.id]
        assert [b.label for b in await kim.core(scope).blocks()] == ["persona", "human"]
        with pytest.raises(RecordNotFoundError):
            await kim.delete(scope, Fact, "no-such-id")
