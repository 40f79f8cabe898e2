"""Moving memory out, in, and away: export, import, and forgetting a user.

`export_scope` writes a scope's records and history as JSON lines; vault secrets leave only
as the ciphertext they are stored as. `import_lines` reads them back (into the same or another
user), re-embedding text and re-encrypting vault secrets for the target (the source key is
needed when the user or the key changes). `forget_user` deletes a user's records, history and
session state everywhere, rebuilds the full-text indexes and purges old table versions, so
nothing of the user remains on disk.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .crypto import VaultCipher
from .exceptions import ConfigError, InvalidRecordError
from .scope import Scope, Where

if TYPE_CHECKING:
    from .memory import MemoryOS

__all__ = ["FORMAT", "export_scope", "forget_user", "import_lines"]

FORMAT = "memos-export/1"


async def export_scope(memory: MemoryOS, scope: Scope) -> Iterator[str]:
    """JSON lines: a header, then every record of `scope` (all statuses), then its history."""
    lines = [json.dumps({"kind": "header", "format": FORMAT, "scope": scope.stamp(), "types": memory.type_names})]
    for name in memory.type_names:
        table = memory.storage.type_table(name)
        for row in await memory.storage.rows(name, Where(scope).build()):
            record = table.to_record(row)  # as stored: secrets are ciphertext
            lines.append(json.dumps({"kind": "record", "memory_type": name, "record": record.model_dump(mode="json")}))
    for entry in await memory.storage.raw_history(Where(scope).build() or "true"):
        lines.append(json.dumps({"kind": "history", "row": {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in entry.items()}}))
    return iter(lines)


async def import_lines(memory: MemoryOS, lines: Iterable[str], *, user_id: str | None = None,
                       source_key: bytes | None = None) -> dict[str, int]:
    """Load an export; `user_id` re-homes it to another user. Returns counts per kind."""
    source = VaultCipher.from_key(source_key) if source_key else None
    header: dict[str, Any] | None = None
    by_type: dict[str, list[Any]] = {}
    history: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRecordError(f"line {number}: not JSON ({exc.msg})") from None
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind == "header":
            if item.get("format") != FORMAT:
                raise ConfigError(f"line {number}: not a {FORMAT} export")
            header = item
        elif kind == "record":
            record_type = memory.record_type(item.get("memory_type", ""))
            data = dict(item["record"])
            if user_id:
                data["user_id"] = user_id
            try:
                record = record_type.model_validate(data)
            except ValueError as exc:
                raise InvalidRecordError(f"line {number}: invalid {record_type.memory_type} record: {exc}") from None
            by_type.setdefault(record_type.memory_type, []).append((record, item["record"]))
        elif kind == "history":
            row = dict(item["row"])
            if user_id:
                row["user_id"] = user_id
            history.append(row)
        else:
            raise InvalidRecordError(f"line {number}: unknown kind {kind!r}")
    if header is None:
        raise ConfigError(f"no {FORMAT} header: not a memos export")
    counts = {"records": 0, "history": 0}
    for name, pairs in by_type.items():
        records = [_rekey(memory, record, original, source) for record, original in pairs]
        table = memory.storage.type_table(name)
        vectors = await memory.embed_documents([r.index_text() for r in records])
        await memory.storage.upsert_rows(name, [table.to_row(r.model_copy(update={"text": r.search_text()}), v)
                                                for r, v in zip(records, vectors, strict=True)])
        counts["records"] += len(records)
    if history:
        await memory.storage.rewrite_history([_history_row(r) for r in history])
        counts["history"] = len(history)
    return counts


def _rekey(memory: MemoryOS, record: Any, original: dict[str, Any], source: VaultCipher | None) -> Any:
    """Secrets stay ciphertext; they are re-encrypted only when the user or the key changes."""
    if not record.secret_fields:
        return record
    updates = {}
    for field in record.secret_fields:
        token = getattr(record, field)
        if not token:
            continue
        old_aad = f"{record.memory_type}|{original['id']}|{original['user_id']}".encode()
        new_aad = memory.associated_data(record)
        if old_aad == new_aad and memory.cipher().can_decrypt(token):
            continue
        if source is None:
            raise ConfigError("this export's vault secrets were made with another key or user; pass the source key to re-encrypt them")
        updates[field] = memory.cipher().encrypt(source.decrypt(token, old_aad), new_aad)
    return record.model_copy(update=updates)


def _history_row(row: dict[str, Any]) -> dict[str, Any]:
    from datetime import datetime

    out = dict(row)
    if isinstance(out.get("at"), str):
        out["at"] = datetime.fromisoformat(out["at"])
    return out


async def forget_user(memory: MemoryOS, user_id: str) -> dict[str, int]:
    """Delete everything of `user_id`: records, history, session state; purge old versions."""
    scope = Scope(user_id)
    where = Where(scope).build()
    assert where is not None
    removed: dict[str, int] = {}
    for name in memory.type_names:
        removed[name] = await memory.storage.count(name, where)
        await memory.storage.delete_rows(name, where)
        await memory.storage.rebuild_text_index(name)
    removed["history"] = len(await memory.storage.raw_history(where))
    await memory.storage.delete_history(where)
    keys = [k for k in await memory.state() if _meta_owner(k) == user_id]
    await memory.delete_state(keys)
    removed["state"] = len(keys)
    await memory.storage.purge_old_versions()
    return removed


def _meta_owner(key: str) -> str | None:
    """The user a meta entry belongs to (session and reflection state), if any."""
    if key.startswith("session:"):
        try:
            return str(json.loads(key[len("session:"):])[0])
        except (ValueError, IndexError, KeyError):
            return None
    if key.startswith("reflection:"):
        return key[len("reflection:"):].rsplit(":", 2)[0]  # reflection:<user>:<agent|*>:<session|*>
    return None
