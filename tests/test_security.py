"""Vault secrets never in clear on disk, in logs, exports or prompts; keys; export/import; forget."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from memos.memtypes import Episode, Fact, VaultItem
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.cli import app
from memos.crypto import VaultKeyError, generate_key, write_key_file
from memos.portability import export_scope, import_lines
from memos.store.lancedb.indexing import ensure_indexes
from memos.store.lancedb.search_index import SEARCH_TABLE

SECRET = "correct-horse-battery-staple-991"
runner = CliRunner()


def files_containing(root: Path, needle: str) -> list[Path]:
    data = needle.encode()
    return [p for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


async def test_a_planted_secret_is_nowhere_in_clear(mem, alice, db_path, vault_key, caplog):
    caplog.set_level(logging.DEBUG)
    item, = await mem.add(alice, VaultItem(caption="Alice's bank login", secret=SECRET, entry_type="credential"))
    await mem.update(alice, "vault", item.id, {"sensitivity": "medium"}, approved_by="alice")
    await mem.add(alice, Fact(subject="Alice", summary="Alice banks with Nordbank"))
    session = await mem.session(alice)
    await session.record_turn("user", "What is my bank login?")
    ctx = await session.compile()
    assert "Alice's bank login" in ctx.system_prompt and SECRET not in ctx.system_prompt
    hits = await mem.search("bank login", alice)
    assert all(SECRET not in (h.text + repr(h.record)) for h in hits)
    exported = "\n".join(await export_scope(mem, Scope("alice")))
    assert "Alice's bank login" in exported and SECRET not in exported
    from memos.store.lancedb.maintenance import compact_tables

    await compact_tables(mem.storage)
    assert files_containing(db_path, SECRET) == []
    assert SECRET not in caplog.text and all(SECRET not in str(e) for e in await mem.history(alice))
    assert await mem.reveal(alice, item.id, approved_by="alice") == SECRET
    assert files_containing(db_path, SECRET) == [] and SECRET not in caplog.text
    assert stat.S_IMODE(os.stat(vault_key).st_mode) == 0o600


async def test_a_wrong_key_is_a_clear_error_and_touches_nothing(db_path, embedder, clock, alice, tmp_path, snapshot):
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=tmp_path / "right.key")
    item, = await mem.add(alice, VaultItem(caption="door code", secret="4912-7781"))
    wrong = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=tmp_path / "wrong.key")
    before = await snapshot(wrong)
    with pytest.raises(VaultKeyError, match="not loaded") as info:
        await wrong.reveal(alice, item.id, approved_by="x")
    assert "4912" not in str(info.value)
    assert await snapshot(wrong) == before


async def test_key_rotation_reencrypts_every_secret_and_survives_an_interruption(db_path, embedder, clock, tmp_path):
    key_file = tmp_path / "vault.key"
    mem = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=key_file)
    items = []
    for user in ("alice", "bob"):
        items += [(Scope(user), i) for i in await mem.add(Scope(user), [VaultItem(caption=f"{user} pin {n}", secret=f"{user}-{n}-1234") for n in range(3)])]
    old_key = key_file.read_text()
    # an interrupted rotation: the new key was written, nothing re-encrypted yet
    write_key_file(key_file.with_name("vault.key.next"), generate_key())
    resumed = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=key_file)
    assert await resumed.reveal(Scope("alice"), items[0][1].id, approved_by="t") == "alice-0-1234"  # both keys load
    out = runner.invoke(app, ["vault", "rotate-key", "--db", str(db_path), "--key-file", str(key_file)])
    assert out.exit_code == 0 and "re-encrypted 6 secrets" in out.output
    assert key_file.read_text() != old_key and not key_file.with_name("vault.key.next").exists()
    fresh = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=key_file)
    for scope, item in items:
        assert await fresh.reveal(scope, item.id, approved_by="t") == item.caption.replace(" pin ", "-") + "-1234"
    old = tmp_path / "old.key"
    old.write_text(old_key)
    stale = await MemoryOS.open(db_path, embedder=embedder, clock=clock, vault_key_file=old)
    with pytest.raises(VaultKeyError):
        await stale.reveal(Scope("alice"), items[0][1].id, approved_by="t")


async def test_export_and_import_into_another_store_and_user(mem, alice, tmp_path, embedder, clock, vault_key):
    await mem.add(alice, [Fact(subject="Alice", summary="Alice collects stamps"), Episode(summary="Alice went to Porto")])
    item, = await mem.add(alice, VaultItem(caption="stamp shop login", secret=SECRET))
    lines = list(await export_scope(mem, Scope("alice")))
    other = await MemoryOS.open(tmp_path / "other", embedder=embedder, clock=clock, vault_key_file=tmp_path / "other.key")
    with pytest.raises(Exception, match="source key"):
        await import_lines(other, lines, user_id="carol")
    counts = await import_lines(other, lines, user_id="carol", source_key=__import__("memos.crypto").crypto.load_or_create_key(vault_key))
    assert counts["records"] == 3 and counts["history"] >= 3
    assert {f.summary for f in await other.list(Scope("carol"), "semantic")} == {"Alice collects stamps"}
    assert await other.reveal(Scope("carol"), item.id, approved_by="t") == SECRET
    assert [h.record.summary for h in await other.search("stamps hobby", Scope("carol"), types=["semantic"])] == ["Alice collects stamps"]
    assert await other.list(Scope("alice"), "semantic") == []
    assert files_containing(tmp_path / "other", SECRET) == []


async def test_forget_leaves_nothing_of_the_user_anywhere(mem, db_path, clock):
    marker = "zebrafinch-unique-7731"
    for user in ("alice", "bob"):
        scope = Scope(user, "bot", "s1")
        await mem.add(scope, [Fact(subject=user, summary=f"{user} likes the {marker} song"), Episode(summary=f"{user} sang {marker}")])
        session = await mem.session(scope, budget=300)
        for i in range(12):
            await session.record_turn("user", f"{user} turn {i} about {marker}")
            await session.compile()
    # the CLI below runs its purge while this test's loop is blocked: a background optimize of
    # `mem` still in flight would hold its write lease all that time and defer the purge
    await mem.storage.settle()
    out = runner.invoke(app, ["forget", "--user", "alice", "--db", str(db_path), "--yes", "--json"])
    assert out.exit_code == 0, out.output
    fresh = await MemoryOS.open(db_path, embedder=None, clock=clock)
    for name in fresh.type_names:
        assert all(r["user_id"] != "alice" for r in await fresh.storage.rows(name, None)), name
    assert len(await fresh.list(Scope("bob"), "episodic", limit=None)) == 13
    assert all(e.user_id != "alice" for e in await fresh.storage.history_rows(None))
    assert not [k for k in await fresh.storage.get_meta() if "alice" in k]
    leaked = [p for p in files_containing(db_path, "alice") if "jobs.sqlite" not in str(p)]
    assert leaked == [], leaked
    assert files_containing(db_path, "bob")  # bob is still there
    assert [h.record.user_id for h in await fresh.search(marker, Scope("bob"))]


async def test_forget_of_a_small_user_in_a_large_compacted_table_leaves_nothing_on_disk(tmp_path):
    """One user's row among 800 of another's, compacted into one file: a compaction alone keeps
    the deleted row inside that file (it rewrites a file only once a tenth of its rows are
    deleted), so the purge rewrites the table's rows and builds its indexes again (the old
    `user_id` B-tree kept the user's id); the other user's rows are all still there."""
    db = tmp_path / "db"
    mem = await MemoryOS.open(db, embedder=None)
    bob, marker, user = Scope("bob"), "quokka-marker-9911", "alice-7f3e"
    await mem.add(bob, [Fact(subject="bob", summary=f"bob fact {i} about gardening") for i in range(400)])
    await mem.add(Scope(user), [Fact(subject="alice", summary=f"alice likes the {marker}")])
    await mem.add(bob, [Fact(subject="bob", summary=f"bob later fact {i}") for i in range(400)])
    await mem.storage.tables["semantic"].table.optimize()
    built = await ensure_indexes(mem.storage, min_rows=500)
    assert "btree(user_id)" in built["semantic"] and "btree(user_id)" in built[SEARCH_TABLE]
    assert files_containing(db, marker) and any("_indices" in str(p) for p in files_containing(db, user))
    await mem.storage.settle()  # as above: no write of `mem` in flight while the CLI purges
    out = runner.invoke(app, ["forget", "--user", user, "--db", str(db), "--yes", "--json"])
    assert out.exit_code == 0, out.output
    assert files_containing(db, marker) == []
    assert files_containing(db, user) == []
    fresh = await MemoryOS.open(db, embedder=None)
    assert len(await fresh.list(bob, "semantic", limit=None)) == 800
    assert [h.record.summary for h in await fresh.search("bob fact 17 about gardening", bob, k=1)] == ["bob fact 17 about gardening"]


def test_forget_cli_asks_and_errors(tmp_path):
    out = runner.invoke(app, ["forget", "--user", "alice", "--db", str(tmp_path / "missing")])
    assert out.exit_code == 2 and "no memos store" in out.output


async def test_sensitivity_levels_decide_who_may_reveal(mem, alice):
    from memos.crypto import VaultAccessError

    low, high = await mem.add(alice, [VaultItem(caption="wifi password", secret="wifi-123", sensitivity="low"),
                                      VaultItem(caption="bank PIN", secret="8812", sensitivity="high")])
    assert await mem.reveal(alice, low.id, approved_by="guest", clearance="low") == "wifi-123"
    with pytest.raises(VaultAccessError, match="high sensitivity; this caller's clearance is medium") as info:
        await mem.reveal(alice, high.id, approved_by="guest", clearance="medium")
    assert "8812" not in str(info.value)
    assert await mem.reveal(alice, high.id, approved_by="owner") == "8812"
    notes = [e.note for e in await mem.history(alice) if e.op == "reveal"]
    assert notes == ["secret revealed", "refused: high item, medium clearance", "secret revealed"]


async def test_restamping_a_redacted_vault_item_keeps_its_secret(mem, alice):
    """Records leave the kernel redacted; a bookkeeping change made on such a copy (a job's
    archive, a merge's tags) is applied to the stored record, never writes the blank back."""
    from memos.exceptions import RecordChangedError

    item, = await mem.add(alice, VaultItem(caption="locker code", secret="5521-0098"))
    read, = await mem.get_many(alice, "vault", [item.id])
    assert read.secret == ""  # redacted on the way out
    await mem.restamp(read, {"tags": ["checked"]}, op="update", actor="test")
    assert await mem.reveal(alice, item.id, approved_by="alice") == "5521-0098"
    again, = await mem.get_many(alice, "vault", [item.id])
    assert again.tags == ["checked"]
    with pytest.raises(RecordChangedError):  # the copy read first is stale now
        await mem.restamp(read, {"tags": ["stale"]}, op="update", actor="test")
    assert await mem.reveal(alice, item.id, approved_by="alice") == "5521-0098"
