"""One vault key per store: rotating one store never leaves another store's secrets unreadable."""

from __future__ import annotations

from pathlib import Path

import pytest
from memos.memtypes import VaultItem

from memos import MemoryOS, Scope
from memos.crypto import generate_key, legacy_key_file, write_key_file


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEMOS_VAULT_KEY", raising=False)
    return tmp_path / "home"


async def _store_with_secret(path: Path, secret: str, **options) -> tuple[MemoryOS, str]:
    mem = await MemoryOS.open(path, embedder=None, **options)
    item, = await mem.add(Scope("alice"), VaultItem(caption="code", secret=secret))
    return mem, item.id


async def test_two_stores_have_their_own_keys_and_rotating_one_leaves_the_other_readable(tmp_path, home):
    a, a_id = await _store_with_secret(tmp_path / "a", "alpha-secret-1")
    b, b_id = await _store_with_secret(tmp_path / "b", "bravo-secret-2")
    assert a.key_file == (tmp_path / "a.vault.key").absolute() and b.key_file == (tmp_path / "b.vault.key").absolute()
    assert a.key_file.read_text() != b.key_file.read_text()
    assert not legacy_key_file().exists()  # nothing shared is created any more
    assert await a.rotate_vault_key() == 1
    b_again = await MemoryOS.open(tmp_path / "b", embedder=None)
    assert await b_again.reveal(Scope("alice"), b_id, approved_by="test") == "bravo-secret-2"
    a_again = await MemoryOS.open(tmp_path / "a", embedder=None)
    assert await a_again.reveal(Scope("alice"), a_id, approved_by="test") == "alpha-secret-1"


async def test_a_shared_key_file_keeps_the_replaced_key_for_the_other_stores(tmp_path, home):
    shared = tmp_path / "keys" / "team.key"
    a, a_id = await _store_with_secret(tmp_path / "a", "alpha-secret-1", vault_key_file=shared)
    b, b_id = await _store_with_secret(tmp_path / "b", "bravo-secret-2", vault_key_file=shared)
    old = shared.read_text()
    await a.rotate_vault_key()
    assert shared.read_text() != old and shared.with_name("team.key.retired").read_text() == old
    b_again = await MemoryOS.open(tmp_path / "b", embedder=None, vault_key_file=shared)
    assert await b_again.reveal(Scope("alice"), b_id, approved_by="test") == "bravo-secret-2"
    assert await b_again.rotate_vault_key() == 1  # b moves to the new key too


async def test_a_store_made_with_the_old_shared_key_still_opens_and_rotation_moves_it_to_its_own(tmp_path, home):
    legacy = legacy_key_file()
    write_key_file(legacy, generate_key())
    before = legacy.read_text()
    old, old_id = await _store_with_secret(tmp_path / "old", "legacy-secret-3", vault_key_file=legacy)  # as before per-store keys
    other, other_id = await _store_with_secret(tmp_path / "other", "other-secret-4", vault_key_file=legacy)
    reopened = await MemoryOS.open(tmp_path / "old", embedder=None)  # default key now: its own, plus the legacy one to read
    assert await reopened.reveal(Scope("alice"), old_id, approved_by="test") == "legacy-secret-3"
    assert await reopened.rotate_vault_key() == 1
    assert legacy.read_text() == before  # the shared key is left for the other stores
    fresh = await MemoryOS.open(tmp_path / "old", embedder=None)
    assert await fresh.reveal(Scope("alice"), old_id, approved_by="test") == "legacy-secret-3"
    legacy.unlink()  # after the rotation this store no longer needs the shared key
    assert await (await MemoryOS.open(tmp_path / "old", embedder=None)).reveal(Scope("alice"), old_id, approved_by="t") == "legacy-secret-3"
    still = await MemoryOS.open(tmp_path / "other", embedder=None, vault_key_file=tmp_path / "none.key")
    del still, other_id


async def test_a_rotation_reaches_another_open_of_the_store_without_a_reopen(tmp_path, home):
    rotating = await MemoryOS.open(tmp_path / "s", embedder=None)
    other = await MemoryOS.open(tmp_path / "s", embedder=None)  # another process serving the same store
    alice = Scope("alice")
    first, = await other.add(alice, VaultItem(caption="bank pin", secret="pin-1111"))
    assert await rotating.rotate_vault_key() == 1
    assert await other.reveal(alice, first.id, approved_by="test") == "pin-1111"  # it opens the re-encrypted secret
    second, = await other.add(alice, VaultItem(caption="door code", secret="code-2222"))  # sealed under the new key
    row, = [r for r in await rotating.stored_in(alice, "vault") if r.id == second.id]
    assert rotating.vault.cipher().is_current(row.secret)
    for memory in (rotating, other, await MemoryOS.open(tmp_path / "s", embedder=None)):
        assert await memory.reveal(alice, second.id, approved_by="test") == "code-2222"


async def test_a_secret_sealed_before_a_rotation_and_stored_after_it_still_opens_and_maintain_moves_it(tmp_path, home):
    rotating = await MemoryOS.open(tmp_path / "s", embedder=None)
    other = await MemoryOS.open(tmp_path / "s", embedder=None)
    alice = Scope("alice")
    item, = await other.add(alice, VaultItem(caption="bank pin", secret="pin-1111"))
    sealed = await other.stored_in(alice, "vault")  # what a writer sealed under the old key, committed late
    await rotating.rotate_vault_key()
    await other.put_stored("vault", sealed)
    fresh = await MemoryOS.open(tmp_path / "s", embedder=None)
    for memory in (rotating, other, fresh):
        assert await memory.reveal(alice, item.id, approved_by="test") == "pin-1111"
    assert (await fresh.maintain()).get("vault_resealed") == 1
    row, = await fresh.stored_in(alice, "vault")
    assert fresh.vault.cipher().is_current(row.secret) and row.secret != sealed[0].secret
    assert await rotating.reveal(alice, item.id, approved_by="test") == "pin-1111"
    assert "vault_resealed" not in await fresh.maintain()  # nothing left to move
