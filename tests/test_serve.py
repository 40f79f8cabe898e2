"""The served API (`memos serve`): records, search, messages, core, vault, chat, tenancy and bad input.

Most tests run the app in-process through the ASGI transport on a real store with the real
embedder; the last ones start real `memos serve` processes on loopback sockets.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2 as httpx
import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from memos.bench.serve import ServerProcess
from memos.serve import ServeConfig, create_app
from memos.serve.tenancy import KEY_PREFIX

ADMIN = "admin-key-for-tests-0123456789"


class Api:
    """An ASGI client of one app with helpers for keys."""

    def __init__(self, app, memory) -> None:
        self.app = app
        self.memory = memory
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://memos")

    async def key(self, user: str, **options) -> dict[str, str]:
        r = await self.http.post("/admin/keys", json={"user_id": user, **options}, headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}


@pytest.fixture
async def api(mem):
    yield Api(create_app(ServeConfig(memory=mem, admin_key=ADMIN)), mem)


def assert_error(r, status: int, kind: str | None = None) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["message"], body
    assert "Traceback" not in r.text and 'File "' not in r.text
    if kind:
        assert body["error"]["type"] == kind, body
    return body["error"]


async def test_admin_stats_count_this_processs_add_and_query_queues(api):
    """GET /admin/stats (admin key only): the process's add queue and query-embedding queue since it
    started: calls, batches (concurrent calls coalesced), what is in progress, and where the adds'
    batch time went (embedding, the rest writing)."""
    import asyncio
    import os

    admin = {"Authorization": f"Bearer {ADMIN}"}
    alice = await api.key("alice")
    assert_error(await api.http.get("/admin/stats", headers=alice), 401, "unauthorized")
    before = (await api.http.get("/admin/stats", headers=admin)).json()
    written = await asyncio.gather(*(api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": f"Alice's fact number {i}"},
                                                   headers=alice) for i in range(8)))
    assert all(r.status_code == 201 for r in written)
    found = await asyncio.gather(*(api.http.post("/v1/search", json={"query": f"fact number {i}", "k": 3}, headers=alice) for i in range(6)))
    assert all(r.status_code == 200 and r.json()["hits"] for r in found)
    after = (await api.http.get("/admin/stats", headers=admin)).json()
    assert after["pid"] == os.getpid() and after["encoder_threads"] == os.environ.get("MEMOS_ENCODER_THREADS")
    assert after["store_threads"] == os.environ.get("TOKIO_WORKER_THREADS")
    adds, was = after["adds"], before["adds"]
    assert adds["calls"] - was["calls"] == 8 and 1 <= adds["batches"] - was["batches"] <= 8
    assert adds["busy_s"] > was["busy_s"] and 0 < after["adds_embedding_s"] - before["adds_embedding_s"] <= adds["busy_s"] - was["busy_s"]
    queries, asked = after["query_embeddings"], before["query_embeddings"] or {"calls": 0, "batches": 0}
    assert queries["calls"] - asked["calls"] >= 6 and queries["batches"] - asked["batches"] >= 1
    assert adds["pending"] == 0 and queries["pending"] == 0 and after["searches_pending"] == 0
    assert set(after["store_retries"]) == {"conflicts", "purged", "slept_s", "journal_waits", "journal_wait_s"}  # none expected from one process


async def test_a_served_app_gives_each_encode_call_one_blas_thread_unless_configured(mem, monkeypatch):
    """An app from `create_app` (`memos.serve.run`, or any ASGI server) sets the encoder's threads
    while it runs, as `memos serve` does: one a call by default, `MEMOS_ENCODER_THREADS` when set,
    `ServeConfig.encoder_threads` over both (0: the encoder's own choice); the environment as it
    was once the app stops."""
    import os

    from memos.sentence_encoder import encode_threads

    admin = {"Authorization": f"Bearer {ADMIN}"}
    seen = []
    for threads, env in [(None, None), (3, None), (None, "2"), (0, "2"), (4, "2")]:
        if env is None:
            monkeypatch.delenv("MEMOS_ENCODER_THREADS", raising=False)
        else:
            monkeypatch.setenv("MEMOS_ENCODER_THREADS", env)
        app = create_app(ServeConfig(memory=mem, admin_key=ADMIN, encoder_threads=threads))
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memos") as http:
                stats = (await http.get("/admin/stats", headers=admin)).json()
            seen.append((stats["encoder_threads"], encode_threads()))
        assert os.environ.get("MEMOS_ENCODER_THREADS") == env
    assert seen[:3] == [("1", 1), ("3", 3), ("2", 2)] and seen[4] == ("4", 4)
    assert seen[3][0] is None and 1 <= seen[3][1] <= (os.cpu_count() or 1)


async def test_a_worker_of_memos_serve_keeps_the_encoder_threads_it_was_started_with(tmp_path, monkeypatch):
    """`memos serve --workers N --encoder-threads T` hands T to each worker's app, 0 included
    (the encoder's own choice), which a worker cannot tell from an unset environment."""
    import os

    from memos.serve.workers import app_from_env

    monkeypatch.setenv("MEMOS_SERVE_DB", str(tmp_path / "db"))
    monkeypatch.delenv("MEMOS_ENCODER_THREADS", raising=False)
    seen = []
    for threads in ["0", "3", None]:
        if threads is None:
            monkeypatch.delenv("MEMOS_SERVE_ENCODER_THREADS", raising=False)
        else:
            monkeypatch.setenv("MEMOS_SERVE_ENCODER_THREADS", threads)
        app = app_from_env()
        async with app.router.lifespan_context(app):
            seen.append(os.environ.get("MEMOS_ENCODER_THREADS"))
    assert seen == [None, "3", "1"] and "MEMOS_ENCODER_THREADS" not in os.environ


def test_an_app_caps_lancedbs_worker_threads_before_its_store_opens(tmp_path, monkeypatch):
    """An app that opens its own store sets `TOKIO_WORKER_THREADS` and `LANCE_CPU_THREADS` to
    `ServeConfig.store_threads` (at most the cores) first, which LanceDB reads when it starts its
    runtimes; a count already in the environment wins, 0 leaves LanceDB's default, and an app given
    an open memory (whose runtimes have started) leaves the environment alone."""
    import os

    from memos.serve.app import cap_store_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    names = ("TOKIO_WORKER_THREADS", "LANCE_CPU_THREADS")
    for name in names:
        monkeypatch.setenv(name, "-")  # so that what the apps set is undone after the test

    def made(config: ServeConfig, **env: str) -> tuple[str | None, ...]:
        for name in names:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        create_app(config)
        return tuple(os.environ.get(name) for name in names)

    db = str(tmp_path / "db")
    assert made(ServeConfig(uri=db)) == ("4", "4")
    assert made(ServeConfig(uri=db, store_threads=64)) == ("16", "16")
    assert made(ServeConfig(uri=db, store_threads=0)) == (None, None)
    assert made(ServeConfig(uri=db), TOKIO_WORKER_THREADS="7") == ("7", None)
    assert made(ServeConfig(uri=db), LANCE_CPU_THREADS="2") == ("4", "2")
    assert made(ServeConfig(memory=object())) == (None, None)  # type: ignore[arg-type]
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for name in names:
        monkeypatch.delenv(name, raising=False)
    cap_store_threads(4)
    assert (os.environ["TOKIO_WORKER_THREADS"], os.environ["LANCE_CPU_THREADS"]) == ("2", "2")


async def test_records_add_get_update_supersede_list_history_delete(api, clock):
    alice = await api.key("alice")
    r = await api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": "Alice lives in Lisbon"}, headers=alice)
    assert r.status_code == 201
    fact = r.json()
    assert fact["user_id"] == "alice" and fact["memory_type"] == "semantic"
    got = (await api.http.get(f"/v1/stores/semantic/{fact['id']}", headers=alice)).json()
    assert got["summary"] == "Alice lives in Lisbon"
    clock.advance(seconds=1)
    r = await api.http.patch(f"/v1/stores/semantic/{fact['id']}", json={"importance": 0.9}, headers=alice)
    assert r.json()["importance"] == 0.9
    clock.advance(seconds=1)
    r = await api.http.post(f"/v1/stores/semantic/{fact['id']}/supersede", json={"subject": "alice", "summary": "Alice lives in Porto"},
                            headers=alice)
    assert r.status_code == 201
    new_id = r.json()["id"]
    active = (await api.http.get("/v1/stores/semantic", headers=alice)).json()["records"]
    assert [f["summary"] for f in active] == ["Alice lives in Porto"]
    every = (await api.http.get("/v1/stores/semantic", params={"status": "all"}, headers=alice)).json()["records"]
    old = next(f for f in every if f["id"] == fact["id"])
    assert old["status"] == "superseded" and old["superseded_by"] == new_id
    history = (await api.http.get(f"/v1/stores/semantic/{fact['id']}/history", headers=alice)).json()["history"]
    assert [h["op"] for h in history] == ["add", "update", "supersede"]
    assert history[1]["actor"].startswith("api:")
    assert (await api.http.delete(f"/v1/stores/semantic/{new_id}", headers=alice)).json() == {"deleted": new_id}
    assert_error(await api.http.get(f"/v1/stores/semantic/{new_id}", headers=alice), 404, "not_found")
    assert await api.memory.history(api.memory.scoped("alice").scope, new_id) == []


async def test_search_with_budget_types_time_window_and_score_parts(api):
    alice = await api.key("alice")
    for body in ({"subject": "alice", "summary": "Alice is allergic to peanuts"},
                 {"subject": "alice", "summary": "Alice's cat is called Miso"}):
        await api.http.post("/v1/stores/semantic", json=body, headers=alice)
    r = await api.http.post("/v1/stores/procedural", json={"summary": "How Alice bakes bread", "steps": ["mix", "knead", "bake"]},
                            headers=alice)
    assert r.status_code == 201, r.text
    r = await api.http.post("/v1/search", json={"query": "what is Alice allergic to", "k": 2}, headers=alice)
    hits = r.json()["hits"]
    assert hits[0]["record"]["summary"] == "Alice is allergic to peanuts"
    assert {"fused", "recency", "importance"} <= set(hits[0]["parts"])
    r = await api.http.post("/v1/search", json={"query": "bread", "types": ["procedural"]}, headers=alice)
    assert [h["store"] for h in r.json()["hits"]] == ["procedural"]
    r = await api.http.post("/v1/search", json={"query": "Alice", "budget_tokens": 40}, headers=alice)
    assert 0 < r.json()["tokens"] <= 40
    r = await api.http.post("/v1/search", json={"query": "Alice", "until": "2020-01-01T00:00:00Z"}, headers=alice)
    assert r.json()["hits"] == []


async def test_messages_make_turns_a_timeline_with_provenance_and_a_compiled_context(api):
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", json={"session_id": "s1", "messages": [
        {"role": "user", "text": "I started learning the violin last week", "timestamp": "2026-01-15T11:00:00Z"},
        {"role": "assistant", "text": "How exciting! How are the lessons going?", "timestamp": "2026-01-15T11:00:05Z"}]},
        headers=alice)
    assert r.status_code == 201
    first = r.json()["turns"][0]
    await api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": "Alice learns the violin",
                                                      "source_ids": [first["id"]]}, headers=alice)
    turns = (await api.http.get("/v1/timeline", params={"session_id": "s1"}, headers=alice)).json()["turns"]
    assert [t["summary"] for t in turns] == ["I started learning the violin last week", "How exciting! How are the lessons going?"]
    assert [p["store"] for p in turns[0]["produced"]] == ["semantic"]
    ctx = (await api.http.get("/v1/context", params={"session_id": "s1"}, headers=alice)).json()
    assert ctx["turns"] == 2 and ctx["sections"]["turns"] > 0 and ctx["sections"]["core"] > 0
    assert 0 < ctx["total"] <= ctx["budget"]
    assert "violin" in ctx["system_prompt"]  # the fact was paged in
    stores = {s["name"]: s["count"] for s in (await api.http.get("/v1/stores", headers=alice)).json()["stores"]}
    assert stores["episodic"] == 2 and stores["semantic"] == 1


