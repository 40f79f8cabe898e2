"""What the web view lists: the caller's sessions (latest first) and a store's records filtered by
status, tags, time range and text (Chinese too), with bad filters refused and nothing changed."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from memos.serve import ServeConfig, create_app

ADMIN = "admin-key-for-tests-0123456789"


@pytest.fixture
async def http(mem):
    app = create_app(ServeConfig(memory=mem, admin_key=ADMIN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://memos") as client:
        yield client


async def _key(http, user: str, **options) -> dict[str, str]:
    r = await http.post("/admin/keys", json={"user_id": user, **options}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def test_sessions_are_listed_latest_first_with_turn_counts_and_only_the_callers(http):
    alice, bob = await _key(http, "alice"), await _key(http, "bob")
    for session, at in (("旅行", "2026-03-01T10:00:00Z"), ("work", "2026-03-02T10:00:00Z")):
        r = await http.post("/v1/messages", headers=alice, json={"session_id": session, "messages": [
            {"role": "user", "text": f"hello from {session}", "timestamp": at},
            {"role": "assistant", "text": "hi", "timestamp": at.replace("10:00", "10:01")}]})
        assert r.status_code == 201, r.text
    await http.post("/v1/messages", headers=alice, json={"session_id": "旅行", "messages": [
        {"role": "user", "text": "我们明天去波尔图", "timestamp": "2026-03-03T09:00:00Z"}]})
    await http.post("/v1/stores/semantic", headers=alice, json={"subject": "alice", "summary": "not a turn"})

    r = await http.get("/v1/sessions", headers=alice)
    assert r.status_code == 200, r.text
    sessions = r.json()["sessions"]
    assert [(s["session_id"], s["turns"]) for s in sessions] == [("旅行", 3), ("work", 2)]
    assert sessions[0]["first_at"].startswith("2026-03-01T10:00") and sessions[0]["last_at"].startswith("2026-03-03T09:00")
    assert [s["session_id"] for s in (await http.get("/v1/sessions", params={"limit": 1}, headers=alice)).json()["sessions"]] == ["旅行"]
    assert (await http.get("/v1/sessions", headers=bob)).json()["sessions"] == []
    assert (await http.get("/v1/sessions", params={"limit": 0}, headers=alice)).status_code == 422


async def test_a_stores_records_filter_by_text_tag_status_and_time(http):
    alice = await _key(http, "alice")
    made = {}
    for summary, tags in (("Alice prefers green tea", ["drink"]), ("Alice lives in Porto", ["place"]),
                          ("爱丽丝喜欢绿茶", ["drink", "中文"])):
        r = await http.post("/v1/stores/semantic", headers=alice, json={"subject": "alice", "summary": summary, "tags": tags})
        assert r.status_code == 201, r.text
        made[summary] = r.json()["id"]
    r = await http.post(f"/v1/stores/semantic/{made['Alice lives in Porto']}/supersede", headers=alice,
                        json={"subject": "alice", "summary": "Alice lives in Lisbon", "tags": ["place"]})
    assert r.status_code == 201, r.text

    async def listed(**params) -> list[str]:
        r = await http.get("/v1/stores/semantic", params=params, headers=alice)
        assert r.status_code == 200, r.text
        return sorted(x["summary"] for x in r.json()["records"])

    assert await listed(contains="PORTO") == []  # superseded: not active
    assert await listed(contains="porto", status="superseded") == ["Alice lives in Porto"]
    assert await listed(contains="绿茶") == ["爱丽丝喜欢绿茶"]
    assert await listed(contains="tea", tags="drink") == ["Alice prefers green tea"]
    assert await listed(tags="drink") == ["Alice prefers green tea", "爱丽丝喜欢绿茶"]
    assert await listed(status="all", contains="lives") == ["Alice lives in Lisbon", "Alice lives in Porto"]
    assert await listed(until="2000-01-01T00:00:00Z") == []
    assert len(await listed(since="2000-01-01T00:00:00Z", contains="alice", limit=1)) == 1

    r = await http.post("/v1/stores/vault", headers=alice, json={"caption": "bank PIN", "secret": "4711-0815", "sensitivity": "medium"})
    assert r.status_code == 201, r.text
    assert [v["caption"] for v in (await http.get("/v1/stores/vault", params={"contains": "bank"}, headers=alice)).json()["records"]] == ["bank PIN"]
    assert (await http.get("/v1/stores/vault", params={"contains": "4711"}, headers=alice)).json()["records"] == []  # never the secret

    for bad in ({"contains": "x" * 501}, {"tags": "a'b\x00"}, {"since": "yesterday"}, {"status": "gone"}):
        r = await http.get("/v1/stores/semantic", params=bad, headers=alice)
        assert r.status_code in (400, 422), (bad, r.text)
        assert r.json()["error"]["message"]
    assert len(await listed(status="all")) == 4  # nothing changed by the refused filters
