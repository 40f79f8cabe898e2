"""A chat turn's history and shared-table rows are written behind the turn (`memos.write_behind`):
never read late in this process, written at exit, repaired after a crash, never resurrected."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path

from memos import MemoryOS, Scope
from memos.audit import history_gaps, repair_history
from memos.maintenance import maintain
from memos.portability import forget_user
from memos.session import MemorySession

ALICE = Scope("alice", "bot", "s1")


async def shared_rows(mem: MemoryOS, where: str) -> int:
    """Rows of the shared search table, counted past `Storage.read` (no barrier: what is on disk)."""
    return await mem.storage.search.table.count_rows(where)


async def history_rows(mem: MemoryOS, where: str) -> list[dict]:
    """History rows as on disk (past `Storage.read`)."""
    return (await mem.storage.history.query().where(where).to_arrow()).to_pylist()


async def test_a_turns_rows_wait_yet_every_read_of_this_process_sees_them(mem: MemoryOS):
    mem.storage.behind.delay = 60  # nothing is written by the delay within this test
    session = await MemorySession.open(mem, ALICE)
    turn = await session.record_turn("user", "My sister Ingrid keeps bees in Uppsala")
    key = f"key = 'episodic:{turn.id}'"
    assert [e.id for e in await mem.list(ALICE, "episodic")] == [turn.id]  # the turn itself has committed
    assert await shared_rows(mem, key) == 0 and await history_rows(mem, f"record_id = '{turn.id}'") == []
    assert len(mem.storage.behind) == 2

    # a search that leaves the turn out (a chat step's, for the turns in context) lets it wait...
    await mem.search("Ingrid bees", ALICE, exclude={turn.id})
    assert await shared_rows(mem, key) == 0
    # ...any other read writes it first: the search finds the turn, history has its row
    hits = await mem.search("Ingrid bees", ALICE)
    assert [h.id for h in hits][:1] == [turn.id]
    assert await shared_rows(mem, key) == 1
    [entry] = await mem.history(ALICE, turn.id)
    assert (entry.op, entry.actor) == ("add", "user")
    assert len(mem.storage.behind) == 0


async def test_the_rows_are_written_after_the_delay_or_at_once_when_many_wait(mem: MemoryOS):
    mem.storage.behind.delay = 0.05
    session = await MemorySession.open(mem, ALICE)
    turn = await session.record_turn("user", "The boat is moored at pier 7")
    for _ in range(100):
        if await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 1:
            break
        await asyncio.sleep(0.02)
    assert await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 1
    assert [r["actor"] for r in await history_rows(mem, f"record_id = '{turn.id}'")] == ["user"]

    mem.storage.behind.delay = 60
    turns = [await session.record_turn("user", f"note number {i}") for i in range(40)]  # 80 rows > LIMIT
    for _ in range(100):
        if await shared_rows(mem, "memory_type = 'episodic'") >= 1 + 32:
            break
        await asyncio.sleep(0.02)
    assert await shared_rows(mem, "memory_type = 'episodic'") >= 1 + 32  # the first 64 rows went without the delay
    await mem.storage.settle()
    assert await shared_rows(mem, "memory_type = 'episodic'") == 41
    assert len(await history_rows(mem, "op = 'add' AND memory_type = 'episodic'")) == 41
    assert {t.id for t in turns} <= {h.id for h in await mem.search("note number 7", ALICE, k=50)}


async def test_an_update_or_deletion_after_a_waiting_turn_is_applied_in_order(mem: MemoryOS):
    mem.storage.behind.delay = 60
    session = await MemorySession.open(mem, ALICE)
    turn = await session.record_turn("user", "I live in Lund")
    await mem.update(ALICE, "episodic", turn.id, {"summary": "I live in Malmö now"})
    assert [h.record.summary for h in await mem.search("where do I live", ALICE) if h.id == turn.id] == ["I live in Malmö now"]
    assert await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 1
    assert [e.op for e in await mem.history(ALICE, turn.id)] == ["add", "update"]

    gone = await session.record_turn("user", "my passport number is in the drawer")
    await mem.delete(ALICE, "episodic", gone.id)
    await mem.storage.settle()
    assert await shared_rows(mem, f"key = 'episodic:{gone.id}'") == 0  # not written back after the deletion


async def test_forgetting_a_user_leaves_none_of_their_waiting_rows_behind(mem: MemoryOS):
    mem.storage.behind.delay = 60
    session = await MemorySession.open(mem, ALICE)
    await session.record_turn("user", "my cat is called Saffran")
    await session.record_turn("assistant", "Saffran is a lovely name")
    assert len(mem.storage.behind) == 4
    await forget_user(mem, "alice")
    await mem.storage.settle()
    assert await shared_rows(mem, "user_id = 'alice'") == 0
    assert await history_rows(mem, "user_id = 'alice'") == []
    assert await mem.search("Saffran", ALICE) == []


EXITING = textwrap.dedent('''
    import asyncio, os, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    from memos.session import MemorySession

    async def main(db, how):
        mem = await MemoryOS.open(db, embedder=None)
        mem.storage.behind.delay = 60
        session = await MemorySession.open(mem, Scope("alice", "bot", "s1"))
        turn = await session.record_turn("user", "the spare key is under the blue pot")
        print(turn.id, len(mem.storage.behind), flush=True)
        if how == "kill":
            os._exit(0)  # a crash: nothing runs after this

    asyncio.run(main(sys.argv[1], sys.argv[2]))
''')


SYNC_CHAT = textwrap.dedent('''
    import os, sys
    os.environ["LANCE_LOG"] = "error"
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel
    from memos import MemoryOS, Scope

    mem = MemoryOS.open_sync(sys.argv[1], embedder=None)
    mem.storage.behind.delay = 3  # still waiting when the script ends; exit waits for it
    agent = mem.agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("Noted: Thursday.")])),
                      Scope("alice", "bot", "s1"))
    agent.chat_sync("the meeting moved to Thursday")
    print(len(mem.storage.behind), flush=True)
''')


def test_a_sync_caller_that_exits_writes_the_waiting_rows(tmp_path: Path):
    """`chat_sync` runs on memos' private loop; interpreter exit waits for the queue to be written."""
    script, db = tmp_path / "chat.py", tmp_path / "db"
    script.write_text(SYNC_CHAT)
    done = subprocess.run([sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=120, check=True)
    assert int(done.stdout.split()[-1]) >= 4  # both turns' rows were queued when chat_sync returned

    async def check() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        assert await history_gaps(mem.storage) == {}
        turns = await mem.list(ALICE, "episodic")
        assert len(turns) == 2
        assert await shared_rows(mem, "memory_type = 'episodic'") == 2
        for turn in turns:
            assert [(e.op, e.note) for e in await mem.history(ALICE, turn.id)] == [("add", None)]

    asyncio.run(check())


async def test_no_compaction_starts_once_the_loop_is_ending(mem: MemoryOS, monkeypatch):
    """The queue's last write as its loop ends (and any write while the interpreter exits) starts
    no background compaction: one started then outlived the loop and aborted the interpreter at
    exit ("PyGILState_Release ... finalizing") when it finished inside the finalization."""
    from memos import _sync

    mem.storage.behind.delay = 60
    started = []
    monkeypatch.setattr(type(mem.storage), "_due", lambda self, key, every: True)  # every commit would compact
    monkeypatch.setattr(type(mem.storage), "_start", lambda self, table, key, loop: started.append(table.name) or True)
    session = await MemorySession.open(mem, ALICE)
    await session.record_turn("user", "the spare key is under the blue pot")
    before = len(started)
    assert before >= 1  # the turn's own commit: compaction is due as usual
    waiting = mem.storage.behind._waiting
    waiting.cancel()  # what asyncio.run's end does to it
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert len(mem.storage.behind) == 0 and started[before:] == []  # written, and nothing started
    monkeypatch.setattr(_sync, "_exiting", True)
    await session.record_turn("user", "and the bike lock code is in the vault")
    assert started[before:] == []


def _run_writer(tmp_path: Path, how: str) -> tuple[Path, str]:
    script, db = tmp_path / "writer.py", tmp_path / "db"
    script.write_text(EXITING)
    done = subprocess.run([sys.executable, str(script), str(db), how], capture_output=True, text=True, timeout=120, check=True)
    turn_id, queued = done.stdout.split()
    assert queued == "2"  # its rows were still queued when the coroutine returned
    return db, turn_id


def test_a_process_that_ends_normally_writes_the_waiting_rows(tmp_path: Path):
    db, turn_id = _run_writer(tmp_path, "return")

    async def check() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        assert await history_gaps(mem.storage) == {}
        [entry] = await mem.history(ALICE, turn_id)
        assert (entry.actor, entry.note) == ("user", None)
        assert await shared_rows(mem, f"key = 'episodic:{turn_id}'") == 1

    asyncio.run(check())


def test_a_killed_process_loses_no_turn_and_its_rows_are_repaired(tmp_path: Path):
    db, turn_id = _run_writer(tmp_path, "kill")

    async def check() -> None:
        mem = await MemoryOS.open(db, embedder=None)  # opening catches the shared table up
        assert [e.id for e in await mem.list(ALICE, "episodic")] == [turn_id]
        assert await shared_rows(mem, f"key = 'episodic:{turn_id}'") == 1
        assert [h.id for h in await mem.search("spare key", ALICE)] == [turn_id]
        assert await history_gaps(mem.storage) == {"episodic": [{"id": turn_id, "kind": "add"}]}
        await maintain(mem.storage)
        [entry] = await mem.history(ALICE, turn_id)
        assert (entry.op, entry.actor) == ("add", "repair")
        assert await repair_history(mem.storage) == {}

    asyncio.run(check())


async def test_rows_written_after_the_process_changes_directory_land_in_the_store_it_opened(tmp_path: Path, monkeypatch):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(home)
    mem = await MemoryOS.open("memory", embedder=None)  # a relative directory
    mem.storage.behind.delay = 60
    session = await MemorySession.open(mem, ALICE)
    turn = await session.record_turn("user", "the meeting moved to Thursday")
    monkeypatch.chdir(elsewhere)
    await mem.storage.settle()  # the queued rows are written now, from another working directory
    assert list(elsewhere.iterdir()) == []
    again = await MemoryOS.open(home / "memory", embedder=None)
    assert [e.actor for e in await again.history(ALICE, turn.id)] == ["user"]
    assert [h.id for h in await again.search("meeting Thursday", ALICE)] == [turn.id]