async def test_core_blocks_read_and_edit_and_the_limit_is_kept(api, snapshot):
    alice = await api.key("alice", agent_id="helper")
    blocks = (await api.http.get("/v1/core", headers=alice)).json()["blocks"]
    assert [b["label"] for b in blocks] == ["persona", "human"]
    r = await api.http.post("/v1/core/human/append", json={"text": "Name: Alice."}, headers=alice)
    assert r.json()["value"].endswith("Name: Alice.")
    r = await api.http.post("/v1/core/human/replace", json={"old": "Alice", "new": "Alice Smith"}, headers=alice)
    assert "Alice Smith" in r.json()["value"]
    before = await snapshot(api.memory)
    limit = r.json()["limit"]
    assert_error(await api.http.put("/v1/core/human", json={"value": "x" * (limit + 1)}, headers=alice), 422, "block_limit")
    assert_error(await api.http.post("/v1/core/nope/append", json={"text": "hi"}, headers=alice), 404, "unknown_block")
    assert_error(await api.http.post("/v1/core/human/replace", json={"old": "absent", "new": "x"}, headers=alice), 422)
    assert await snapshot(api.memory) == before


async def test_a_key_sees_only_its_scope_and_no_request_can_name_another(api):
    alice, bob = await api.key("alice"), await api.key("bob")
    helper = await api.key("alice", agent_id="helper")
    r = await api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": "Alice's PIN hint is the cat"}, headers=alice)
    secret_id = r.json()["id"]
    await api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": "helper-only note about the cat"}, headers=helper)
    # bob: not found anywhere, cannot change or delete it, cannot write into alice's scope
    assert_error(await api.http.get(f"/v1/stores/semantic/{secret_id}", headers=bob), 404)
    assert_error(await api.http.patch(f"/v1/stores/semantic/{secret_id}", json={"importance": 1}, headers=bob), 404)
    assert_error(await api.http.delete(f"/v1/stores/semantic/{secret_id}", headers=bob), 404)
    assert (await api.http.post("/v1/search", json={"query": "cat PIN"}, headers=bob)).json()["hits"] == []
    assert (await api.http.get("/v1/stores/semantic", headers=bob)).json()["records"] == []
    assert (await api.http.get("/v1/timeline", headers=bob)).json()["turns"] == []
    err = assert_error(await api.http.post("/v1/stores/semantic", json={"user_id": "alice", "summary": "planted"}, headers=bob), 422)
    assert "API key" in err["message"]
    assert_error(await api.http.post("/v1/stores/semantic", json={"agent_id": "helper", "summary": "planted"}, headers=alice), 422)
    # the agent-bound key sees its agent's records and the user's shared ones (the user-wide key's
    # writes); the user-wide key sees both too, and another agent's key does not see the helper's
    helper_hits = (await api.http.post("/v1/search", json={"query": "cat"}, headers=helper)).json()["hits"]
    assert sorted(h["record"]["summary"] for h in helper_hits) == ["Alice's PIN hint is the cat", "helper-only note about the cat"]
    assert len((await api.http.post("/v1/search", json={"query": "cat"}, headers=alice)).json()["hits"]) == 2
    chef = await api.key("alice", agent_id="chef")
    assert [h["record"]["summary"] for h in (await api.http.post("/v1/search", json={"query": "cat"}, headers=chef)).json()["hits"]] \
        == ["Alice's PIN hint is the cat"]
    assert_error(await api.http.delete("/v1/memory", params={"confirm": "alice"}, headers=helper), 403, "agent_key")
    assert (await api.http.get("/v1/stores/semantic", headers=alice)).json()["records"]


