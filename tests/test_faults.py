"""`memos bench faults`: the checker counts each kind of broken promise, and a short run with
SIGKILLed servers, two server processes and a consolidating worker breaks none."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import pytest

from memos.bench.fault_check import LedgerOp, StoreView, judge
from memos.bench.faults import run_fault_bench
from memos.cli.bench import FAULT_COUNTS

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_IDS = itertools.count()


def _row(rid: str, agent: str = "a0", details: str = "", source: str = "") -> dict:
    return {"id": rid, "agent_id": agent, "user_id": "u0", "status": "active", "summary": "s", "updated_at": T0,
            "details": details, "source": source}


def _history(rid: str, op: str = "add", actor: str = "api:k", agent: str = "a0", after: dict | None = None) -> dict:
    return {"id": f"h{next(_IDS)}", "record_id": rid, "op": op, "actor": actor, "agent_id": agent, "memory_type": "semantic",
            "after": json.dumps(after or {}), "at": T0}


def _add(seq: int, rid: str, marker: str, acked: bool | None = True) -> LedgerOp:
    return LedgerOp(seq, "add", 0, "u0", "a0", marker=marker, record_id=rid if acked else "", acked=acked)


def test_a_store_that_kept_every_promise_counts_zero():
    ops = [_add(1, "r1", "mk-1"), LedgerOp(2, "update", 0, "u0", "a0", record_id="r1", value="v2", acked=True),
           LedgerOp(3, "update", 0, "u0", "a0", record_id="r1", value="v3", acked=None),
           _add(4, "r2", "mk-2"), LedgerOp(5, "delete", 0, "u0", "a0", record_id="r2", acked=True),
           _add(6, "", "mk-3", acked=None)]  # an add whose answer never came, and that did not happen
    view = StoreView({"semantic": [_row("r1", details="v3", source="mk-1")]}, [_history("r1"), _history("r1", "update")], ["r1"])
    report = judge(ops, view)
    assert {k: report[k] for k in FAULT_COUNTS} == dict.fromkeys(FAULT_COUNTS, 0), report["cases"]
    assert report["acknowledged"] == {"add": 2, "update": 1, "delete": 1}


def test_each_broken_promise_is_counted():
    ops = [_add(1, "lost", "mk-1"),
           _add(2, "gone", "mk-2"), LedgerOp(3, "delete", 0, "u0", "a0", record_id="gone", acked=True),
           _add(4, "upd", "mk-4"), LedgerOp(5, "update", 0, "u0", "a0", record_id="upd", value="new", acked=True),
           _add(6, "", "mk-6", acked=None)]
    rows = [_row("gone", source="mk-2"), _row("upd", details="old", source="mk-4"),
            _row("twice", source="mk-6"), _row("twice", source="mk-6"),  # an unacknowledged add stored twice
            _row("bare"), _row("repaired"), _row("survivor", agent="a1"), _row("merged")]
    history = [_history("gone"), _history("upd"), _history("twice"), _history("repaired"),
               _history("repaired", actor="repair"), _history("survivor", agent="a1"), _history("merged"),
               _history("merged", "merge", after={"status": "archived", "superseded_by": "survivor"}),
               _history("deleted-half", agent="a0"), _history("deleted-half", "update")]
    report = judge(ops, StoreView({"semantic": rows}, history, ["gone", "ghost"]))
    assert report["lost"] == 1  # "lost": acknowledged, in no table
    assert report["resurrected"] == 2  # "gone" back in the table, "ghost" only in the search table
    assert report["duplicated"] == 2  # "twice": its id twice and its marker on two rows
    assert report["lost_updates"] == 1  # "upd" holds "old" after "new" was acknowledged
    assert report["without_history"] == 1  # "bare"
    assert report["duplicate_history"] == 1  # "repaired": a repair row beside the writer's own
    assert report["orphaned_history"] == 2  # both rows of "deleted-half"
    assert report["cross_agent"] == 1  # "merged" (a0) into "survivor" (a1)


@pytest.mark.slow
async def test_a_short_fault_run_reads_back_every_acknowledged_write(tmp_path):
    report = await run_fault_bench(10, clients=8, kills=2, job_every=1.5, max_requests=3_000, path=tmp_path / "run")
    print(json.dumps(report, indent=1))
    assert report["kills"] >= 1 and report["restarts"] == report["kills"], report
    assert sum(report["acknowledged"].values()) > 30 and sum(report["job_runs"].values()) > 3, report
    assert report["server_tracebacks"] == report["worker_tracebacks"] == report["job_errors"] == 0, report
    broken = {k: report[k] for k in FAULT_COUNTS if report[k]}
    assert not broken, report["cases"]
