"""What the server guards beyond a single request: revocation reaching requests already running,
the vault's clearance over changes to an item, and the body limit on bodies of unknown length.

Revocation and the body limit run against real `memos serve` processes on loopback sockets;
the vault and chat cases run the app in-process on a real store.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from memos.memtypes import VaultItem
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from test_serve import ADMIN, Api, assert_error

from memos.bench.serve import ServerProcess
from memos.crypto import VaultAccessError
from memos.serve import ServeConfig, create_app
from memos.serve.deps import MAX_BODY_BYTES


@pytest.fixture
async def api(mem):
    yield Api(create_app(ServeConfig(memory=mem, admin_key=ADMIN)), mem)


@pytest.fixture
def store_dir(tmp_path):
    path = tmp_path / "served"
    path.mkdir()
    return str(path)


# --- revocation reaches open streams and running requests -------------------------------------

class EventReader:
    """Reads one `/v1/events` stream in a thread: its frames, and when it ended."""

    def __init__(self, url: str, token: str) -> None:
        self.frames: list[tuple[str, dict]] = []
        self.ended_at: float | None = None
        self.connected = threading.Event()
        self._client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.connected.wait(30), "the event stream did not open"

    def _read(self) -> None:
        try:
            with self._client.stream("GET", "/v1/events") as response:
                assert response.status_code == 200
                kind = None
                for line in response.iter_lines():
                    if line == ": connected":
                        self.connected.set()
                    elif line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: ") and kind:
                        self.frames.append((kind, json.loads(line.removeprefix("data: "))))
        except httpx.HTTPError:
            pass  # the server went away at the end of the test
        finally:
            self.ended_at = time.monotonic()

    def wait_end(self, seconds: float) -> float | None:
        self._thread.join(seconds)
        return self.ended_at

    def ids(self) -> set[str]:
        return {i for kind, data in self.frames if kind != "revoked" for i in data.get("ids", [])}

    def close(self) -> None:
        self._client.close()


def _turn_ids(url: str, headers: dict[str, str], text: str) -> list[str]:
    r = httpx.post(url + "/v1/messages", json={"messages": [{"text": text}]}, headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    return [t["id"] for t in r.json()["turns"]]


def _key_id(server: ServerProcess, name: str) -> str:
    keys = httpx.get(server.url + "/admin/keys", headers={"Authorization": f"Bearer {server.admin_key}"}, timeout=30).json()["keys"]
    return next(k["key_id"] for k in keys if k["name"] == name)


def test_a_revoked_key_ends_its_open_event_streams_within_5_s(store_dir):
    with ServerProcess(store_dir) as here, ServerProcess(store_dir, admin_key=here.admin_key) as there:
        admin = {"Authorization": f"Bearer {here.admin_key}"}
        writer = {"Authorization": f"Bearer {here.make_key('alice', name='writer')}"}
        local, remote = EventReader(here.url, here.make_key("alice", name="local")), EventReader(here.url, here.make_key("alice", name="remote"))
        before = _turn_ids(here.url, writer, "written while both keys are good")
        try:
            # revoked in the process that holds the stream: not one later event gets through
            assert httpx.delete(here.url + f"/admin/keys/{_key_id(here, 'local')}", headers=admin).status_code == 200
            revoked_at = time.monotonic()
            after = [i for n in range(5) for i in _turn_ids(here.url, writer, f"written after the revocation {n}")]
            ended = local.wait_end(5.0)
            assert ended is not None and ended - revoked_at < 5.0, "the stream of a revoked key is still open"
            assert local.frames[-1][0] == "revoked" and "revoked" in local.frames[-1][1]["message"]
            assert set(before) <= local.ids() and not local.ids() & set(after)

            # revoked through another process on the same store: the stream ends within 5 s all the same
            r = httpx.delete(there.url + f"/admin/keys/{_key_id(there, 'remote')}", headers=admin)
            assert r.status_code == 200, r.text
            revoked_at = time.monotonic()
            while remote.ended_at is None and time.monotonic() - revoked_at < 6.0:
                _turn_ids(here.url, writer, "written while the revocation travels")
                time.sleep(0.25)
            assert remote.ended_at is not None and remote.ended_at - revoked_at < 5.0, "the stream of a revoked key is still open"
            assert remote.frames[-1][0] == "revoked" and set(after) <= remote.ids()
            assert httpx.get(here.url + "/v1/core", headers=writer).status_code == 200  # the user's other key still works
        finally:
            local.close()
            remote.close()


async def _slow_model(messages, info):
    await asyncio.sleep(8)
    return ModelResponse(parts=[TextPart("finally")])


@pytest.mark.parametrize("stream", [False, True])
async def test_a_revoked_key_stops_its_running_chat_turn(mem, stream):
    api = Api(create_app(ServeConfig(memory=mem, admin_key=ADMIN, model=FunctionModel(_slow_model))), mem)
    alice = await api.key("alice", name="chatty")
    key_id = (await api.http.get("/admin/keys", headers={"Authorization": f"Bearer {ADMIN}"})).json()["keys"][0]["key_id"]

    async def revoke_soon() -> None:
        await asyncio.sleep(0.5)
        assert (await api.http.delete(f"/admin/keys/{key_id}", headers={"Authorization": f"Bearer {ADMIN}"})).status_code == 200

    started = time.monotonic()
    r, _ = await asyncio.gather(api.http.post("/v1/chat", json={"message": "take your time", "stream": stream}, headers=alice,
                                              timeout=30), revoke_soon())
    assert time.monotonic() - started < 5.0
    if stream:
        assert "event: error" in r.text and '"key_revoked"' in r.text and "finally" not in r.text
    else:
        assert_error(r, 401, "key_revoked")


# --- the vault: who may change what governs an item's access ----------------------------------

async def test_a_medium_key_cannot_talk_a_high_item_down_to_reveal_it(api):
    plain, medium = await api.key("alice"), await api.key("alice", clearance="medium", name="mid")
    high = await api.key("alice", clearance="high", name="ops")
    item = (await api.http.post("/v1/stores/vault", json={"caption": "root password", "secret": "hunter2-root"}, headers=plain)).json()
    url, approve = f"/v1/stores/vault/{item['id']}", {"X-Memos-Approval": ADMIN}
    stored = (await api.http.get(url, headers=plain)).json()
    assert stored["sensitivity"] == "high"
    assert_error(await api.http.post(f"/v1/vault/{item['id']}/reveal", headers={**medium, **approve}), 403, "vault_refused")

    error = assert_error(await api.http.patch(url, json={"sensitivity": "low"}, headers={**medium, **approve}), 403, "vault_refused")
    assert "clearance high" in error["message"]
    assert_error(await api.http.patch(url, json={"secret": "mine-now"}, headers={**medium, **approve}), 403, "vault_refused")
    assert_error(await api.http.patch(url, json={"sensitivity": "low"}, headers=plain), 403, "vault_refused")
    assert (await api.http.get(url, headers=plain)).json() == stored
    assert_error(await api.http.post(f"/v1/vault/{item['id']}/reveal", headers={**medium, **approve}), 403, "vault_refused")
    history = (await api.http.get(f"{url}/history", headers=plain)).json()["history"]
    refusals = [(h["op"], h["note"], h["actor"]) for h in history if (h["note"] or "").startswith("refused")]
    assert refusals[1:3] == [("update", "refused: sensitivity of a high item, medium clearance", "api:mid"),
                             ("update", "refused: secret of a high item, medium clearance", "api:mid")]
    assert len(refusals) == 5  # the reveal before and after, the three changes

    # a key whose clearance reaches the item lowers it, with the approval a reveal needs
    error = assert_error(await api.http.patch(url, json={"sensitivity": "low"}, headers=high), 403, "vault_refused")
    assert "X-Memos-Approval" in error["message"]
    assert (await api.http.get(url, headers=plain)).json()["sensitivity"] == "high"
    r = await api.http.patch(url, json={"sensitivity": "low"}, headers={**high, **approve})
    assert r.status_code == 200 and r.json()["sensitivity"] == "low"
    assert (await api.http.post(f"/v1/vault/{item['id']}/reveal", headers={**medium, **approve})).json()["secret"] == "hunter2-root"
    history = (await api.http.get(f"{url}/history", headers=plain)).json()["history"]
    assert ("update", "vault sensitivity changed high -> low, approved by operator for api:ops") in [(h["op"], h["note"]) for h in history]
    # what does not govern access stays writable by any key of the user
    assert (await api.http.patch(url, json={"caption": "root password (old box)"}, headers=plain)).status_code == 200


async def test_the_python_api_holds_vault_changes_to_clearance_and_approval(mem, alice, snapshot):
    item, = await mem.add(alice, VaultItem(caption="safe combination", secret="12-34-56", sensitivity="high"))
    before = await snapshot(mem)
    refused = [({"sensitivity": "low"}, {"clearance": "medium", "approved_by": "ops"}, "clearance high"),
               ({"sensitivity": "medium"}, {}, "needs an approval"),
               ({"secret": "65-43-21"}, {"clearance": "low"}, "clearance high"),
               ({"sensitivity": "low", "caption": "a safe"}, {"clearance": "none", "approved_by": "ops"}, "clearance high")]
    for changes, options, says in refused:
        with pytest.raises(VaultAccessError, match=says):
            await mem.update(alice, "vault", item.id, changes, actor="tool", **options)
    assert (await snapshot(mem))["vault"] == before["vault"]
    notes = [e.note for e in await mem.history(alice, item.id) if e.op == "update"]
    assert notes == ["refused: sensitivity of a high item, medium clearance", "refused: lowering high to medium without approval",
                     "refused: secret of a high item, low clearance", "refused: sensitivity of a high item, none clearance"]

    lowered = await mem.update(alice, "vault", item.id, {"sensitivity": "low"}, approved_by="ops")
    assert lowered.sensitivity == "low"
    assert await mem.reveal(alice, item.id, approved_by="ops", clearance="low") == "12-34-56"
    raised = await mem.update(alice, "vault", item.id, {"sensitivity": "medium", "secret": "99-88-77"}, clearance="low")
    assert raised.sensitivity == "medium"
    assert await mem.reveal(alice, item.id, approved_by="ops", clearance="medium") == "99-88-77"


# --- the body limit counts the bytes that arrive --------------------------------------------------

def _chunked_post(port: int, path: str, token: str, chunks: Iterator[bytes]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=chunks, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                     encode_chunked=True)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _json_in_chunks(document: dict, size: int) -> Iterator[bytes]:
    data = json.dumps(document).encode()
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_chunked_body_over_the_limit_gets_413_and_one_under_it_works(store_dir):
    with ServerProcess(store_dir) as server:
        token = server.make_key("alice")
        big = {"summary": "a long document", "content": "x" * (MAX_BODY_BYTES + 100_000)}
        status, body = _chunked_post(server.port, "/v1/stores/resource", token, _json_in_chunks(big, 64_000))
        assert status == 413 and body["error"]["type"] == "body_too_large" and "1,000,000 bytes" in body["error"]["message"]
        small = {"subject": "alice", "summary": "alice sends her bodies in chunks"}
        status, body = _chunked_post(server.port, "/v1/stores/semantic", token, _json_in_chunks(small, 7))
        assert status == 201 and body["summary"] == small["summary"]
        headers = {"Authorization": f"Bearer {token}"}
        records = httpx.get(server.url + "/v1/stores/resource", headers=headers, timeout=30).json()["records"]
        assert records == []


async def test_the_body_limit_counts_bytes_whatever_content_length_says():
    from memos.serve.app import BodyLimit

    reached: list[bytes] = []

    async def route(scope, receive, send) -> None:
        reached.append((await receive())["body"])

    sent: list[dict] = []
    chunks = [b"x" * 400] * 4  # 1,600 bytes, declared as 10

    async def receive() -> dict:
        body = chunks.pop()
        return {"type": "http.request", "body": body, "more_body": bool(chunks)}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/stores/resource", "headers": [(b"content-length", b"10")]}
    await BodyLimit(route, limit=1_000)(scope, receive, send)
    assert reached == [] and sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["type"] == "body_too_large"