async def test_keys_are_stored_hashed_checked_and_revocable(api):
    r = await api.http.post("/admin/keys", json={"user_id": "carol", "name": "app1"}, headers={"Authorization": f"Bearer {ADMIN}"})
    token, key_id = r.json()["token"], r.json()["key"]["key_id"]
    meta = await api.memory.state()
    stored = {k: v for k, v in meta.items() if k.startswith(KEY_PREFIX)}
    assert len(stored) == 1 and token not in json.dumps(stored) and key_id in next(iter(stored))
    carol = {"Authorization": f"Bearer {token}"}
    assert (await api.http.get("/v1/core", headers=carol)).status_code == 200
    assert (await api.http.get("/v1/core", headers={"X-API-Key": token})).status_code == 200
    assert_error(await api.http.get("/v1/core"), 401, "unauthorized")
    assert_error(await api.http.get("/v1/core", headers={"Authorization": "Bearer mk_guessed"}), 401)
    assert_error(await api.http.get("/admin/keys", headers=carol), 401)  # a tenant key is not the admin key
    listed = (await api.http.get("/admin/keys", headers={"Authorization": f"Bearer {ADMIN}"})).json()["keys"]
    assert [k["key_id"] for k in listed] == [key_id] and "token" not in listed[0]
    assert (await api.http.delete(f"/admin/keys/{key_id}", headers={"Authorization": f"Bearer {ADMIN}"})).status_code == 200
    assert_error(await api.http.get("/v1/core", headers=carol), 401)
    assert_error(await api.http.delete("/admin/keys/nope", headers={"Authorization": f"Bearer {ADMIN}"}), 404, "unknown_key")


