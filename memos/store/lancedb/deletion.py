"""Deleting a record for real, crash-safe: afterwards nothing of it is left in any table.

A delete is several commits: the record's own table, the shared search table
(`memos.store.lancedb.search_index`) and history. A process killed between them used to leave the rest for
good (history that an export then carried) and a retry answered "not found". So a pending-delete
entry (`PENDING_DELETE`, in the meta table) is written before the first commit and removed after
the last: while it is there the delete is unfinished, and the next `MemoryOS.open`, a maintenance
run or a retried delete finishes it (`finish_deletes`, `delete_record`). Every step removes what
is there and nothing else, so finishing a delete another process is still carrying out is harmless.

A retried delete succeeds while anything of the record is left in the caller's scope (its row,
its shared row, a history row, its pending entry); once nothing is, it is "not found" again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection

from memos.store.scope import Scope, Where, sql_string

from .elsewhere import settle_journaled
from .storage import Storage

__all__ = ["PENDING_DELETE", "delete_record", "finish_deletes", "pending_deletes"]

log = logging.getLogger("memos.store.lancedb.deletion")

PENDING_DELETE = "delete:pending:"
"""Meta key prefix of a delete that has started and not ended: `delete:pending:<store>:<id>`,
its value the scope whose rows it removes (JSON: user, agent, session)."""


def _key(memory_type: str, record_id: str) -> str:
    return f"{PENDING_DELETE}{memory_type}:{record_id}"


async def pending_deletes(storage: Storage) -> dict[tuple[str, str], Scope]:
    """The unfinished deletes: (store, record id) -> the scope they remove the record from."""
    where = f"key LIKE {sql_string(PENDING_DELETE + '%')}"
    rows = (await storage.read(storage.meta, storage.meta.query().where(where).to_arrow)).to_pylist()
    found: dict[tuple[str, str], Scope] = {}
    for row in rows:
        memory_type, _, record_id = row["key"][len(PENDING_DELETE):].partition(":")
        found[(memory_type, record_id)] = Scope(*json.loads(row["value"]))
    return found


async def delete_record(storage: Storage, scope: Scope, memory_type: str, record_id: str) -> bool:
    """Delete record `record_id` of store `memory_type` in `scope`: its row, shared row and history,
    or finish a delete of it that was cut short. False (nothing written) when nothing of it is
    left in `scope`."""
    where = Where(scope).id_in([record_id]).build()
    rows = await storage.rows(memory_type, where, columns=["user_id", "agent_id", "session_id"], limit=1)
    if not rows and await storage.await_journaled(memory_type, record_id):  # acknowledged by another process, not yet written
        rows = await storage.rows(memory_type, where, columns=["user_id", "agent_id", "session_id"], limit=1)
    if rows:  # its exact scope: nothing outside it is touched, now or when finished later
        target = Scope(rows[0]["user_id"], rows[0]["agent_id"], rows[0]["session_id"])
    else:
        pending = (await pending_deletes(storage)).get((memory_type, record_id))
        if pending is not None and scope.contains(pending.user_id, pending.agent_id or "", pending.session_id or ""):
            target = pending
        elif await _leftovers(storage, scope, memory_type, record_id):
            target = scope
        else:
            return False
    if not rows:  # (a row found is settled by `Storage.delete_rows`, below)
        await settle_journaled(storage, memory_type, [record_id])  # not committed by its writer, or replayed, after this delete
    key = _key(memory_type, record_id)
    await storage.set_meta(key, json.dumps([target.user_id, target.agent_id, target.session_id]))
    await _remove(storage, target, memory_type, record_id, shared=not rows)
    await storage.delete_meta([key])
    return True


async def finish_deletes(storage: Storage, ids: Collection[str] | None = None) -> int:
    """Finish every unfinished delete (of these record `ids` only, when given); returns how many.
    The next open and every maintenance run call it; an add of a record under an id whose delete
    is unfinished calls it first, so the delete cannot remove the new record later."""
    done = 0
    for (memory_type, record_id), scope in (await pending_deletes(storage)).items():
        if ids is not None and record_id not in ids:
            continue
        if memory_type not in storage.tables:  # a store this process was not opened with: left for one that is
            log.warning("unfinished delete of %s record %s left for an open that registers that store", memory_type, record_id)
            continue
        await _remove(storage, scope, memory_type, record_id, shared=True)
        await storage.delete_meta([_key(memory_type, record_id)])
        done += 1
    if done:
        log.warning("%d deletes cut short by a stopped process were finished", done)
    return done


async def _leftovers(storage: Storage, scope: Scope, memory_type: str, record_id: str) -> bool:
    """Whether a history row or a shared search row of the record is left in `scope` (its own row is gone)."""
    history = Where(scope).eq("record_id", record_id).eq("memory_type", memory_type).build()
    if (await storage.read(storage.history, storage.history.query().where(history).select(["id"]).limit(1).to_arrow)).num_rows:
        return True
    table = storage.search.table
    if table is None or not storage.search.covers(memory_type):
        return False
    shared = Where(scope).eq("key", f"{memory_type}:{record_id}").build()
    return bool((await storage.read(table, table.query().where(shared).select(["key"]).limit(1).to_arrow)).num_rows)


async def _remove(storage: Storage, scope: Scope, memory_type: str, record_id: str, *, shared: bool) -> None:
    """The delete's commits, each idempotent: the row (and its shared row with it), the shared
    row on its own when the row may be gone already (`shared`), then the history."""
    await storage.delete_rows(memory_type, Where(scope).id_in([record_id]).build() or "false")
    if shared and storage.search.covers(memory_type):
        await storage.search.synced(memory_type, [record_id])  # removed unless the store holds the id
    await storage.delete_history(Where(scope).eq("record_id", record_id).eq("memory_type", memory_type).build() or "false")
