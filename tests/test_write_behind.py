"""A chat turn is journaled and written behind (`memos.store.lancedb.write_behind`, `memos.store.lancedb.journal`): never read
late in this process, written at exit, written by the next open after a crash, never resurrected."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from memos.memtypes import Fact

from memos import MemoryOS, Scope
from memos.context.session import MemorySession
from memos.jobs.audit import history_gaps
from memos.portability import forget_user
from memos.store.lancedb.journal import JOURNAL_DIR

ALICE = Scope("alice", "bot", "s1")


async def shared_rows(mem: MemoryOS, where: str) -> int:
    """Rows of the shared search table, counted past `Storage.read` (no barrier: what is on disk)."""
    return await mem.storage.search.table.count_rows(where)


async def history_rows(mem: MemoryOS, where: str) -> list[dict]:
    """History rows as on disk (past `Storage.read`)."""
    return (await mem.storage.history.query().where(where).to_arrow()).to_pylist()


async def turn_rows(mem: MemoryOS, where: str) -> int:
    """Rows of the turns' own table on disk (past `Storage.read`)."""
    return await mem.storage.type_table("episodic").table.count_rows(where)


def segments(db: Path) -> list[Path]:
    return sorted((db / JOURNAL_DIR).glob("*.seg"))


async def test_a_turn_waits_in_the_journal_yet_every_read_of_this_process_sees_it(mem: MemoryOS, db_path: Path):
    mem.storage.behind.delay = 60  # nothing is written by the delay within this test
    agent = Scope("alice", "bot")
    session = await MemorySession.open(mem, ALICE)
    await mem.check_versions()
    assert (await mem.counts(agent, cached=True))["episodic"] == 0
    turn = await session.record_turn("user", "My sister Ingrid keeps bees in Uppsala")
    where = f"id = '{turn.id}'"
    # in no table yet, but durable: its rows are in this process's journal segment
    assert await turn_rows(mem, where) == 0 and await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 0
    assert await history_rows(mem, f"record_id = '{turn.id}'") == []
    # the turn's row, history and shared rows, and the session's state (which names the turn)
    assert len(mem.storage.behind) == 4 and [p.stat().st_size > 0 for p in segments(db_path)] == [True]
    # what this process remembered reading counts it at once, without reading or writing
    assert (await mem.counts(agent, cached=True))["episodic"] == 1
    assert await turn_rows(mem, where) == 0

    # a search that leaves the turn out (a chat step's, for the turns in context) lets it wait...
    await mem.search("Ingrid bees", ALICE, exclude={turn.id})
    assert await turn_rows(mem, where) == 0
    # ...any other read writes it first: the search finds the turn, history has its row
    hits = await mem.search("Ingrid bees", ALICE)
    assert [h.id for h in hits][:1] == [turn.id]
    assert await turn_rows(mem, where) == 1 and await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 1
    [entry] = await mem.history(ALICE, turn.id)
    assert (entry.op, entry.actor) == ("add", "user")
    assert len(mem.storage.behind) == 0 and segments(db_path) == []  # written: its segment is gone

    later = await session.record_turn("assistant", "Uppsala honey is famous")
    assert {e.id for e in await mem.list(ALICE, "episodic")} == {turn.id, later.id}  # a list reads it too
    assert (await mem.counts(agent))["episodic"] == 2


async def test_the_rows_are_written_after_the_delay_or_at_once_when_many_wait(mem: MemoryOS):
    mem.storage.behind.delay = 0.05
    session = await MemorySession.open(mem, ALICE)
    turn = await session.record_turn("user", "The boat is moored at pier 7")
    for _ in range(100):  # the shared row and the history row are two commits of one flush: wait for both
        if await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 1 and await history_rows(mem, f"record_id = '{turn.id}'"):
            break
        await asyncio.sleep(0.02)
    assert await shared_rows(mem, f"key = 'episodic:{turn.id}'") == 1
    assert [r["actor"] for r in await history_rows(mem, f"record_id = '{turn.id}'")] == ["user"]

    mem.storage.behind.delay = 60
    turns = [await session.record_turn("user", f"note number {i}") for i in range(40)]  # 120 rows > LIMIT
    for _ in range(100):
        if await shared_rows(mem, "memory_type = 'episodic'") >= 1 + 22:
            break
        await asyncio.sleep(0.02)
    assert await shared_rows(mem, "memory_type = 'episodic'") >= 1 + 22  # the first 64 rows (22 turns) went without the delay
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
    assert len(mem.storage.behind) == 7  # two turns' three rows each, the session's state
    await forget_user(mem, "alice")
    await mem.storage.settle()
    assert segments(mem.storage.behind.journal.root) == []  # no copy of their turns left in the journal either
    assert await turn_rows(mem, "user_id = 'alice'") == 0
    assert await shared_rows(mem, "user_id = 'alice'") == 0
    assert await history_rows(mem, "user_id = 'alice'") == []
    assert await mem.search("Saffran", ALICE) == []


