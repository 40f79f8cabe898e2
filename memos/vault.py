"""The vault: secrets encrypted at rest, revealed only on approval, rotated, scrubbed from where they came.

A memory type declares its secret fields (`secret_fields`, the built-in `VaultItem` has one).
`Vault` is the only place that sees them in clear:

- `seal` encrypts a secret field before a record reaches a table, bound to the record's store,
  id and user (`associated_data`), so a ciphertext copied onto another record does not open;
- `redact` blanks secret fields in everything the facade hands out (search hits included);
- `reveal` decrypts one item for a caller with approval and clearance, and writes a history row
  either way (never the value);
- `check_change` holds a change to what governs an item's access (its secret, its sensitivity)
  to the same bar: clearance up to the item's level, and approval to lower it; audited too;
- `rotate_key` re-encrypts every secret under a new key, crash-safe;
- `scrub_sources` takes a secret just stored out of the records it came from (the chat turn that
  said it) and out of their history and old table versions.

The key comes from `$MEMOS_VAULT_KEY` or a key file, one per store (`memos.crypto`). The facade
(`memos.memory.MemoryOS`) owns one `Vault` and delegates to it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from memos.context.state_keys import SESSION, key_owner
from memos.store.history import history_row
from memos.store.protocol import Store
from memos.store.scope import Scope, Where, validate_value

from . import validation as check
from .exceptions import ConfigError, RecordChangedError
from .memtypes import MemoryRecord

if TYPE_CHECKING:
    from .crypto import VaultCipher

__all__ = ["CLEARANCE", "Vault", "VaultHost", "default_key_file"]

R = TypeVar("R", bound=MemoryRecord)

CLEARANCE = {"none": -1, "low": 0, "medium": 1, "high": 2}
"""A caller's vault clearance, in the order of `memos.crypto.SENSITIVITY`: "none" reaches no level."""


def default_key_file(uri: str) -> Path:
    """The per-store vault key file of the store at `uri` (see `Vault.key_file`)."""
    from memos.store.lancedb.lease import local_path

    local = local_path(uri)
    if local is not None:
        local = local.absolute()
        return local.with_name(local.name + ".vault.key")
    import hashlib

    return Path.home() / ".config" / "memos" / "vaults" / (hashlib.sha256(uri.encode()).hexdigest()[:16] + ".key")


class VaultHost(Protocol):
    """What the vault needs of the facade that owns it (`memos.memory.MemoryOS` is one): the vault
    sits below the facade, so it names the facade's methods, never imports it."""

    types: dict[str, type[MemoryRecord]]
    clock: Callable[[], datetime]

    @property
    def turn_type(self) -> str: ...

    @property
    def storage(self) -> Store: ...

    def stamp(self, record: MemoryRecord) -> datetime: ...

    async def stored(self, scope: Scope, memory_type: Any, record_id: str) -> MemoryRecord: ...

    async def update(self, scope: Scope, memory_type: Any, record_id: str, changes: dict[str, Any], *,
                     actor: str = ...) -> MemoryRecord: ...

    async def state(self, *, cached: bool = ...) -> dict[str, str]: ...

    async def set_state(self, key: str, value: str, *, behind: bool = ...) -> None: ...


