"""The audit trail's repair pass: every record has its creation in history, every change its row.

A mutation and its history row are two LanceDB commits (two tables), so a process killed between
them leaves a record without its audit row. Writing the row first would leave rows for changes
that never happened; instead the maintenance job runs `repair_history`, which finds the gaps and
writes the missing rows, marked as repaired:

- a record with no creation row (`op="add"`) gets one, its `after` the record as it is now;
- a record whose `updated_at` is later than its newest history row gets an `update` row (the
  change before it is unknown, so `before` is empty).

`history_gaps` counts them without writing (what the crash tests check).
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from memos.memtypes import new_id

from memos.store.scope import sql_in
from memos.store.lancedb.storage import Storage

__all__ = ["CREATION_OPS", "history_gaps", "repair_history"]

CREATION_OPS = frozenset({"add"})
"""History ops that record a record's creation."""
_REPAIRED = "repaired: the change committed but its history row did not (process stopped between the two)"


async def history_gaps(storage: Storage) -> dict[str, list[dict[str, Any]]]:
    """Per store, the records whose history lacks their creation or their latest change."""
    history = await storage.read(storage.history, storage.history.query().select(["record_id", "op", "at"]).to_arrow)
    created: set[str] = set()
    newest: dict[str, Any] = {}
    for rid, op, at in zip(*(history.column(c).to_pylist() for c in ("record_id", "op", "at")), strict=True):
        if op in CREATION_OPS:
            created.add(rid)
        if op not in ("reveal", "job") and (rid not in newest or at > newest[rid]):
            newest[rid] = at
    gaps: dict[str, list[dict[str, Any]]] = {}
    for name in storage.tables:
        rows = await storage.rows(name, None, columns=["id", "updated_at"])
        missing = [{"id": r["id"], "kind": "add"} for r in rows if r["id"] not in created]
        missing += [{"id": r["id"], "kind": "update"} for r in rows
                    if r["id"] in created and r["updated_at"] is not None and r["id"] in newest and r["updated_at"] > newest[r["id"]]]
        if missing:
            gaps[name] = missing
    return gaps


async def repair_history(storage: Storage) -> dict[str, int]:
    """Write the history rows `history_gaps` finds missing; returns how many per store."""
    done: dict[str, int] = {}
    for name, missing in (await history_gaps(storage)).items():
        table = storage.type_table(name)
        ids = sorted({m["id"] for m in missing})
        rows = {r["id"]: r for r in await storage.rows(name, sql_in("id", ids),
                                                        columns=table.result_columns)}
        entries = []
        for gap in missing:
            row = rows.get(gap["id"])
            if row is None:  # deleted since the scan
                continue
            record = table.to_record(row)
            after = record.model_dump(mode="json")
            entries.append({
                "id": new_id(), "at": record.updated_at.astimezone(UTC), "op": gap["kind"], "memory_type": name,
                "record_id": record.id, "actor": "repair", "user_id": record.user_id, "agent_id": record.agent_id,
                "session_id": record.session_id, "before": None, "after": json.dumps(after, default=str), "note": _REPAIRED,
            })
        await storage.append_history(entries)
        done[name] = len(entries)
    return done