async def test_admin_routes_are_off_without_an_admin_key(mem):
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(ServeConfig(memory=mem))), base_url="http://memos")
    assert_error(await http.post("/admin/keys", json={"user_id": "x"}, headers={"Authorization": "Bearer anything"}), 403, "admin_disabled")


async def test_bad_input_gets_a_4xx_naming_the_fix_and_changes_nothing(api, snapshot):
    alice = await api.key("alice")
    r = await api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": "kept"}, headers=alice)
    fact_id = r.json()["id"]
    before = await snapshot(api.memory)
    json_headers = {**alice, "Content-Type": "application/json"}
    cases = [
        (api.http.post("/v1/stores/semantic", content=b"{not json", headers=json_headers), 422),
        (api.http.post("/v1/stores/semantic", json=["a", "list"], headers=alice), 422),
        (api.http.post("/v1/stores/semantic", json={"summary": "x", "importance": 7}, headers=alice), 422),
        (api.http.post("/v1/stores/semantic", json={"summary": "x", "colour": "red"}, headers=alice), 422),
        (api.http.post("/v1/stores/semantic", json={"id": "mine", "summary": "x"}, headers=alice), 422),
        (api.http.post("/v1/stores/vault", json={"secret": "hunter2"}, headers=alice), 422),
        (api.http.post("/v1/stores/nope", json={"summary": "x"}, headers=alice), 404),
        (api.http.patch(f"/v1/stores/semantic/{fact_id}", json={"user_id": "bob"}, headers=alice), 422),
        (api.http.patch(f"/v1/stores/semantic/{fact_id}", json={}, headers=alice), 422),
        (api.http.patch(f"/v1/stores/semantic/{fact_id}", json={"importance": "high"}, headers=alice), 422),
        (api.http.patch("/v1/stores/semantic/bad id!", json={"importance": 0.1}, headers=alice), 400),
        (api.http.post("/v1/search", json={"query": "x", "k": 10_000}, headers=alice), 422),
        (api.http.post("/v1/search", json={"query": "x", "k": 0}, headers=alice), 422),
        (api.http.post("/v1/search", json={"query": "x", "budget_tokens": 10**9}, headers=alice), 422),
        (api.http.post("/v1/search", json={"query": ""}, headers=alice), 422),
        (api.http.post("/v1/search", json={"query": "x", "types": ["nope"]}, headers=alice), 404),
        (api.http.post("/v1/search", json={"query": "x", "since": "yesterday-ish"}, headers=alice), 422),
        (api.http.post("/v1/messages", json={"messages": []}, headers=alice), 422),
        (api.http.post("/v1/messages", json={"messages": [{"role": "system", "text": "obey"}]}, headers=alice), 422),
        (api.http.post("/v1/messages", json={"messages": [{"text": "x"}] * 500}, headers=alice), 422),
        (api.http.post("/v1/messages", json={"session_id": "a\x00b", "messages": [{"text": "x"}]}, headers=alice), 400),
        (api.http.post("/v1/stores/resource", content=b"{" + b" " * 2_000_000 + b"}", headers=json_headers), 413),
        (api.http.get("/v1/stores/semantic", params={"limit": 10**6}, headers=alice), 422),
        (api.http.delete("/v1/memory", params={"confirm": "bob"}, headers=alice), 422),
        (api.http.get("/v1/nowhere", headers=alice), 404),
        (api.http.put("/v1/search", json={}, headers=alice), 405),
    ]
    for request, status in cases:
        r = await request
        error = assert_error(r, status)
        assert len(error["message"]) > 15, error
    assert await snapshot(api.memory) == before


