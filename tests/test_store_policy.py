"""Store behaviour is declared on the memory type: the jobs, search and tools read the declaration."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

from memos import MemoryOS
from memos.memtypes import BUILTIN_TYPES, MemoryRecord


class Note(MemoryRecord):
    """A user's own type that opts in to consolidation and decay."""

    memory_type: ClassVar[str] = "note"
    consolidate: ClassVar[bool] = True
    decays: ClassVar[bool] = True
    body: str = ""

    def index_text(self) -> str:
        return self.body

    def render(self) -> str:
        return f"Note: {self.body}"


class Pin(MemoryRecord):
    """A user's own type with the defaults: never consolidated, never decayed."""

    memory_type: ClassVar[str] = "pin"
    body: str = ""

    def index_text(self) -> str:
        return self.body

    def render(self) -> str:
        return f"Pin: {self.body}"


def test_builtin_declarations():
    declared = {t.memory_type: t for t in BUILTIN_TYPES}
    assert [n for n, t in declared.items() if not t.searched_by_default] == ["core", "entity"]  # entities: reached by links
    assert sorted(n for n, t in declared.items() if not t.model_writable) == ["core", "entity", "relation", "vault"]  # graph: own tools
    assert sorted(n for n, t in declared.items() if t.consolidate) == ["episodic", "procedural", "resource", "semantic"]
    assert sorted(n for n, t in declared.items() if t.decays) == ["episodic", "procedural", "resource", "semantic"]
    assert [n for n, t in declared.items() if t.holds_turns] == ["episodic"]
    assert [n for n, t in declared.items() if t.always_in_prompt] == ["core"]
    assert [n for n, t in declared.items() if t.secret_fields] == ["vault"]
    assert not Pin.consolidate and not Pin.decays and Pin.searched_by_default and Pin.model_writable


async def test_a_custom_type_that_opts_in_is_consolidated_and_decayed_one_without_is_left_alone(db_path, embedder, clock, vault_key, alice):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=vault_key, types=[Note, Pin])
    assert {"note", "pin"} <= set(mem.searchable_types)
    notes = await mem.add(alice, [Note(body="buy oat milk", importance=0.3), Note(body="Buy oat milk!", importance=0.3),
                                  Note(body="stale scribble", importance=0.0)])
    pins = await mem.add(alice, [Pin(body="buy oat milk", importance=0.3), Pin(body="Buy oat milk!", importance=0.3),
                                 Pin(body="stale scribble", importance=0.0)])
    clock.advance(days=90)

    sched = mem.scheduler(mode="manual")
    sched.add("consolidate", alice, every=timedelta(days=1))
    sched.add("decay", alice, every=timedelta(days=1), options={"threshold": 0.15, "min_age_days": 7})
    clock.advance(days=1)
    results = {r["job"]: r for r in sched.run_due()}
    sched.shutdown()
    assert results["consolidate"]["errors"] == [] and results["decay"]["errors"] == []
    assert results["consolidate"]["by_type"]["note"]["merged"] == 1 and "pin" not in results["consolidate"]["by_type"]
    assert results["decay"]["archived_by_type"].get("note") == 1 and "pin" not in results["decay"]["archived_by_type"]

    note_status = {r.id: r.status for r in await mem.list(alice, "note", status=None)}
    assert sorted(note_status[n.id] for n in notes[:2]) == ["active", "archived"]  # the duplicates merged
    assert note_status[notes[2].id] == "archived"  # stale and unimportant: decayed
    assert {r.status for r in await mem.list(alice, "pin", status=None)} == {"active"}
    assert len(pins) == 3
