"""Moving memory out, in, and away: export, import, and forgetting a user.

`export_scope` writes a scope's records and history as JSON lines; vault secrets leave only
as the ciphertext they are stored as. `import_lines` reads them back (into the same or another
user), re-embedding text and re-encrypting vault secrets for the target (the source key is
needed when the user or the key changes).

Ids stay unique across the database on import: a record whose id already belongs to the same
user in the same store is that record again and is replaced by the imported version (importing
one export twice changes nothing); an id held by another user or by another store is never
touched: the imported record gets a fresh id, and the import's own references to it
(`source_ids`, `superseded_by`, its history) follow. History rows are re-id'd the same way.
An active core block whose label another active block of its scope has (stored under another
id, or in the same import) is refused before anything is written (`memos.context.block_labels`).
`forget_user` deletes a user's records, history and
session state everywhere, rebuilds the full-text indexes and purges old table versions, so
nothing of the user remains on disk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from memos.context.block_labels import check_labels_free
from memos.context.state_keys import key_owner
from memos.jobs.partition import user_jobs_lock
from memos.jobs.reflection_state import key_user
from memos.store.scope import Scope, validate_value

from . import validation as check
from .crypto import VaultCipher
from .exceptions import ConfigError, InvalidFilterError, InvalidRecordError
from .memtypes import CoreBlock, new_id

if TYPE_CHECKING:
    from .memory import MemoryOS

__all__ = ["FORMAT", "export_scope", "forget_user", "import_lines"]

FORMAT = "memos-export/1"


async def export_scope(memory: MemoryOS, scope: Scope) -> Iterator[str]:
    """JSON lines: a header, then every record of `scope` (all statuses), then its history."""
    lines = [json.dumps({"kind": "header", "format": FORMAT, "scope": scope.stamp(), "types": memory.type_names})]
    for name in memory.type_names:
        for record in await memory.stored_in(scope, name):  # as stored: secrets are ciphertext
            lines.append(json.dumps({"kind": "record", "memory_type": name, "record": record.model_dump(mode="json")}))
    for entry in await memory.raw_history(scope):
        lines.append(json.dumps({"kind": "history", "row": {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in entry.items()}}))
    return iter(lines)


async def import_lines(memory: MemoryOS, lines: Iterable[str], *, user_id: str | None = None,
                       source_key: bytes | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Load an export; `user_id` re-homes it to another user. Returns counts per kind.

    Every line is checked first, as the public API checks its arguments (a record against its
    type and the facade's limits, a history row for the fields the audit trail reads): a bad
    one is an error naming the line, and nothing is written. `progress(done, total)` is called
    as records are embedded and written (batches of 256)."""
    source = VaultCipher.from_key(source_key) if source_key else None
    if user_id is not None:
        validate_value(user_id, "user_id")
    header: dict[str, Any] | None = None
    by_type: dict[str, list[Any]] = {}
    history: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            kind, value = _read_line(memory, line, user_id)
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"line {number}: {exc}") from None
        except ConfigError as exc:  # a bad id or user (a filter error), an unknown store, not an export
            raise (InvalidFilterError if isinstance(exc, InvalidFilterError) else ConfigError)(f"line {number}: {exc}") from None
        if kind == "header":
            header = value
        elif kind == "record":
            by_type.setdefault(value[0].memory_type, []).append(value)
        else:
            history.append(value)
    if header is None:
        raise ConfigError(f"no {FORMAT} header: not a memos export")
    counts = {"records": 0, "history": 0, "reassigned": 0}
    renamed = await _foreign_ids(memory, by_type)
    counts["reassigned"] = len(renamed)
    # vault secrets are re-encrypted before the first write: a missing source key changes nothing
    ready = {name: [_rekey(memory, _renamed(record, renamed), original, source) for record, original in pairs]
             for name, pairs in by_type.items()}
    await check_labels_free(memory.storage, ready.get(CoreBlock.memory_type, []))  # one active core block a label
    total = sum(len(records) for records in ready.values())
    for name, records in ready.items():
        for start in range(0, len(records), 256):
            batch = records[start:start + 256]
            await memory.put_stored(name, batch)
            counts["records"] += len(batch)
            if progress:
                progress(counts["records"], total)
    if history:
        taken = await _taken_history_ids(memory, [r["id"] for r in history])
        for row in history:
            row["record_id"] = renamed.get(row["record_id"], row["record_id"])
            if row["id"] in taken and taken[row["id"]] != row["user_id"]:
                row["id"] = new_id()  # another user's audit row: never overwritten
        await memory.restore_history(history)
        counts["history"] = len(history)
    return counts


