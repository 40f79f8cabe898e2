"""The read-back of `memos bench faults`: what every acknowledgement promised, checked against the store.

The load (`memos.bench.faults`) keeps a ledger of every write it tried, in order per client:
an add (found by the marker in its `source` field, and by id once acknowledged), an update
(the value it set in `details`), a delete, a recorded turn (its marker in the text). An op is
acknowledged when its 2xx response arrived; any other op may or may not have happened, and then
it must have happened whole or not at all. `check_store` reopens the store in this process
(replaying any journal a killed server left) and counts broken promises; every count but the
informational ones should be 0:

- lost: an acknowledged add (no delete tried after it) that is not there exactly once;
- duplicated: an id in a table twice, or one add's marker on two records;
- resurrected: an acknowledged delete whose record is in a table, in history or in the search table;
- orphaned_history: history rows of a record that is in no table (a delete removes its history);
- without_history: a record with no creation row in history once the repair pass has run (the
  maintenance job's, as it runs once `REPAIR_GRACE` has passed: every writer has stopped by then);
- duplicate_history: a record with a repair row (`memos.jobs.audit`) for a creation or a change that has
  its own row too (the repair ran while that row was still on its way);
- lost_updates: a record whose `details` is neither its last acknowledged value nor a later tried one;
- cross_agent: a record merged or superseded in favour of a record of another agent.

Informational: `dangling_links`, records merged or superseded into a record deleted since.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memos.jobs.audit import REPAIR_GRACE, repair_history

__all__ = ["LedgerOp", "StoreView", "check_store", "judge"]

_CREATION = "add"
_LINKS = ("merge", "supersede")
_REPAIR = "repair"


@dataclass
class LedgerOp:
    """One write a client tried: `acked` once its 2xx response arrived (None: it may have happened)."""

    seq: int
    kind: str
    """add, update, delete or turn."""
    task: int
    user: str
    agent: str
    marker: str = ""
    """add and turn: the unique text that finds the record whether or not it was acknowledged."""
    record_id: str = ""
    """add (once acknowledged), update, delete: the record's id."""
    value: str = ""
    """update: the `details` it sets."""
    acked: bool | None = None
    status: int | None = None


@dataclass
class StoreView:
    """What the store holds after the run: every table's rows, history, the search table's ids."""

    rows: dict[str, list[dict[str, Any]]]
    history: list[dict[str, Any]]
    search_ids: list[str]
    search_fixed_on_open: dict[str, int] = field(default_factory=dict)


