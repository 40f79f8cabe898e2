"""The served API describes itself: a bearer security scheme, a typed response on every route,
an API reference at /docs from the package itself, and search hits that carry their text and tokens."""

from __future__ import annotations

import re

import httpx2 as httpx
import pytest

from memos.serve import ServeConfig, create_app

ADMIN = "admin-key-for-tests-0123456789"
STREAMS = {("get", "/v1/events"): "text/event-stream", ("get", "/v1/export"): "application/x-ndjson"}


@pytest.fixture
async def http(mem):
    app = create_app(ServeConfig(memory=mem, admin_key=ADMIN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://memos") as client:
        yield client


async def test_every_operation_declares_the_bearer_scheme_and_a_typed_response(http):
    schema = (await http.get("/openapi.json")).json()
    bearer = schema["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    operations = [(m, p, op) for p, ops in schema["paths"].items() for m, op in ops.items()]
    assert len(operations) >= 28
    for method, path, op in operations:
        where = f"{method.upper()} {path}"
        if path.startswith(("/v1/", "/admin/")):
            assert op.get("security") == [{"bearer": []}], where
        ok = [status for status in op["responses"] if status.startswith("2")]
        assert len(ok) == 1, where
        content = op["responses"][ok[0]]["content"]
        if (method, path) in STREAMS:
            assert list(content) == [STREAMS[method, path]], where
            continue
        ref = content["application/json"]["schema"].get("$ref", "")
        assert ref.startswith("#/components/schemas/"), (where, content)
        model = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert model["properties"], where
        if path.startswith(("/v1/", "/admin/")):
            for status in ("401", "422"):
                assert op["responses"][status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorOut"}, where
    record = schema["components"]["schemas"]["RecordOut"]
    assert {"id", "memory_type", "rendered", "source_ids"} <= set(record["properties"]) and record["additionalProperties"] is True


async def test_docs_is_a_page_of_the_package_that_loads_nothing_from_elsewhere(http):
    r = await http.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    sources = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert "/ui/docs.js" in sources and all(s.startswith("/") for s in sources), sources
    for asset in ("/ui/docs.js", "/ui/docs.css"):
        page = await http.get(asset)
        assert page.status_code == 200 and "https://" not in page.text and "http://" not in page.text, asset


async def test_top_k_hits_carry_their_text_and_tokens(http, mem):
    r = await http.post("/admin/keys", json={"user_id": "alice"}, headers={"Authorization": f"Bearer {ADMIN}"})
    alice = {"Authorization": f"Bearer {r.json()['token']}"}
    for summary in ("Alice is allergic to peanuts", "爱丽丝住在里斯本"):
        await http.post("/v1/stores/semantic", json={"subject": "alice", "summary": summary}, headers=alice)
    await http.post("/v1/messages", json={"messages": [{"role": "user", "text": "I am allergic to peanuts"}]}, headers=alice)
    for query in ("what is Alice allergic to", "爱丽丝住在哪里"):
        body = (await http.post("/v1/search", json={"query": query, "k": 5}, headers=alice)).json()
        assert len(body["hits"]) >= 2
        for hit in body["hits"]:
            assert hit["text"] and hit["tokens"] == mem.tokenizer.count(hit["text"]), hit
            assert hit["record"]["rendered"] in hit["text"] or hit["text"] in hit["record"]["rendered"], hit
        assert body["tokens"] == sum(h["tokens"] for h in body["hits"]) > 0
    budgeted = (await http.post("/v1/search", json={"query": "Alice", "budget_tokens": 60}, headers=alice)).json()
    assert budgeted["hits"] and all(h["text"] and h["tokens"] > 0 for h in budgeted["hits"])
    assert 0 < budgeted["tokens"] <= 60
