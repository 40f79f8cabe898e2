"""One rule for what an agent sees, everywhere: its own records and its user's shared (agent-less) ones.

Turns ingested without an agent are the user's shared memory: the chat agent (`--agent
assistant` by default) sees them in the Python API, the CLI, the HTTP API and MCP. Another
agent's records stay out of its view, another user's always; and where a scope sees nothing
while the user holds records elsewhere, the CLI says so with the counts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx2 as httpx
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from memos.memtypes import Fact
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.bench.serve import ServerProcess
from memos.cli import app

runner = CliRunner()
TURNS = [{"speaker": "alice", "text": "I am allergic to shellfish, so no prawns please."},
         {"speaker": "assistant", "text": "Noted: no shellfish for you."}]


async def _alice(db: Path, embedder=None) -> MemoryOS:
    """Alice's store: two shared turns (ingested without an agent), a chef's fact, one of Bob's."""
    mem = await MemoryOS.open(db, embedder=embedder)
    await mem.ingest(Scope("alice"), TURNS)
    await mem.add(Scope("alice", "chef"), Fact(subject="Alice", summary="Alice likes her prawn curry hot"))
    await mem.add(Scope("bob"), Fact(subject="Bob", summary="Bob is allergic to shellfish too"))
    return mem


async def test_an_agent_sees_its_own_and_the_shared_records_never_another_agents_or_users(tmp_path):
    mem = await _alice(tmp_path / "db")
    assistant, chef = Scope("alice", "assistant"), Scope("alice", "chef")
    seen = {h.record.render() for h in await mem.search("shellfish prawns curry", assistant)}
    assert any("allergic to shellfish" in t for t in seen) and not any("curry" in t or "Bob" in t for t in seen)
    assert len(await mem.search("shellfish prawns curry", chef)) == 3  # its own fact and both shared turns
    assert (await mem.counts(assistant))["episodic"] == 2 and (await mem.counts(assistant))["semantic"] == 0
    assert len(await mem.list(assistant, "episodic")) == 2
    # the chat session's context pages the shared turns in
    session = await mem.session(Scope("alice", "assistant", "s1"), budget=2000)
    ctx = await session.preview("what am I allergic to?")
    assert ctx.sections["memories"] > 0 and any("shellfish" in h.record.render() for h in ctx.paged_in)
    # an agent's writes are its own: the assistant's fact is not the chef's
    [own] = await mem.add(assistant, Fact(subject="Alice", summary="Alice asked for a shellfish-free menu"))
    assert own.agent_id == "assistant" and own.id not in {h.id for h in await mem.search("shellfish-free menu", chef, k=10)}
    # erasing an agent erases its own records only, never the shared ones
    await mem.erase(chef)
    assert (await mem.counts(Scope("alice", "")))["episodic"] == 2 and (await mem.counts(chef))["semantic"] == 0


def test_the_cli_chat_agent_sees_turns_ingested_without_an_agent_and_says_what_it_cannot_see(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db, chat = str(tmp_path / "db"), tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps(t) + "\n" for t in TURNS))
    assert runner.invoke(app, ["ingest", str(chat), "--db", db, "--user", "alice"]).exit_code == 0
    out = runner.invoke(app, ["inspect", "context", "--db", db, "--user", "alice", "--message", "what am I allergic to?", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["sections"]["memories"] > 0  # the default agent, assistant, sees them
    out = runner.invoke(app, ["search", "shellfish", "--db", db, "--user", "alice", "--agent", "assistant", "--json"])
    assert any("allergic to shellfish" in h["text"] for h in json.loads(out.stdout))
    out = runner.invoke(app, ["chat", "--model", "test", "--db", db, "--user", "alice", "-m", "hi"])
    assert out.exit_code == 0 and "memories" not in out.stderr  # nothing to explain: it sees the shared turns
    # records another agent wrote: the empty search and the context say where they are
    runner.invoke(app, ["add", "Carol keeps bees", "--db", db, "--user", "carol", "--agent", "chef"])
    out = runner.invoke(app, ["search", "bees", "--db", db, "--user", "carol", "--agent", "assistant"])
    assert out.exit_code == 0 and out.stdout == ""
    assert "0 memories for user carol, agent assistant; 1 for carol under other agents (chef: 1)" in out.stderr
    out = runner.invoke(app, ["inspect", "context", "--db", db, "--user", "carol", "--message", "bees?"])
    assert out.exit_code == 0 and "memories: 0 memories for user carol, agent assistant" in out.stderr
    out = runner.invoke(app, ["chat", "--model", "test", "--db", db, "--user", "carol", "-m", "hi"])
    assert out.exit_code == 0 and "chat as agent assistant: 0 memories for user carol" in out.stderr


def test_an_agent_key_over_http_sees_the_shared_turns_and_not_another_agents(tmp_path):
    import asyncio

    db = tmp_path / "db"
    asyncio.run(_alice(db))
    with ServerProcess(str(db)) as server:
        def summaries(key: str, query: str) -> list[str]:
            r = httpx.post(server.url + "/v1/search", json={"query": query}, headers={"Authorization": f"Bearer {key}"}, timeout=30)
            assert r.status_code == 200, r.text
            return sorted(h["record"].get("summary", "") for h in r.json()["hits"])

        assistant = server.make_key("alice", agent_id="assistant")
        assert summaries(assistant, "shellfish prawns curry") == sorted(t["text"] for t in TURNS)
        assert "Alice likes her prawn curry hot" in summaries(server.make_key("alice", agent_id="chef"), "prawn curry")


async def test_an_mcp_agent_sees_the_shared_turns_and_not_another_agents(tmp_path):
    db = tmp_path / "db"
    await _alice(db)
    params = StdioServerParameters(command=sys.executable, env={**os.environ, "LANCE_LOG": "error"},
                                   args=["-m", "memos.cli", "mcp", "--db", str(db), "--user", "alice", "--agent", "assistant",
                                         "--embedder", "none"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        text = (await client.call_tool("memory_search", {"query": "shellfish prawn curry"})).content[0].text
    assert "allergic to shellfish" in text and "curry" not in text and "Bob" not in text