def judge(ops: list[LedgerOp], view: StoreView) -> dict[str, Any]:
    """Count broken promises of the ledger `ops` against `view` (pure: no I/O)."""
    out: Counter[str] = Counter({k: 0 for k in ("lost", "duplicated", "resurrected", "orphaned_history", "without_history",
                                                "duplicate_history", "lost_updates", "cross_agent")})
    cases: dict[str, list[str]] = {}

    def bad(kind: str, detail: str) -> None:
        out[kind] += 1
        cases.setdefault(kind, []).append(detail)

    ids: Counter[str] = Counter(r["id"] for rows in view.rows.values() for r in rows)
    where = {r["id"]: name for name, rows in view.rows.items() for r in rows}
    by_id = {r["id"]: r for rows in view.rows.values() for r in rows}
    agent_of = {r["id"]: r["agent_id"] for rows in view.rows.values() for r in rows}
    history = [h for h in view.history if h["memory_type"] != "job"]
    for h in history:
        agent_of.setdefault(h["record_id"], h["agent_id"])
    for op in ops:  # a record deleted since (history and all) is known by the add that made it
        if op.kind == "add" and op.record_id:
            agent_of.setdefault(op.record_id, op.agent)
    creations = Counter(h["record_id"] for h in history if h["op"] == _CREATION)
    search_ids = Counter(view.search_ids)
    markers: Counter[str] = Counter()
    for name, rows in view.rows.items():
        for r in rows:
            if name == "semantic" and r.get("source", "").startswith("mk-"):
                markers[r["source"]] += 1
            elif name == "episodic":
                markers.update(w for w in (r.get("summary") or "").split() if w.startswith("mk-"))

    for rid, n in ids.items():
        if n > 1:
            bad("duplicated", f"id {rid} is in {where[rid]} {n} times")
    for marker, n in markers.items():
        if n > 1:
            bad("duplicated", f"marker {marker} is on {n} records")
    own_versions = {(h["record_id"], json.loads(h["after"]).get("updated_at")) for h in history
                    if h["actor"] != _REPAIR and h["after"]}
    invented: dict[str, list[str]] = {}  # repair rows for a creation or a change that has its own row
    for h in history:
        if h["actor"] != _REPAIR:
            continue
        stamp = json.loads(h["after"]).get("updated_at") if h["after"] else None
        if (h["op"] == _CREATION and creations[h["record_id"]] > 1) or (h["op"] != _CREATION and (h["record_id"], stamp) in own_versions):
            invented.setdefault(h["record_id"], []).append(f"{h['op']} at {stamp}")
    for rid in ids:
        if creations[rid] == 0:
            bad("without_history", f"{where[rid]} {rid} has no creation row")
    for rid, repairs in invented.items():
        bad("duplicate_history", f"{where.get(rid, 'no table')} {rid}: repair rows beside the writer's own ({', '.join(repairs)})")
    tried = {op.record_id: op for op in sorted(ops, key=lambda o: o.seq) if op.record_id}
    orphans = Counter(h["record_id"] for h in history if h["record_id"] not in ids)
    for rid, n in orphans.items():
        out["orphaned_history"] += n - 1  # counted per row: `bad` adds the first
        bad("orphaned_history", f"{n} history rows of {rid}, which is in no table (agent {agent_of.get(rid)}; "
            f"the ledger's last op on it: {_said(tried.get(rid))})")
    for rid, n in search_ids.items():
        if rid not in ids:
            bad("resurrected", f"{rid} is in the search table but in no store")
        elif n > 1:
            bad("duplicated", f"{rid} is in the search table {n} times")

    per_record: dict[str, list[LedgerOp]] = {}
    for op in sorted(ops, key=lambda o: o.seq):
        if (op.kind == "add" and op.acked) or op.kind in ("update", "delete"):
            per_record.setdefault(op.record_id, []).append(op)
    for op in ops:
        if op.kind == "turn" and op.acked and markers[op.marker] == 0:
            bad("lost", f"acknowledged turn {op.marker} ({op.user}/{op.agent}) is not in episodic")
    for rid, trail in per_record.items():
        added = trail[0].kind == "add"
        deletes = [o for o in trail if o.kind == "delete"]
        if any(o.acked for o in deletes):
            if ids[rid] or search_ids[rid]:  # history left behind is counted as orphaned above
                bad("resurrected", f"{rid}: deleted (acknowledged) but still in {where.get(rid, 'the search table')}")
            continue
        if added and not deletes and ids[rid] == 0:
            bad("lost", f"acknowledged add {rid} ({trail[0].user}/{trail[0].agent}, {trail[0].marker}) is in no table")
        if rid not in by_id:
            continue
        updates = [o for o in trail if o.kind == "update"]
        last = max((i for i, o in enumerate(updates) if o.acked), default=None)
        allowed = ({updates[last].value} | {o.value for o in updates[last + 1:]} if last is not None
                   else {""} | {o.value for o in updates})
        if by_id[rid].get("details", "") not in allowed:
            bad("lost_updates", f"{rid}: details {by_id[rid].get('details')!r}, allowed {sorted(allowed)}")

    linked: dict[tuple[str, str], str] = {}
    for h in history:
        if h["op"] not in _LINKS or not h["after"]:
            continue
        after = json.loads(h["after"])
        survivor = after.get("superseded_by")
        if survivor and after.get("status") in ("archived", "superseded"):
            linked[(h["record_id"], survivor)] = h["op"]
    for (rid, survivor), link in linked.items():
        if survivor not in ids and rid in ids:
            out["dangling_links"] += 1  # informational: its survivor was deleted since
        if rid in agent_of and survivor in agent_of and agent_of[rid] != agent_of[survivor]:
            bad("cross_agent", f"{link}: {rid} of agent {agent_of.get(rid)!r} into {survivor} of agent {agent_of.get(survivor)!r}")

    ops_by_kind = Counter(o.kind for o in ops if o.acked)
    return {
        **dict(out),
        "acknowledged": dict(ops_by_kind),
        "unacknowledged": dict(Counter(o.kind for o in ops if not o.acked)),
        "records": len(ids),
        "merges": sum(1 for op in linked.values() if op == "merge"),
        "supersedes": sum(1 for op in linked.values() if op == "supersede"),
        "decay_archives": sum(1 for h in history if h["op"] == "archive"),
        "dangling_links": out["dangling_links"],
        "history_repaired": sum(1 for h in history if h["actor"] == _REPAIR),
        "search_fixed_on_open": view.search_fixed_on_open,
        "cases": {k: v[:20] for k, v in cases.items()},
    }


def _said(op: LedgerOp | None) -> str:
    if op is None:
        return "none"
    return f"{'acknowledged' if op.acked else 'unacknowledged'} {op.kind} #{op.seq}"


class _Fixes(logging.Handler):
    """Catches the search table's "caught up" line: what the reopen had to repair there."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.fixed: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("search table caught up") and isinstance(record.args, tuple):
            written, removed = record.args
            if isinstance(written, int) and isinstance(removed, int):  # logged with %d
                self.fixed = {"written": self.fixed.get("written", 0) + written, "removed": self.fixed.get("removed", 0) + removed}


async def check_store(uri: str, ops: list[LedgerOp], *, embedder: Any = None) -> dict[str, Any]:
    """Reopen the store at `uri` (journals replayed, search table checked) and `judge` the ledger;
    also the job runs the history holds (by kind, with their errors)."""
    from memos.memory import MemoryOS

    logger = logging.getLogger("memos.store.lancedb.search_index")
    fixes = _Fixes()
    logger.addHandler(fixes)
    try:
        memory = await MemoryOS.open(uri, embedder=embedder)
    finally:
        logger.removeHandler(fixes)
    storage = memory.storage
    # every writer has stopped, so a write it left between its two commits is abandoned: the repair
    # pass the maintenance job makes once `REPAIR_GRACE` has passed, run now with its clock moved on
    await repair_history(storage, now=datetime.now(UTC) + REPAIR_GRACE)
    rows = {name: await storage.rows(name, None, columns=_columns(storage, name)) for name in memory.type_names}
    history = await storage.raw_history("true")
    search = storage.search.table
    search_ids = (await storage.read(search, search.query().select(["id"]).to_arrow))["id"].to_pylist() if search is not None else []
    report = judge(ops, StoreView(rows, history, search_ids, fixes.fixed))
    jobs = [json.loads(h["after"]) for h in history if h["op"] == "job" and h["after"]]
    report["job_runs"] = dict(Counter(j.get("job", "?") for j in jobs))
    report["job_errors"] = sum(len(j.get("errors") or []) for j in jobs)
    report["job_skipped"] = sum(int(j["skipped"]) for j in jobs if isinstance(j.get("skipped"), int))
    return report


def _columns(storage: Any, name: str) -> list[str]:
    wanted = ["id", "agent_id", "user_id", "status", "summary", "updated_at", "details", "source"]
    present = set(storage.type_table(name).result_columns)
    return [c for c in wanted if c in present]
