"""`POST /v1/messages` with extraction: the memory manager turns posted turns into memories.

The app runs in-process through the ASGI transport on a real store with the real embedder; the
memory manager's model is a scripted `FunctionModel` that stores one fact per batch. Extraction
runs in the background after the turns are acknowledged, shows as a job in `/v1/jobs`, links the
records it writes to their turns, and never loses the turns when it fails.
"""

from __future__ import annotations

import asyncio

import httpx2 as httpx
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos import Scope
from memos.serve import ServeConfig, create_app

ADMIN = "admin-key-for-tests-0123456789"


class Manager:
    """The memory manager's model: one fact per batch, naming what the user said; `gate` holds it until set."""

    def __init__(self, *, fail: bool = False, gate: asyncio.Event | None = None) -> None:
        self.fail = fail
        self.gate = gate
        self.prompts: list[str] = []

    async def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.prompts.append(" ".join(str(getattr(p, "content", "")) for m in messages for p in m.parts))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionError("provider unavailable")
        summary = "Alice plays the cello" if "cello" in self.prompts[-1] else "Alice said something"
        action = {"kind": "insert", "store": "semantic", "fields": {"subject": "Alice", "summary": summary}}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": [action]})])


class Api:
    def __init__(self, mem, manager: Manager | None, **config) -> None:
        model = FunctionModel(manager) if manager is not None else None
        self.app = create_app(ServeConfig(memory=mem, admin_key=ADMIN, model=model, extract_backoff=0, **config))
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app, raise_app_exceptions=False), base_url="http://memos")

    async def key(self, user: str) -> dict[str, str]:
        r = await self.http.post("/admin/keys", json={"user_id": user}, headers={"Authorization": f"Bearer {ADMIN}"})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    async def job(self, headers: dict[str, str], job_id: str, *, done: bool = True) -> dict:
        """The job's entry in /v1/jobs (waiting until it has ended, with `done`)."""
        for _ in range(600):
            jobs = (await self.http.get("/v1/jobs", headers=headers)).json()["jobs"]
            found = [j for j in jobs if j.get("job_id") == job_id]
            assert len(found) <= 1, jobs
            if found and (not done or found[0]["status"] != "running"):
                return found[0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"job {job_id} did not end: {jobs}")


async def test_openai_style_messages_are_extracted_in_the_background_into_records_linked_to_their_turns(mem):
    gate = asyncio.Event()
    manager = Manager(gate=gate)
    api = Api(mem, manager)
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"session_id": "s1", "messages": [
        {"role": "user", "content": "I play the cello every evening"},
        {"role": "assistant", "content": [{"type": "text", "text": "Lovely!"}, {"type": "text", "text": "Since when?"}]}]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert [t["summary"] for t in body["turns"]] == ["I play the cello every evening", "Lovely!\nSince when?"]
    turn_ids = [t["id"] for t in body["turns"]]
    job_id = body["extraction"]["job_id"]
    assert body["extraction"]["status"] == "running"

    running = await api.job(alice, job_id, done=False)  # acknowledged before the manager has answered
    assert running["status"] == "running" and running["turn_ids"] == turn_ids and running["job"] == "extract"
    assert (await api.http.get("/v1/stores/semantic", headers=alice)).json()["records"] == []

    gate.set()
    job = await api.job(alice, job_id)
    assert job["status"] == "ok" and job["note"] == "ok" and job["errors"] == [] and job["turn_ids"] == turn_ids
    [fact] = (await api.http.get("/v1/stores/semantic", headers=alice)).json()["records"]
    assert fact["summary"] == "Alice plays the cello" and fact["source_ids"] == turn_ids  # provenance: the turns
    assert job["written"] == [{"action": "insert", "store": "semantic", "id": fact["id"]}]
    assert "I play the cello every evening" in manager.prompts[0]
    turns = (await api.http.get("/v1/timeline", params={"session_id": "s1"}, headers=alice)).json()["turns"]
    assert [p["id"] for p in turns[0]["produced"]] == [fact["id"]]