CHAT_TURN = textwrap.dedent('''
    import asyncio, os, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    from memos.context.session import MemorySession

    async def chat_turn(db, text):
        """A store with one chat turn waiting in this process's journal (nothing written by the delay)."""
        mem = await MemoryOS.open(db, embedder=None)
        mem.storage.behind.delay = 60
        session = await MemorySession.open(mem, Scope("alice", "bot", "s1"))
        return mem, await session.record_turn("user", text)
''')
EXITING = CHAT_TURN + textwrap.dedent('''
    async def main(db, how):
        mem, turn = await chat_turn(db, "the spare key is under the blue pot")
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
    from memos.store.lancedb.compaction import Compaction

    mem.storage.behind.delay = 60
    started = []
    monkeypatch.setattr(Compaction, "_due", staticmethod(lambda state, every: True))  # every commit would compact
    monkeypatch.setattr(Compaction, "_start", lambda self, table, state, loop: started.append(table.name) or True)
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
    assert queued == "4"  # its rows (and the session's state) were still queued when the coroutine returned
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


def test_a_killed_process_loses_no_turn_the_next_open_writes_it_from_the_journal(tmp_path: Path):
    db, turn_id = _run_writer(tmp_path, "kill")
    assert len(segments(db)) == 1

    async def check() -> None:
        mem = await MemoryOS.open(db, embedder=None)  # writes what the stopped process journaled
        assert segments(db) == []
        assert [e.id for e in await mem.list(ALICE, "episodic")] == [turn_id]
        assert await shared_rows(mem, f"key = 'episodic:{turn_id}'") == 1
        assert [h.id for h in await mem.search("spare key", ALICE)] == [turn_id]
        assert await history_gaps(mem.storage) == {}
        [entry] = await mem.history(ALICE, turn_id)
        assert (entry.op, entry.actor, entry.note) == ("add", "user", None)  # its own row, not a repair
        resumed = await MemorySession.open(mem, ALICE)  # the session's journaled state came back too
        assert [t.id for t in resumed.context] == [turn_id]

    asyncio.run(check())


def test_a_segment_left_after_its_rows_were_written_or_with_a_torn_entry_adds_nothing_twice(tmp_path: Path):
    """A writer stopped between writing a batch and deleting its segment (or in the middle of an
    entry, never acknowledged): the next open writes only what the tables lack."""
    db, turn_id = _run_writer(tmp_path, "kill")
    [segment] = segments(db)
    kept = tmp_path / "kept.seg"
    shutil.copy(segment, kept)

    async def written_once() -> None:
        mem = await MemoryOS.open(db, embedder=None)
        assert await turn_rows(mem, f"id = '{turn_id}'") == 1
        assert await shared_rows(mem, f"key = 'episodic:{turn_id}'") == 1
        assert len(await history_rows(mem, f"record_id = '{turn_id}'")) == 1
        assert segments(db) == []

    asyncio.run(written_once())
    torn = kept.read_bytes() + kept.read_bytes()[: len(kept.read_bytes()) // 2]
    (db / JOURNAL_DIR / "left-behind.seg").write_bytes(torn)
    asyncio.run(written_once())


HOLDING = CHAT_TURN + textwrap.dedent('''
    async def main(db, go):
        mem, turn = await chat_turn(db, "the bike is at the station")
        print(turn.id, flush=True)
        while not os.path.exists(go):  # the test opens the store meanwhile
            await asyncio.sleep(0.02)
        # returning writes the queue (memos.store.lancedb.write_behind)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
''')


TWO_TURNS = textwrap.dedent('''
    import asyncio, os, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    from memos.context.session import MemorySession

    async def main(db, more, go):
        mem = await MemoryOS.open(db, embedder=None)
        mem.storage.behind.delay = 60  # nothing written by the delay
        session = await MemorySession.open(mem, Scope("alice", "bot", "s1"))
        await mem.set_state("plan", "one", behind=True)  # state written behind, as a session's is
        print((await session.record_turn("user", "the bike is at the station")).id, flush=True)
        while not os.path.exists(more):
            await asyncio.sleep(0.02)
        await mem.set_state("plan", "two", behind=True)
        print((await session.record_turn("assistant", "which station?")).id, flush=True)
        while not os.path.exists(go):
            await asyncio.sleep(0.02)

    asyncio.run(main(*sys.argv[1:]))
''')


def test_another_process_reads_a_chat_sessions_journaled_turn_and_state_at_once(tmp_path: Path):
    """A chat whose next turn comes through another worker: that worker's reads of the session's
    state and turns find what the first journaled a moment ago (it asks the first to write them,
    `memos.store.lancedb.others`), not the state from before the last turn."""
    script, db, more, go = tmp_path / "turns.py", tmp_path / "db", tmp_path / "more", tmp_path / "go"
    script.write_text(TWO_TURNS)
    writer = subprocess.Popen([sys.executable, str(script), str(db), str(more), str(go)], stdout=subprocess.PIPE, text=True)
    try:
        first = writer.stdout.readline().strip()

        async def meanwhile() -> None:
            other = await MemoryOS.open(db, embedder=None)
            more.touch()
            second = writer.stdout.readline().strip()  # acknowledged, journaled, its state too
            assert (await other.state())["plan"] == "two"  # not "one", from before
            assert [e.id for e in await other.list(ALICE, "episodic")] == [first, second]

        asyncio.run(meanwhile())
    finally:
        go.touch()
        assert writer.wait(timeout=120) == 0


def test_a_live_writers_journal_is_left_to_it(tmp_path: Path):
    """Another process that opens the store does not write a segment whose writer is alive and
    holds it: the writer does, once, when the other process's reads ask it to
    (`memos.store.lancedb.others`), long before its delay. (Other opens in the writer's own process
    write its queue first: `test_another_open_in_the_same_process_sees_the_waiting_turns`.)"""
    script, db, go = tmp_path / "holding.py", tmp_path / "db", tmp_path / "go"
    script.write_text(HOLDING)
    writer = subprocess.Popen([sys.executable, str(script), str(db), str(go)], stdout=subprocess.PIPE, text=True)
    try:
        turn_id = writer.stdout.readline().strip()
        assert turn_id and len(segments(db)) == 1

        async def meanwhile() -> None:
            other = await MemoryOS.open(db, embedder=None)  # it reads the state the writer journaled with its turn
            assert segments(db) == [] and await turn_rows(other, f"id = '{turn_id}'") == 1  # the writer's 60 s delay cut short
            assert [e.id for e in await other.list(Scope("alice", "bot", "s1"), "episodic")] == [turn_id]

        asyncio.run(meanwhile())
    finally:
        go.touch()
        assert writer.wait(timeout=120) == 0

    async def after() -> None:
        again = await MemoryOS.open(db, embedder=None)
        assert await turn_rows(again, f"id = '{turn_id}'") == 1 and segments(db) == []
        assert await shared_rows(again, f"key = 'episodic:{turn_id}'") == 1

    asyncio.run(after())


async def test_another_open_in_the_same_process_sees_the_waiting_turns(mem: MemoryOS, db_path: Path):
    """Two `MemoryOS` objects on one store in one process (a store opened per request, a session
    resumed): the new one writes what the other has queued before it reads, and a read through
    either writes what the other has queued for that table."""
    mem.storage.behind.delay = 60
    session = await MemorySession.open(mem, ALICE)
    first = await session.record_turn("user", "the bike is at the station")
    other = await MemoryOS.open(db_path, embedder=None)
    assert [e.id for e in await other.list(ALICE, "episodic")] == [first.id]
    second = await session.record_turn("assistant", "which station?")
    assert {e.id for e in await other.list(ALICE, "episodic")} == {first.id, second.id}
    assert len(mem.storage.behind) == 0 and segments(db_path) == []
    assert len(await history_rows(other, "op = 'add'")) >= 2


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


async def test_a_read_that_writes_the_queue_first_is_still_remembered(mem: MemoryOS):
    """A remembered read (`memos.store.read_cache`) is labelled with the table's version once the rows
    queued for it are written: labelled before, the read's own write moved the table past its
    label, and a chat with pauses counted the turns' store again at every step."""
    mem.storage.behind.delay = 60
    agent = Scope("alice", "bot")
    session = await MemorySession.open(mem, ALICE)
    await session.record_turn("user", "the ferry leaves at nine")
    mem.reads.clear()  # as after another writer's commit: the next count reads
    await mem.check_versions()
    assert (await mem.counts(agent, cached=True))["episodic"] == 1  # read, writing the queued turn first
    misses = mem.reads.misses
    await mem.check_versions()
    assert (await mem.counts(agent, cached=True))["episodic"] == 1
    assert mem.reads.misses == misses  # remembered: no table was counted again


async def test_a_due_batch_waits_for_the_chat_step_in_progress(mem: MemoryOS):
    """Its commits would compete with the step's queries for the cores: the delay's batch is
    written once the step ends (reads that need the rows still write them at once)."""
    mem.storage.behind.delay = 0.01
    session = await MemorySession.open(mem, ALICE)
    with mem.storage.behind.step():
        turn = await session.record_turn("user", "the ferry leaves at nine")
        await asyncio.sleep(0.3)
        assert await turn_rows(mem, f"id = '{turn.id}'") == 0  # due long ago, still waiting
    for _ in range(100):
        if await turn_rows(mem, f"id = '{turn.id}'") == 1:
            break
        await asyncio.sleep(0.01)
    assert await turn_rows(mem, f"id = '{turn.id}'") == 1


async def test_a_read_waits_only_for_a_batch_that_writes_its_table(mem: MemoryOS, monkeypatch):
    """A batch being written holds up reads of the tables it writes, not the others (a chat
    step's count of an empty store waited for a whole batch of turns)."""
    mem.storage.behind.delay = 60
    session = await MemorySession.open(mem, ALICE)
    turn = await session.record_turn("user", "the ferry leaves at nine")
    release = threading.Event()  # the batch is written on memos' background loop, not this test's
    write_held = mem.storage.write_held

    async def held_up(*args, **kwargs):
        await asyncio.to_thread(release.wait, 30)
        return await write_held(*args, **kwargs)

    monkeypatch.setattr(mem.storage, "write_held", held_up)
    flushing = asyncio.ensure_future(mem.storage.behind.flush())
    await asyncio.sleep(0.05)
    assert await asyncio.wait_for(mem.storage.count("semantic"), 5) == 0  # not held up by the turn's batch
    reading = asyncio.ensure_future(mem.storage.count("episodic"))
    await asyncio.sleep(0.05)
    assert not reading.done()  # the turns' table waits for its rows
    release.set()
    await flushing
    assert await reading == 1 and await turn_rows(mem, f"id = '{turn.id}'") == 1


async def test_a_searched_tables_indexes_are_loaded_again_after_its_optimize(mem: MemoryOS, monkeypatch):
    """The first search after an automatic optimize loaded the rebuilt indexes (~65 ms against ~10
    on the 100k store); the optimize's task loads them instead, for tables this process searches."""
    loaded: list[str] = []
    await mem.add(Scope("alice"), [Fact(subject="Alice", summary=f"Alice fact {i}") for i in range(3)])
    await mem.search("Alice", Scope("alice"))  # the shared table is searched here; the stores' own tables are not
    storage = mem.storage
    for table in (storage.search.table, storage.type_table("semantic").table):
        async def prewarm(name, table=table):
            loaded.append(f"{table.name}:{name}")
        monkeypatch.setattr(table, "prewarm_index", prewarm)
    for table in (storage.search.table, storage.type_table("semantic").table):
        await storage.compaction.optimize(table)
    names = {i.name for i in await storage.search.table.list_indices()}
    assert {entry.split(":", 1)[1] for entry in loaded} == names
    assert all(entry.startswith(storage.search.table.name + ":") for entry in loaded)


async def test_the_turns_in_context_are_read_again_after_this_process_optimizes_their_table(mem: MemoryOS, db_path: Path, embedder,
                                                                                            monkeypatch):
    """An optimize makes every read of the turns' table look stale, so the next step re-read the
    turns in context first (10-20 ms of that step on the 100k store); the optimize's task reads
    them instead, and what changed in a turn meanwhile is in the context the step then uses."""
    session = await MemorySession.open(mem, ALICE)
    first = await session.record_turn("user", "the ferry leaves at nine")
    await session.record_turn("assistant", "nine it is")
    await mem.storage.settle()
    # another writer changes a turn in context (as a vault tool scrubbing a secret would)
    other = await MemoryOS.open(db_path, embedder=embedder)
    await other.update(ALICE, "episodic", first.id, {"summary": "the ferry leaves at ten"}, actor="editor")
    table = mem.storage.type_table("episodic").table
    refreshed: list[int] = []
    refresh = session._refresh_context

    async def counted() -> None:
        refreshed.append(1)
        await refresh()

    monkeypatch.setattr(session, "_refresh_context", counted)
    await mem.storage.compaction.optimize(table)  # as the automatic one ends
    assert [t.summary for t in session.context] == ["the ferry leaves at ten", "nine it is"]
    _, context = await session.step("when does the ferry leave?")
    assert refreshed == []  # the step found them read
    assert [t.summary for t in context.recent_turns][:1] == ["the ferry leaves at ten"]

    # a session whose context changed while the read ran keeps its own; its next step reads
    await mem.storage.settle()
    await other.update(ALICE, "episodic", first.id, {"summary": "the ferry leaves at eleven"}, actor="editor")
    load = session._load_turns

    async def meanwhile(ids):
        found = await load(ids)
        session.context = session.context[1:]  # as an eviction would
        return found

    monkeypatch.setattr(session, "_load_turns", meanwhile)
    await session.record_turn("assistant", "at ten then")  # waits for the next optimize again
    before = [t.id for t in session.context]
    await mem.storage.compaction.optimize(table)
    assert [t.id for t in session.context] == before[1:]  # not replaced by the read's list
    monkeypatch.setattr(session, "_load_turns", load)
    await session.step("and the ferry back?")
    assert refreshed == [1]


STOPPING = textwrap.dedent('''
    import asyncio, os, signal, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    from memos.context.session import MemorySession

    async def main(db):
        mem = await MemoryOS.open(db, embedder=None)
        mem.storage.behind.delay = 60  # nothing written by the delay
        session = await MemorySession.open(mem, Scope("alice", "bot", "s1"))
        print((await session.record_turn("user", "the bike is at the station")).id, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # stuck, its journal held: it can write nothing now
        await asyncio.sleep(0.5)  # let on again: it writes what it holds as it exits

    asyncio.run(main(sys.argv[1]))
''')


def test_a_stuck_writer_costs_the_others_one_wait_not_one_a_read(tmp_path: Path, monkeypatch):
    """A process that journaled rows and then cannot write them (stopped, here) holds them: a read
    in another process waits for them up to `others.WAIT` and goes ahead; later reads do not wait for
    those rows again (before: every read that found the table's journal counter moved waited again),
    and once the process writes them they are found."""
    import signal

    from memos.store.lancedb import others

    monkeypatch.setattr(others, "WAIT", 0.3)
    script, db = tmp_path / "stopping.py", tmp_path / "db"
    script.write_text(STOPPING)
    writer = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
    try:
        stuck = writer.stdout.readline().strip()

        async def meanwhile() -> None:
            mem = await MemoryOS.open(db, embedder=None)
            busy = await MemoryOS.open(db, embedder=None)  # another worker that goes on journaling turns
            busy.storage.behind.delay = 60
            session = await MemorySession.open(busy, Scope("alice", "bot", "s2"))
            mine, waits = [], []
            for n in range(4):  # each journals a turn there: the table's counter moves, the next read here looks again
                mine.append((await session.record_turn("user", f"turn {n} here")).id)
                listed = [e.id for e in await mem.list(Scope("alice", "bot", None), "episodic")]
                assert set(mine) <= set(listed) and stuck not in listed
                waits.append(mem.storage.retries.journal_waits)
            assert waits[0] >= 1 and waits[-1] == waits[0]  # one wait a table it holds rows of (before: 3 more)
            os.kill(writer.pid, signal.SIGCONT)
            assert writer.wait(timeout=60) == 0  # it wrote its turn as it exited
            assert stuck in [e.id for e in await mem.list(Scope("alice", "bot", None), "episodic")]

        asyncio.run(meanwhile())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer.pid, signal.SIGCONT)
        writer.wait(timeout=60)