class Vault:
    """The secrets of one store (see the module docstring)."""

    def __init__(self, memory: VaultHost, key_file: Path | None) -> None:
        self.memory = memory
        self.configured_key_file = key_file
        """The key file passed to `MemoryOS.open` (None: the store's own)."""
        self._cipher: VaultCipher | None = None
        self._stamp: tuple[object, ...] = ()
        """The key files as `_cipher` was loaded from them (`memos.crypto.key_files_stamp`)."""

    # --- keys ----------------------------------------------------------------------------

    @property
    def key_file(self) -> Path:
        """The vault key file (used when MEMOS_VAULT_KEY is not set): the one passed to `open`, else
        the store's own, `<store>.vault.key` beside a local store (`~/.config/memos/vaults/<hash>.key`
        for a URI). One key per store: rotating one store never touches another's key."""
        return self.configured_key_file or default_key_file(self.memory.storage.uri)

    def cipher(self) -> VaultCipher:
        """The cipher (the key is loaded, or created, on first use), loaded again whenever the key
        files changed: a rotation by another process reaches this one at its next seal or reveal,
        so it seals under the new key (the pending one while the rotation runs) and opens what was
        re-encrypted."""
        from .crypto import VaultCipher, key_files_stamp, load_keys

        stamp = key_files_stamp(self.key_file)  # before the load: a change during it loads again next time
        if self._cipher is None or stamp != self._stamp:
            keys = load_keys(self.key_file)
            self._cipher, self._stamp = VaultCipher((*keys, *[k for k in self._legacy_keys() if k not in keys])), stamp
        return self._cipher

    def _legacy_keys(self) -> tuple[bytes, ...]:
        """The key every store shared before keys were per store (`~/.config/memos/vault.key`),
        decrypt only, for a store that still holds secrets made with it (a rotation moves them)."""
        from .crypto import ENV_KEY, legacy_key_file, read_key_file

        legacy = legacy_key_file()
        if self.configured_key_file is not None or os.environ.get(ENV_KEY) or not legacy.exists():
            return ()
        return (read_key_file(legacy),)

    # --- records -------------------------------------------------------------------------

    @staticmethod
    def associated_data(record: MemoryRecord) -> bytes:
        """What a secret of `record` is bound to when encrypted (its store, id and user)."""
        return f"{record.memory_type}|{record.id}|{record.user_id}".encode()

    def seal(self, record: R, fresh: set[str] | None = None) -> R:
        """`record` with its secret fields encrypted: all that hold a value, or only those in `fresh`
        (an update: the others are already ciphertext)."""
        secrets = {}
        for field in record.secret_fields:
            value = getattr(record, field)
            if value and (fresh is None or field in fresh):
                secrets[field] = self.cipher().encrypt(value, self.associated_data(record))
        return record.model_copy(update=secrets) if secrets else record

    @staticmethod
    def redact(record: R) -> R:
        """`record` with its secret fields blanked: how every record leaves the kernel."""
        if not record.secret_fields:
            return record
        return record.model_copy(update={f: "" for f in record.secret_fields})

    def clear_value(self, record: MemoryRecord, field: str, changes: dict[str, Any]) -> str:
        """A secret field's clear value: as just given in `changes`, or the stored one decrypted."""
        value = getattr(record, field)
        if not value or field in changes:
            return value or ""
        return self.cipher().decrypt(value, self.associated_data(record))

    async def reveal(self, scope: Scope, record_id: str, *, approved_by: str, clearance: str = "high") -> str:
        """Decrypt a vault item's secret. Callers must have obtained approval; it is logged (without the value).

        `clearance` ("low" / "medium" / "high") is the most sensitive level this caller may see:
        an item above it is refused (`VaultAccessError`) and the refusal is logged too.
        """
        from .crypto import SENSITIVITY, VaultAccessError

        check.check_scope(scope)
        validate_value(approved_by, "approved_by")
        if not isinstance(clearance, str) or clearance not in SENSITIVITY:
            raise ConfigError(f"clearance must be one of {list(SENSITIVITY)}, got {clearance!r}")
        record = await self.memory.stored(scope, "vault", record_id)
        level = getattr(record, "sensitivity", "high")
        storage, now = self.memory.storage, self.memory.clock()
        if SENSITIVITY[level] > SENSITIVITY[clearance]:
            await storage.append_history([history_row("reveal", record, approved_by, None, None, now,
                                                      note=f"refused: {level} item, {clearance} clearance")])
            raise VaultAccessError(f"vault item {record.id} is {level} sensitivity; this caller's clearance is {clearance}")
        secret = getattr(record, "secret", "")
        value = self.cipher().decrypt(secret, self.associated_data(record)) if secret else ""
        await storage.append_history([history_row("reveal", record, approved_by, None, None, now, note="secret revealed")])
        return value

    async def check_change(self, record: MemoryRecord, revised: MemoryRecord, changes: dict[str, Any], *, actor: str,
                           clearance: str, approved_by: str | None) -> str | None:
        """Allow a change to what governs who may read a vault item (a secret field, its sensitivity)
        only to a caller whose `clearance` reaches the item's current sensitivity, and a lowering
        only with an approval (`approved_by`), as a reveal needs. A refusal is written to history
        like a refused reveal and raised (`VaultAccessError`), the item unchanged. Returns the
        history note of an allowed change to those fields; None when the change touches none."""
        from .crypto import SENSITIVITY, VaultAccessError

        if not record.secret_fields:
            return None
        if not isinstance(clearance, str) or clearance not in CLEARANCE:
            raise ConfigError(f"clearance must be one of {list(CLEARANCE)}, got {clearance!r}")
        if approved_by is not None:
            validate_value(approved_by, "approved_by")
        level = getattr(record, "sensitivity", "high")
        new_level = getattr(revised, "sensitivity", level)
        touched = sorted(f for f in changes if f in record.secret_fields or (f == "sensitivity" and new_level != level))
        if not touched:
            return None
        what = " and ".join(touched)
        if CLEARANCE[clearance] < SENSITIVITY[level]:
            note = f"refused: {what} of a {level} item, {clearance} clearance"
            message = f"vault item {record.id} is {level} sensitivity; changing its {what} needs clearance {level}, this caller's is {clearance}"
        elif SENSITIVITY[new_level] < SENSITIVITY[level] and not approved_by:
            note = f"refused: lowering {level} to {new_level} without approval"
            message = (f"lowering vault item {record.id} from {level} to {new_level} sensitivity needs an approval, as revealing it "
                       "does (approved_by=...; over HTTP, the admin key in X-Memos-Approval)")
        else:
            moved = f" {level} -> {new_level}" if new_level != level else ""
            return f"vault {what} changed{moved}" + (f", approved by {approved_by}" if approved_by else "")
        await self.memory.storage.append_history([history_row("update", record, actor, None, None, self.memory.clock(), note=note)])
        raise VaultAccessError(message)

    # --- rotation ------------------------------------------------------------------------

    async def rotate_key(self, new_key: bytes | None = None, *, attempts: int = 20) -> int:
        """Re-encrypt every secret (all users) under a new key; returns the secrets re-encrypted.

        Crash-safe: the new key is written beside the old one first (`<key>.next`, loaded with it),
        every secret is re-encrypted, then the new key replaces the old. An interrupted rotation
        is finished by running it again.
        """
        from .crypto import ENV_KEY, VaultCipher, generate_key, load_keys, load_or_create_key, pending_key_file, retire_key, write_key_file

        if new_key is not None and (not isinstance(new_key, bytes) or len(new_key) != 32):
            raise ConfigError("new_key must be 32 random bytes (or None to generate one)")
        if os.environ.get(ENV_KEY):
            raise ConfigError(f"the vault key comes from ${ENV_KEY}; rotate with a key file (unset it), then export the new key")
        keys = load_keys(self.key_file)
        current = load_or_create_key(self.key_file)
        pending = pending_key_file(self.key_file)
        if new_key is None:
            new_key = keys[0] if pending.exists() else generate_key()
        write_key_file(pending, new_key)
        cipher = VaultCipher((new_key, *[k for k in (*keys, *self._legacy_keys()) if k != new_key]))
        done = 0
        for name, record_type in self.memory.types.items():
            if not record_type.secret_fields:
                continue
            for _ in range(attempts):  # a pass re-reads what another writer changed during the last one
                stale = await self._reencrypt(name, cipher)
                done += stale[0]
                if not stale[1]:
                    break
            else:
                raise RecordChangedError(name, [], 0)
        if current != new_key:  # kept to decrypt: another process may have sealed a secret under it before it saw
            retire_key(self.key_file, current)  # the rotation (`maintain` moves such a secret), or another store shares the file
        write_key_file(self.key_file, new_key)
        pending.unlink(missing_ok=True)
        self._cipher = None  # reloaded: the new key, retired ones, the legacy one
        await self.memory.storage.purge_old_versions()  # old ciphertexts leave the disk with the old key
        return done

    async def reseal_stale(self) -> int:
        """Re-encrypt under the current key the secrets still under an older one that it can open:
        sealed by a process that had not yet seen a rotation, committed after it (`maintain` runs
        this). Returns how many; a secret changed meanwhile waits for the next run."""
        cipher, done = self.cipher(), 0
        for name, record_type in self.memory.types.items():
            if record_type.secret_fields:
                done += (await self._reencrypt(name, cipher, openable_only=True))[0]
        return done

    async def _reencrypt(self, name: str, cipher: VaultCipher, *, openable_only: bool = False) -> tuple[int, bool]:
        """Re-encrypt the secrets of one store not yet under `cipher`'s key; (done, some changed meanwhile).
        Each row is written only if it is still the version read (a concurrent update retries).
        A secret under a key `cipher` lacks is a `VaultKeyError`, or left as it is (`openable_only`)."""
        storage = self.memory.storage
        table = storage.type_table(name)
        changed, read_at = [], {}
        for row in await storage.rows(name, None):
            record = table.to_record(row)
            aad = self.associated_data(record)
            updates = {f: cipher.encrypt(cipher.decrypt(getattr(record, f), aad), aad)
                       for f in record.secret_fields if getattr(record, f) and not cipher.is_current(getattr(record, f))
                       and (cipher.can_decrypt(getattr(record, f)) or not openable_only)}
            if updates:
                changed.append(table.to_row(record.model_copy(update={**updates, "updated_at": self.memory.stamp(record)}),
                                            row.get("vector")))
                read_at[record.id] = record.updated_at
        done, raced = 0, False
        for start in range(0, len(changed), 500):
            batch = changed[start : start + 500]
            try:
                await storage.update_rows(name, batch, read_at)
                done += len(batch)
            except RecordChangedError as exc:
                done += exc.written
                raced = True
        return done, raced

    # --- scrubbing -----------------------------------------------------------------------

    async def scrub_sources(self, scope: Scope, item: MemoryRecord, secrets: list[str]) -> None:
        """A secret just stored in the vault leaves the records it came from (e.g. the chat turn
        that said it), the conversation turns that said it (in every session of `scope`'s agent, or
        of every agent when `scope` names none: the user may have said it a few turns or sessions
        before asking to keep it, and an item stored through the API names no turn), the records drawn from any of
        those (their `source_ids` name one: a memory the manager kept from that turn before the
        secret was vaulted is a copy of it) and the records that carry it only as keyword context
        (the turn after it): their text, vectors, index entries, history and old table versions.
        Any other record whose own content holds the same string is the user's other data and is
        left alone."""
        memory, storage = self.memory, self.memory.storage
        marker = f"[{item.memory_type} item {item.id}]"
        sources = set(item.source_ids)
        taken = set(sources)  # the records the secret is taken out of: one drawn from them holds a copy
        if await self._scrub_summaries(scope.user_id, secrets, marker):
            await storage.purge_old_versions(memory.turn_type)  # the meta table's old versions with it
        conversations = Scope(scope.user_id, scope.agent_id)  # its agent's (and the user-wide) turns, every session
        for name in sorted(memory.types, key=lambda n: n != memory.turn_type):  # the turns first, then what is drawn from them
            record_type = memory.types[name]
            if record_type.secret_fields:
                continue
            user = Scope(scope.user_id)
            indexed = await storage.rows(name, Where(user).build(), columns=["id", "text"])
            holders = sources | {r["id"] for r in indexed if r["text"] and any(x in r["text"] for x in secrets)}
            if not holders:
                continue
            rows = await storage.rows(name, Where(user).id_in(sorted(holders)).build())
            table = storage.type_table(name)
            for record in (table.to_record(r) for r in rows):
                said_here = name == memory.turn_type and (
                    (scope.session_id is not None and (record.agent_id, record.session_id) == (scope.agent_id, scope.session_id))
                    or (getattr(record, "event_type", "") == "message"
                        and conversations.contains(record.user_id, record.agent_id, record.session_id)))
                drawn = not taken.isdisjoint(record.source_ids)
                if record.id not in sources and not said_here and not drawn and any(x in record.index_text() for x in secrets):
                    continue
                # what a user wrote, never an id or a status (a successor's id that held a secret's
                # characters would be rewritten into a broken link; `update` refuses those fields)
                changes = {f: _replace_all(v, secrets, marker) for f, v in record.model_dump().items()
                           if isinstance(v, str) and f not in check.IMMUTABLE_FIELDS | check.LIFECYCLE_FIELDS
                           and any(x in v for x in secrets)}
                if not changes:
                    continue
                taken.add(record.id)
                owner = Scope(record.user_id, record.agent_id, record.session_id)
                await memory.update(owner, name, record.id, changes, actor="vault")
                rows = await storage.raw_history(Where(owner).eq("record_id", record.id).condition())
                await storage.rewrite_history([
                    {**r, "before": _replace_in_json(r["before"], secrets, marker), "after": _replace_in_json(r["after"], secrets, marker)}
                    for r in rows])
                await storage.purge_old_versions(name)

    async def _scrub_summaries(self, user_id: str, secrets: list[str], marker: str) -> bool:
        """The secret leaves the running summaries of the user's sessions (session state: a turn
        evicted from a working context lives on there, and every later prompt shows it); a live
        session takes the summary up at its next step (`MemorySession._read_step`)."""
        changed = False
        for key, value in (await self.memory.state()).items():
            if key_owner(key, (SESSION,)) == user_id and any(x in value for x in secrets):
                await self.memory.set_state(key, _replace_in_json(value, secrets, marker) or value)
                changed = True
        return changed


def _replace_all(text: str | None, secrets: list[str], marker: str) -> str | None:
    for secret in secrets:
        text = text.replace(secret, marker) if text else text
    return text


def _replace_in_json(text: str | None, secrets: list[str], marker: str) -> str | None:
    """`_replace_all` inside the string values of a JSON document (it stays valid JSON)."""
    if not text:
        return text

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _replace_all(value, secrets, marker)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        return value

    return json.dumps(walk(json.loads(text)), default=str)