def _read_line(memory: MemoryOS, line: str, user_id: str | None) -> tuple[str, Any]:
    """One export line checked: ("header", the header), ("record", (record, as exported)) or
    ("history", the row ready to store)."""
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidRecordError(f"not JSON ({getattr(exc, 'msg', 'nested too deeply')})") from None
    if not isinstance(item, dict):
        raise InvalidRecordError(f"expected a JSON object with a 'kind' (header, record or history), got a JSON {_json_name(item)}")
    kind = item.get("kind")
    if kind == "header":
        if item.get("format") != FORMAT:
            raise ConfigError(f"not a {FORMAT} export")
        return kind, item
    if kind == "record":
        return kind, _read_record(memory, item, user_id)
    if kind == "history":
        row = item.get("row")
        if not isinstance(row, dict):
            raise InvalidRecordError(f"a history line needs a 'row' object, got a JSON {_json_name(row)}")
        return kind, check.check_history_row({**row, "user_id": user_id} if user_id else row)
    raise InvalidRecordError(f"unknown kind {kind!r} (header, record or history)")


def _read_record(memory: MemoryOS, item: dict[str, Any], user_id: str | None) -> tuple[Any, dict[str, Any]]:
    """A record line as the record it stores (checked like `MemoryOS.add` checks one) and as exported."""
    name, original = item.get("memory_type"), item.get("record")
    if not isinstance(name, str):
        raise InvalidRecordError(f"a record line needs a 'memory_type' (a store name), got a JSON {_json_name(name)}")
    record_type = memory.record_type(name)
    if not isinstance(original, dict):
        raise InvalidRecordError(f"a record line needs a 'record' object, got a JSON {_json_name(original)}")
    try:
        record = record_type.model_validate({**original, "user_id": user_id} if user_id else original)
    except ValidationError as exc:
        raise InvalidRecordError(f"invalid {record_type.memory_type} record: {check.describe_errors(exc)}") from None
    check.check_record(record)
    Scope(record.user_id, record.agent_id, record.session_id)  # every stored record has an owner
    return record, original


def _json_name(value: object) -> str:
    """What JSON calls `value`'s type (an error reads "got a JSON list", not "got list")."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


async def _foreign_ids(memory: MemoryOS, by_type: dict[str, list[Any]]) -> dict[str, str]:
    """Imported ids already held by another user or another store, each mapped to a fresh id."""
    owner = {record.id: (name, record.user_id) for name, pairs in by_type.items() for record, _ in pairs}
    held = await memory.id_owners(sorted(owner))
    return {i: new_id() for i, holder in held.items() if owner[i] != holder}


def _renamed(record: Any, renamed: dict[str, str]) -> Any:
    """`record` with its id and its references to re-id'd records moved to their fresh ids."""
    if not renamed:
        return record
    updates: dict[str, Any] = {"source_ids": [renamed.get(i, i) for i in record.source_ids]}
    if record.id in renamed:
        updates["id"] = renamed[record.id]
    if record.superseded_by in renamed:
        updates["superseded_by"] = renamed[record.superseded_by]
    return record.model_copy(update=updates)


async def _taken_history_ids(memory: MemoryOS, ids: list[str]) -> dict[str, str]:
    """History row ids already stored, each with the user whose row it is."""
    taken: dict[str, str] = {}
    valid = [i for i in ids if i]
    for start in range(0, len(valid), 1000):
        rows = await memory.raw_history(ids=valid[start : start + 1000])
        taken |= {r["id"]: r["user_id"] for r in rows}
    return taken


def _rekey(memory: MemoryOS, record: Any, original: dict[str, Any], source: VaultCipher | None) -> Any:
    """Secrets stay ciphertext; they are re-encrypted only when the user, the id or the key changes
    (with the source key, or this store's own key when it made them)."""
    if not record.secret_fields:
        return record
    updates = {}
    for field in record.secret_fields:
        token = getattr(record, field)
        if not token:
            continue
        old_aad = f"{record.memory_type}|{original.get('id', record.id)}|{original.get('user_id', record.user_id)}".encode()
        new_aad = memory.associated_data(record)
        if old_aad == new_aad and memory.cipher().can_decrypt(token):
            continue
        if source is None and memory.cipher().can_decrypt(token):
            source = memory.cipher()  # made with this store's own key (a copy or a re-id'd record)
        if source is None:
            raise ConfigError("this export's vault secrets were made with another key or user; pass the source key to re-encrypt them")
        updates[field] = memory.cipher().encrypt(source.decrypt(token, old_aad), new_aad)
    return record.model_copy(update=updates)


async def forget_user(memory: MemoryOS, user_id: str) -> dict[str, int]:
    """Delete everything of `user_id`: records, history, session state; purge old versions.
    A job of the user under way (a reflection waiting for its model) ends first (`user_jobs_lock`)."""
    async with memory.exclusive(user_jobs_lock(user_id)):
        removed = await memory.erase(Scope(user_id))
        keys = [k for k in await memory.state() if _meta_owner(k) == user_id]
        await memory.delete_state(keys)
        removed["state"] = len(keys)
    await memory.purge()
    return removed


def _meta_owner(key: str) -> str | None:
    """The user a meta entry belongs to (session, manager and reflection state), if any."""
    return key_user(key) if key.startswith("reflection:") else key_owner(key)