async def test_an_unexpected_failure_is_a_bare_500_without_a_trace(api, monkeypatch):
    alice = await api.key("alice")

    async def broken(*args, **kwargs):
        raise RuntimeError("disk on fire at /secret/path")

    monkeypatch.setattr(api.memory, "search", broken)
    error = assert_error(await api.http.post("/v1/search", json={"query": "x"}, headers=alice), 500, "internal")
    assert "fire" not in error["message"]


async def test_vault_secrets_leave_only_through_an_approved_audited_reveal(api, clock):
    plain, cleared = await api.key("alice"), await api.key("alice", clearance="high", name="ops")
    r = await api.http.post("/v1/stores/vault", json={"caption": "bank PIN", "secret": "4711-0815", "sensitivity": "medium"},
                            headers=plain)
    item = r.json()
    assert item["secret"] == ""
    leaks = [await api.http.get(f"/v1/stores/vault/{item['id']}", headers=plain), await api.http.get("/v1/stores/vault", headers=plain),
             await api.http.post("/v1/search", json={"query": "bank PIN", "types": ["vault"]}, headers=plain),
             await api.http.get("/v1/export", headers=plain), await api.http.get("/v1/history", headers=plain),
             await api.http.get(f"/v1/stores/vault/{item['id']}/history", headers=plain)]
    for r in leaks:
        assert r.status_code == 200 and "4711-0815" not in r.text
    url = f"/v1/vault/{item['id']}/reveal"
    assert_error(await api.http.post(url, headers=plain), 403, "no_clearance")
    assert_error(await api.http.post(url, headers=cleared), 403, "approval_required")
    assert_error(await api.http.post(url, headers={**cleared, "X-Memos-Approval": "wrong"}), 403, "approval_required")
    clock.advance(seconds=1)
    r = await api.http.post(url, headers={**cleared, "X-Memos-Approval": ADMIN})
    assert r.status_code == 200 and r.json()["secret"] == "4711-0815" and r.headers["cache-control"] == "no-store"
    low = await api.key("alice", clearance="low")
    clock.advance(seconds=1)
    assert_error(await api.http.post(url, headers={**low, "X-Memos-Approval": ADMIN}), 403, "vault_refused")
    history = (await api.http.get(f"/v1/stores/vault/{item['id']}/history", headers=plain)).json()["history"]
    assert [(h["op"], h["note"]) for h in history[1:]] == [("reveal", "secret revealed"), ("reveal", "refused: medium item, low clearance")]
    assert "ops" in history[1]["actor"]


def _model(messages, info):
    return ModelResponse(parts=[TextPart("Noted: you like the violin.")])


async def test_chat_turns_through_the_agent_plain_and_streamed(mem):
    app = create_app(ServeConfig(memory=mem, admin_key=ADMIN, model=FunctionModel(_model)))
    api = Api(app, mem)
    alice = await api.key("alice")
    r = await api.http.post("/v1/chat", json={"message": "I play the violin", "session_id": "c1"}, headers=alice)
    assert r.status_code == 200 and r.json()["reply"] == "Noted: you like the violin."
    assert r.json()["context"]["sections"]["turns"] > 0
    async with api.http.stream("POST", "/v1/chat", json={"message": "and the piano", "session_id": "c1", "stream": True},
                               headers=alice) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join([chunk async for chunk in response.aiter_text()])
    events = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event:")]
    assert events == ["started", "reply", "done"]
    turns = (await api.http.get("/v1/timeline", params={"session_id": "c1"}, headers=alice)).json()["turns"]
    # the test clock stands still, so the four turns share one time: compare them as a set
    assert sorted(t["summary"] for t in turns) == ["I play the violin", "Noted: you like the violin.", "Noted: you like the violin.",
                                                   "and the piano"]


async def test_chat_without_a_model_says_how_to_configure_one(api):
    alice = await api.key("alice")
    error = assert_error(await api.http.post("/v1/chat", json={"message": "hi"}, headers=alice), 409, "no_model")
    assert "--model" in error["message"]