async def test_forgetting_the_user_while_an_extraction_runs_leaves_nothing_of_it(mem):
    """The job's records are drawn from the user's turns: the forget waits for the job under way
    and erases what it wrote too (it used to write them after the erase)."""
    gate = asyncio.Event()
    api = Api(mem, Manager(gate=gate))
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"session_id": "s1", "messages": [
        {"role": "user", "content": "I play the cello every evening"}]})
    await api.job(alice, r.json()["extraction"]["job_id"], done=False)
    forget = asyncio.ensure_future(api.http.delete("/v1/memory", params={"confirm": "alice"}, headers=alice))
    await asyncio.sleep(0.3)
    assert not forget.done()  # it waits for the job, which waits for its model
    gate.set()
    assert (await forget).status_code == 200
    for store in mem.type_names:
        assert await mem.list(Scope("alice"), store, status=None, limit=None) == [], store
    assert await mem.raw_history(Scope("alice")) == []


async def test_extract_false_records_the_turns_only(mem):
    manager = Manager()
    api = Api(mem, manager)
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"extract": False, "messages": [
        {"role": "user", "text": "I play the cello every evening"}]})
    assert r.status_code == 201 and r.json()["extraction"] is None
    await asyncio.sleep(0.2)
    assert manager.prompts == []
    assert (await api.http.get("/v1/jobs", headers=alice)).json() == {"jobs": []}
    assert (await api.http.get("/v1/stores/semantic", headers=alice)).json()["records"] == []
    assert len((await api.http.get("/v1/stores/episodic", headers=alice)).json()["records"]) == 1


async def test_a_server_set_not_to_extract_extracts_when_a_request_asks(mem):
    manager = Manager()
    api = Api(mem, manager, extract=False)
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"messages": [{"role": "user", "text": "I play the cello"}]})
    assert r.json()["extraction"] is None
    r = await api.http.post("/v1/messages", headers=alice, json={"extract": True, "messages": [{"role": "user", "text": "the cello again"}]})
    job = await api.job(alice, r.json()["extraction"]["job_id"])
    assert job["status"] == "ok" and len(manager.prompts) == 1


async def test_a_failing_extraction_is_a_failed_job_and_the_turns_stay(mem):
    manager = Manager(fail=True)
    api = Api(mem, manager, extract_attempts=2)
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"messages": [{"role": "user", "content": "I play the cello"}]})
    assert r.status_code == 201
    job = await api.job(alice, r.json()["extraction"]["job_id"])
    assert job["status"] == "failed" and job["note"] == "failed" and job["attempts"] == 2
    assert len(job["errors"]) == 2 and "provider unavailable" in job["errors"][-1]
    assert len(manager.prompts) == 2  # tried again once
    [turn] = (await api.http.get("/v1/stores/episodic", headers=alice)).json()["records"]
    assert turn["summary"] == "I play the cello" and job["turn_ids"] == [turn["id"]]


async def test_a_job_still_running_when_the_server_stops_is_recorded_as_failed(mem):
    api = Api(mem, Manager(gate=asyncio.Event()))  # never answers
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"messages": [{"role": "user", "content": "I play the cello"}]})
    job_id = r.json()["extraction"]["job_id"]
    await api.app.state.memos.extractions.drain(0.1)  # what the app's shutdown does, with a shorter wait
    job = await api.job(alice, job_id)
    assert job["status"] == "failed" and "interrupted" in job["errors"][-1]
    assert len((await api.http.get("/v1/stores/episodic", headers=alice)).json()["records"]) == 1


async def test_malformed_messages_are_a_422_and_store_nothing(mem, snapshot):
    api = Api(mem, Manager())
    alice = await api.key("alice")
    good = {"role": "user", "content": "I play the cello"}
    before = await snapshot(mem)
    for bad in ({"role": "user", "text": "a", "content": "b"}, {"role": "user"}, {"role": "system", "content": "be brief"},
                {"role": "user", "content": ""}, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                {"role": "user", "content": [{"type": "text"}]}, {"role": "user", "content": 42}):
        r = await api.http.post("/v1/messages", headers=alice, json={"messages": [good, bad]})
        assert r.status_code == 422, (bad, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request" and "messages.1" in error["message"], error
    assert await snapshot(mem) == before
    assert (await api.http.get("/v1/jobs", headers=alice)).json() == {"jobs": []}


async def test_asking_for_extraction_on_a_server_without_a_model_is_a_409_and_stores_nothing(mem, snapshot):
    api = Api(mem, None)
    alice = await api.key("alice")
    r = await api.http.post("/v1/messages", headers=alice, json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 201 and r.json()["extraction"] is None  # no model: the turns are recorded, nothing extracted
    before = await snapshot(mem)
    r = await api.http.post("/v1/messages", headers=alice, json={"extract": True, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 409 and r.json()["error"]["type"] == "no_model" and "--model" in r.json()["error"]["message"]
    assert await snapshot(mem) == before
