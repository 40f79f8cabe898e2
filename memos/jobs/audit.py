"""The audit trail's repair pass: every record has its creation in history, every change its row.

A mutation and its history row are two LanceDB commits (two tables), so a process killed between
them leaves a record without its audit row. Writing the row first would leave rows for changes
that never happened; instead the maintenance job runs `repair_history`, which finds the gaps and
writes the missing rows, marked as repaired:

- a record with no creation row (`op="add"`) gets one, its `after` the record as it is now;
- a record whose `updated_at` is later than its newest history row gets an `update` row (the
  change before it is unknown, so `before` is empty).

Only a write that is provably abandoned is repaired: one whose record was last written more than
`REPAIR_GRACE` ago. A younger gap may be a write in flight (another process between its two
commits, a queued history row), whose own row follows; repairing it left the record with two.

`history_gaps` counts them without writing (what the crash tests check).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from memos.memtypes import new_id
from memos.store.protocol import Store
from memos.store.scope import sql_in, sql_string
from memos.validation import HISTORY_REQUIRED

__all__ = ["CREATION_OPS", "REPAIR_GRACE", "history_gaps", "malformed_history", "repair_history"]

CREATION_OPS = frozenset({"add"})
"""History ops that record a record's creation."""
REPAIR_GRACE = timedelta(minutes=10)
"""How long ago a record must have been last written before a history row it lacks is repaired.
A writer's two commits (row, then history) are apart by its retries, a wait at the purge lease or
the write-behind delay: seconds. The bound is the one a deferred purge takes for any write still in
flight (the same bound a deferred purge waits for: `memos.store.lancedb.purge.PURGE_MARGIN`); a gap older than it has no writer left to fill it."""
_REPAIRED = "repaired: the change committed but its history row did not (process stopped between the two)"


async def history_gaps(storage: Store) -> dict[str, list[dict[str, Any]]]:
    """Per store, the records whose history lacks their creation or their latest change."""
    history = await storage.history_columns(["record_id", "op", "at"])
    created: set[str] = set()
    newest: dict[str, Any] = {}
    for rid, op, at in zip(*(history.column(c).to_pylist() for c in ("record_id", "op", "at")), strict=True):
        if rid is None or op is None or at is None:  # a malformed row (`malformed_history` counts them)
            continue
        if op in CREATION_OPS:
            created.add(rid)
        if op not in ("reveal", "job") and (rid not in newest or at > newest[rid]):
            newest[rid] = at
    gaps: dict[str, list[dict[str, Any]]] = {}
    for name in storage.memory_types():
        rows = await storage.rows(name, None, columns=["id", "updated_at"])
        missing = [{"id": r["id"], "kind": "add", "updated_at": r["updated_at"]} for r in rows if r["id"] not in created]
        missing += [{"id": r["id"], "kind": "update", "updated_at": r["updated_at"]} for r in rows
                    if r["id"] in created and r["updated_at"] is not None and r["id"] in newest and r["updated_at"] > newest[r["id"]]]
        if missing:
            gaps[name] = missing
    return gaps


async def malformed_history(storage: Store) -> int:
    """How many stored history rows lack a field of `HISTORY_REQUIRED` (written around the facade
    and an import's checks): the audit pass skips them, maintenance reports them, never a crash."""
    table = await storage.history_columns(list(HISTORY_REQUIRED))
    return sum(1 for row in table.to_pylist() if any(row[name] is None for name in HISTORY_REQUIRED))


async def repair_history(storage: Store, *, now: datetime | None = None, grace: timedelta = REPAIR_GRACE) -> dict[str, int]:
    """Write the history rows `history_gaps` finds missing for records last written before `now`
    (the wall clock by default) minus `grace`; returns how many per store."""
    settled = (now or datetime.now(UTC)) - grace
    done: dict[str, int] = {}
    for name, gaps in (await history_gaps(storage)).items():
        missing = [gap for gap in gaps if gap["updated_at"] is None or gap["updated_at"] <= settled]
        if not missing:
            continue
        table = storage.type_table(name)
        ids = sorted({m["id"] for m in missing})
        rows = {r["id"]: r for r in await storage.rows(name, sql_in("id", ids),
                                                        columns=table.result_columns)}
        entries = []
        for gap in missing:
            row = rows.get(gap["id"])
            if row is None or row["updated_at"] != gap["updated_at"]:  # deleted or written again since the scan
                continue
            record = table.to_record(row)
            after = record.model_dump(mode="json")
            entries.append({
                "id": new_id(), "at": record.updated_at.astimezone(UTC), "op": gap["kind"], "memory_type": name,
                "record_id": record.id, "actor": "repair", "user_id": record.user_id, "agent_id": record.agent_id,
                "session_id": record.session_id, "before": None, "after": json.dumps(after, default=str), "note": _REPAIRED,
            })
        await storage.append_history(entries)
        still = {r["id"] for r in await storage.rows(name, sql_in("id", ids), columns=["id"])}
        if gone := sorted({e["record_id"] for e in entries} - still):  # deleted meanwhile: none of its history stays
            await storage.delete_history(f"memory_type = {sql_string(name)} AND {sql_in('record_id', gone)}")
        done[name] = len(entries)
    return done