async def test_export_jobs_and_forget(api):
    alice, bob = await api.key("alice"), await api.key("bob")
    await api.http.post("/v1/stores/semantic", json={"subject": "alice", "summary": "Alice likes jazz"}, headers=alice)
    await api.http.post("/v1/stores/semantic", json={"subject": "bob", "summary": "Bob likes folk"}, headers=bob)
    lines = (await api.http.get("/v1/export", headers=alice)).text.splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds[0] == "header" and "record" in kinds and "Bob" not in "".join(lines)
    assert (await api.http.get("/v1/jobs", headers=alice)).json() == {"jobs": []}
    r = await api.http.delete("/v1/memory", params={"confirm": "alice"}, headers=alice)
    assert r.json()["removed"]["semantic"] == 1
    assert (await api.http.get("/v1/stores/semantic", headers=alice)).json()["records"] == []
    assert len((await api.http.get("/v1/stores/semantic", headers=bob)).json()["records"]) == 1


async def test_the_openapi_schema_describes_the_api(api):
    schema = (await api.http.get("/openapi.json")).json()
    for path in ("/v1/stores/{store}", "/v1/stores/{store}/{record_id}", "/v1/search", "/v1/messages", "/v1/core",
                 "/v1/chat", "/v1/export", "/v1/memory", "/v1/jobs", "/v1/vault/{record_id}/reveal", "/admin/keys", "/v1/events"):
        assert path in schema["paths"], path


# --- real servers on loopback sockets ------------------------------------------------------------

@pytest.fixture
def store_dir(tmp_path):
    path = tmp_path / "served"
    path.mkdir()
    return str(path)


def test_a_real_server_on_loopback_writes_searches_and_pushes_events(store_dir):
    with ServerProcess(store_dir) as server:
        alice = {"Authorization": f"Bearer {server.make_key('alice')}"}
        with httpx.Client(base_url=server.url, headers=alice, timeout=30) as http:
            with http.stream("GET", "/v1/events") as events:
                lines = (line for line in events.iter_lines() if line)
                assert next(lines) == ": connected"
                r = http.post("/v1/messages", json={"messages": [{"text": "hello from a socket"}]})
                assert r.status_code == 201
                frame = [next(lines), next(lines)]
            assert frame[0] == "event: turn" and json.loads(frame[1].removeprefix("data: "))["user_id"] == "alice"
            hits = http.post("/v1/search", json={"query": "socket"}).json()["hits"]
            assert [h["record"]["summary"] for h in hits] == ["hello from a socket"]
            assert http.get("/ui").status_code == 200 and "memos" in http.get("/ui").text
            assert http.get("/ui/view.js").status_code == 200


def test_each_worker_of_memos_serve_caps_lancedbs_threads_before_its_store_opens(store_dir):
    """`memos serve --workers 2 --store-threads 1`: every worker process reports LanceDB's worker
    threads capped at 1 (the cap is set in each worker before its store opens; LanceDB reads it
    when its runtime starts)."""
    import os
    import subprocess
    import sys
    import time

    from memos.bench.serve import free_port

    port, admin = free_port(), "admin-" + "k" * 20
    env = {**os.environ, "MEMOS_ADMIN_KEY": admin, "LANCE_LOG": "error"}
    env.pop("TOKIO_WORKER_THREADS", None)
    proc = subprocess.Popen([sys.executable, "-m", "memos.cli", "serve", "--db", store_dir, "--port", str(port), "--embedder", "none",
                             "--workers", "2", "--store-threads", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        seen: dict[int, str | None] = {}
        deadline = time.monotonic() + 120
        while len(seen) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else proc.returncode
            try:  # a new connection each time: either worker may take it
                r = httpx.get(f"http://127.0.0.1:{port}/admin/stats", headers={"Authorization": f"Bearer {admin}"}, timeout=30)
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if r.status_code == 200:
                seen[r.json()["pid"]] = r.json()["store_threads"]
        assert seen and set(seen.values()) == {"1"}, seen
        assert proc.pid not in seen  # answered by the spawned workers, not the supervisor
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_server_process_finds_at_once_what_another_of_the_store_acknowledged(store_dir):
    """Read your writes across `--workers`: right after one process acknowledged an add, an update
    or a delete, a search in another process of the store sees it (before, up to a second later:
    11 of 20 such searches missed the add); a read by id, a budgeted search, an export and the
    history too (before, every one missed an add for half a second: it waited in the writer's journal)."""
    from memos import Client, RecordNotFoundError, Scope
    from memos.memtypes import Fact

    with ServerProcess(store_dir) as first, ServerProcess(store_dir, admin_key=first.admin_key) as second:
        token = first.make_key("team")
        team = Scope("team")
        with Client(first.url, key=token) as writer, Client(second.url, key=token) as reader:
            assert reader.search("zebra", team, k=3) == []  # the store is counted empty here
            added = []
            for i in range(8):
                [fact] = writer.add(team, Fact(subject="team", summary=f"the team saw zebra{i}q at the zoo"))
                added.append(fact)
                assert [h.record.id for h in reader.search(f"zebra{i}q", team, k=3)][:1] == [fact.id], i
                if i % 2:  # budgeted: its candidates come from the stores, which the writer journals
                    assert fact.id in [h.record.id for h in reader.search(f"zebra{i}q", team, budget_tokens=400)], i
                elif i % 4:  # the audit trail
                    assert [e.op for e in reader.history(team, fact.id)] == ["add"], i
                else:  # a list (the typed store itself)
                    assert fact.id in "\n".join(reader.export(team)), i
                assert reader.get(team, "semantic", fact.id).summary == fact.summary  # (a get waited for it before too)
            writer.update(team, "semantic", added[0].id, {"summary": "the team saw okapi7q at the zoo"})
            assert [h.record.id for h in reader.search("okapi7q", team, k=3)][:1] == [added[0].id]
            writer.delete(team, "semantic", added[1].id)
            assert added[1].id not in [h.record.id for h in reader.search("zebra1q", team, k=3)]
            with pytest.raises(RecordNotFoundError):
                reader.get(team, "semantic", added[1].id)


async def test_a_key_made_or_revoked_through_one_open_of_a_store_counts_at_once_in_another(mem, db_path, embedder, clock, vault_key):
    """Two opens of one local store stand for two workers: each caches the keys it read, and
    re-reads them as soon as the other made or revoked one (before: a new key was unknown there
    for up to 1.5 s, a revoked one kept working for up to 4 s)."""
    from memos import MemoryOS
    from memos.serve.tenancy import FAMILY, Tenants

    other = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key)
    here, there = Tenants(mem), Tenants(other)
    first, _ = await here.create("alice")
    assert (await there.resolve(first)).user_id == "alice"  # read now: cached
    epoch = other.state_epoch(FAMILY)
    token, key = await here.create("bob", name="laptop")
    assert other.state_epoch(FAMILY) != epoch and mem.state_epoch(FAMILY) is not None
    assert (await there.resolve(token)) == key  # at once, though its cache is fresh
    epoch = other.state_epoch(FAMILY)
    await mem.set_state("reflection:x", "{}")  # another family of state entries: the keys are not read again for it
    assert other.state_epoch(FAMILY) == epoch
    assert await there.revoke(key.key_id)
    assert await here.resolve(token) is None  # revoked by the other, refused here at once
    assert (await here.resolve(first)).user_id == "alice"
    reads = 0
    reload = there._reload

    async def counted() -> None:
        nonlocal reads
        reads += 1
        await reload()

    there._reload = counted
    for _ in range(5):  # unknown tokens cost no read while no key changed (within the cache's time)
        assert await there.resolve("mk_unknown") is None
    assert reads == 0
    await here.create("carol")
    await asyncio.gather(*(there.resolve("mk_unknown") for _ in range(5)))
    assert reads == 1  # concurrent requests after a change share one read


def test_two_server_processes_share_one_store_and_its_keys(store_dir):
    with ServerProcess(store_dir) as first:
        with ServerProcess(store_dir, admin_key=first.admin_key) as second:
            token = first.make_key("team")  # known to the other process at once
            headers = {"Authorization": f"Bearer {token}"}
            ids = []
            for i, server in enumerate([first, second] * 3):
                r = httpx.post(server.url + "/v1/stores/semantic", json={"subject": "team", "summary": f"note {i}"},
                               headers=headers, timeout=30)
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
            # at once: another process's journaled adds are written when a read here asks for them
            for server in (first, second):
                records = httpx.get(server.url + "/v1/stores/semantic", headers=headers, timeout=30).json()["records"]
                assert sorted(r["id"] for r in records) == sorted(ids)
            key_id = httpx.get(first.url + "/admin/keys", headers={"Authorization": f"Bearer {first.admin_key}"}).json()["keys"][0]["key_id"]
            httpx.delete(first.url + f"/admin/keys/{key_id}", headers={"Authorization": f"Bearer {first.admin_key}"})
            assert httpx.get(second.url + "/v1/core", headers=headers).status_code == 401  # refused there at once


def test_a_view_connected_to_one_server_process_hears_the_writes_made_through_another(store_dir):
    """The web view's `/v1/events` stream on one worker of `--workers N` gets the events of writes made
    through the others (before: only its own worker's; the others' on the view's next refresh), for
    its key's scope only, in the order they were made."""
    with ServerProcess(store_dir) as first, ServerProcess(store_dir, admin_key=first.admin_key) as second:
        alice = {"Authorization": f"Bearer {first.make_key('alice')}"}
        bob = {"Authorization": f"Bearer {first.make_key('bob')}"}
        with httpx.Client(base_url=first.url, headers=alice, timeout=10) as view, httpx.Client(base_url=second.url, timeout=30) as other:
            with view.stream("GET", "/v1/events") as events:
                lines = (line for line in events.iter_lines() if line and not line.startswith(": heartbeat"))
                assert next(lines) == ": connected"
                added = other.post("/v1/stores/semantic", json={"subject": "alice", "summary": "likes okapis"}, headers=alice).json()["id"]
                other.post("/v1/stores/semantic", json={"subject": "bob", "summary": "bob's own"}, headers=bob)
                assert other.delete(f"/v1/stores/semantic/{added}", headers=alice).status_code == 200
                frames = []
                for _ in range(2):  # a frame of bob's would come between the two
                    kind, data = next(lines), next(lines)
                    frames.append((kind, json.loads(data.removeprefix("data: "))))
        assert [(kind, data["ids"], data["user_id"]) for kind, data in frames] == [("event: add", [added], "alice"),
                                                                                   ("event: delete", [added], "alice")]
        notices = Path(store_dir) / ".memos-notices"
        posted = b"".join(p.read_bytes() for p in notices.glob("*.jsonl"))
        assert posted.count(b'"who"') >= 3 and b"alice" not in posted and b"bob" not in posted  # users go in as pseudonyms only
    assert list(notices.glob("*.jsonl")) == []  # a server that stops removes its notices


def test_one_chat_session_posted_to_through_two_server_processes_at_once_keeps_every_turn_in_context(store_dir):
    """Each worker opens the session from its saved state, records and saves: done at once in two
    workers, each saved a state without the other's turns (12-14 of 20 left in the context). The
    session lock now holds across the store's processes (`MemoryOS.exclusive`), and each opens the
    state the other has just journaled (`memos.store.lancedb.others`)."""
    with ServerProcess(store_dir) as first, ServerProcess(store_dir, admin_key=first.admin_key) as second:
        headers = {"Authorization": f"Bearer {first.make_key('team')}"}

        async def posts() -> set[int]:
            async with httpx.AsyncClient(timeout=60) as client:
                async def post(i: int) -> int:
                    server = (first, second)[i % 2]
                    r = await client.post(server.url + "/v1/messages", headers=headers, json={
                        "session_id": "s1", "messages": [{"role": "user", "content": f"message number {i}"}]})
                    return r.status_code
                codes: set[int] = set()
                for round_ in range(4):
                    codes |= set(await asyncio.gather(*(post(round_ * 4 + j) for j in range(4))))
                return codes

        assert asyncio.run(posts()) == {201}
        for server in (first, second):
            context = httpx.get(server.url + "/v1/context", params={"session_id": "s1", "budget": 100_000}, headers=headers, timeout=60)
            assert context.json()["turns"] == 16, context.text


async def test_the_graph_view_draws_entity_and_relation_stores_when_the_store_has_them(db_path, embedder, vault_key, api):
    from typing import ClassVar

    from memos import MemoryOS
    from memos.memtypes import MemoryRecord

    alice = await api.key("alice")
    assert (await api.http.get("/v1/graph", headers=alice)).json() == {"available": "entity" in api.memory.types and
                                                                       "relation" in api.memory.types, "nodes": [], "edges": []}
    if "entity" in api.memory.types:
        return  # the graph types are built in: the store above already had them (and no records)

    class Entity(MemoryRecord):
        memory_type: ClassVar[str] = "entity"
        name: str
        kind: str = "thing"

        def index_text(self) -> str:
            return self.name

        def render(self) -> str:
            return self.name

    class Relation(MemoryRecord):
        memory_type: ClassVar[str] = "relation"
        subject: str
        predicate: str
        object: str

        def index_text(self) -> str:
            return f"{self.subject} {self.predicate} {self.object}"

        def render(self) -> str:
            return self.index_text()

    memory = await MemoryOS.open(db_path.parent / "graph", embedder=embedder, vault_key_file=vault_key, types=[Entity, Relation])
    graph_api = Api(create_app(ServeConfig(memory=memory, admin_key=ADMIN)), memory)
    alice = await graph_api.key("alice")
    for body in ({"name": "Alice", "kind": "person"}, {"name": "Miso", "kind": "animal"}):
        assert (await graph_api.http.post("/v1/stores/entity", json=body, headers=alice)).status_code == 201
    await graph_api.http.post("/v1/stores/relation", json={"subject": "Alice", "predicate": "has cat", "object": "Miso"}, headers=alice)
    graph = (await graph_api.http.get("/v1/graph", headers=alice)).json()
    assert graph["available"] and sorted(n["label"] for n in graph["nodes"]) == ["Alice", "Miso"]
    assert [(e["source"], e["label"], e["target"]) for e in graph["edges"]] == [("Alice", "has cat", "Miso")]


async def test_search_as_of_a_given_day(api):
    alice = await api.key("alice")
    for session, text, when in (("s1", "I baked sourdough bread at home this evening.", "2023-05-02T19:00:00Z"),
                                ("s2", "I baked a lemon cake at home this evening.", "2023-06-20T19:00:00Z")):
        r = await api.http.post("/v1/messages", json={"session_id": session, "messages": [{"text": text, "timestamp": when}]},
                                headers=alice)
        assert r.status_code == 201, r.text
    for now, expected in (("2023-05-10T00:00:00Z", "bread"), ("2023-06-28T00:00:00Z", "cake")):
        r = await api.http.post("/v1/search", json={"query": "What did I bake last week?", "k": 1, "now": now}, headers=alice)
        assert expected in r.json()["hits"][0]["record"]["summary"]
    r = await api.http.post("/v1/search", json={"query": "bread", "now": "last tuesday"}, headers=alice)
    assert r.status_code == 422
