"""`memos import` checks every line before it writes anything, and maintenance survives any
history row already stored.

A bad line (not a JSON object, a record that does not validate as the public API would check it,
a history row without the fields the audit trail reads) is a memos error naming the line; the
store hashes the same afterwards. The CLI prints one `error:` line. A malformed history row
written around those checks (straight through the storage layer) is skipped and counted by the
maintenance run, never a TypeError.
"""

from __future__ import annotations

import json

import pytest
from conftest import store_hashes
from memos.memtypes import Fact
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.cli import app
from memos.exceptions import MemosError
from memos.jobs.runs import run_job
from memos.portability import export_scope, import_lines

runner = CliRunner()
HEADER = json.dumps({"kind": "header", "format": "memos-export/1", "scope": {"user_id": "alice"}, "types": []})
GOOD_ROW = {"id": "h1", "at": "2024-01-01T00:00:00+00:00", "op": "add", "memory_type": "semantic", "record_id": "r1",
            "actor": "user", "user_id": "alice", "agent_id": "", "session_id": "", "before": None, "after": None, "note": None}
GOOD_RECORD = {"id": "r1", "user_id": "alice", "subject": "Alice", "summary": "Alice likes tea"}


async def state(mem: MemoryOS) -> dict[str, str]:
    """Row count and a hash of every row of every table, history and meta included."""
    return await store_hashes(mem)


def record(**changes: object) -> str:
    return json.dumps({"kind": "record", "memory_type": "semantic", "record": {**GOOD_RECORD, **changes}})


def history(**changes: object) -> str:
    row = {k: v for k, v in {**GOOD_ROW, **changes}.items() if v != "<absent>"}
    return json.dumps({"kind": "history", "row": row})


BAD_LINES = {
    "a JSON list": ("[1, 2]", "expected a JSON object"),
    "a JSON string": ('"hello"', "expected a JSON object"),
    "not JSON": ("{nope", "not JSON"),
    "record as a list": (json.dumps({"kind": "record", "memory_type": "semantic", "record": [1, 2]}), "needs a 'record' object"),
    "record without a store": (json.dumps({"kind": "record", "record": GOOD_RECORD}), "needs a 'memory_type'"),
    "record of an unknown store": (json.dumps({"kind": "record", "memory_type": "recipes", "record": GOOD_RECORD}), "unknown memory type"),
    "record with a wrong field": (record(importance="very"), "invalid semantic record"),
    "record with an unknown field": (record(colour="blue"), "invalid semantic record"),
    "record without a user": (record(user_id=""), "user_id must not be empty"),
    "record with a bad id": (record(id="bad id!"), "not a valid id"),
    "record with lone surrogates": (record(summary="tea \ud800"), "invalid semantic record: summary|unpaired surrogates"),
    "record with a huge text": (record(summary="x" * 1_000_001), "invalid semantic record|the limit is 1,000,000"),
    "record dated outside the years": (record(valid_from="0001-01-01T00:00:00+05:00"), "outside the years 1 to 9999"),
    "history row as a list": (json.dumps({"kind": "history", "row": [1]}), "needs a 'row' object"),
    "history row with only an id": (json.dumps({"kind": "history", "row": {"id": "h1"}}), "this one has no record_id, memory_type, user_id, op, at"),
    "history row without a user": (history(user_id=None), "this one has no user_id"),
    "history row without an op": (history(op="<absent>"), "this one has no op"),
    "history row without a time": (history(at=None), "this one has no at"),
    "history row with a bad time": (history(at="yesterday"), "not an ISO date"),
    "history row with a number for a time": (history(at=5), "must be a datetime"),
    "history row with a number for a user": (history(user_id=7), "user_id must be a string"),
    "history row with an unknown field": (history(colour="blue"), "unknown fields"),
    "history row with a bad after": (history(after="[1, 2]"), "after must be a record as JSON"),
    "an unknown kind": (json.dumps({"kind": "note"}), "unknown kind 'note'"),
}


@pytest.fixture
async def filled(mem):
    await mem.add(Scope("alice"), Fact(subject="Alice", summary="Alice sails"))
    return mem


@pytest.mark.parametrize("bad", list(BAD_LINES.values()), ids=list(BAD_LINES))
async def test_a_bad_line_is_an_error_naming_it_and_nothing_is_written(filled, bad):
    line, message = bad
    before = await state(filled)
    lines = [HEADER, record(id="r2", summary="Alice likes coffee"), history(id="h2", record_id="r2"), line, record()]
    with pytest.raises(MemosError, match=message) as refused:
        await import_lines(filled, lines)
    assert str(refused.value).startswith("line 4: ")
    assert await state(filled) == before  # the good lines before it were not written either


async def test_a_good_export_still_imports_and_a_rehomed_one_fills_in_the_user(filled, tmp_path, embedder, clock):
    lines = list(await export_scope(filled, Scope("alice")))
    other = await MemoryOS.open(tmp_path / "other", embedder=embedder, clock=clock, vault_key_file=tmp_path / "o.key")
    assert (await import_lines(other, lines))["history"] == 1
    counts = await import_lines(other, [HEADER, record(), history(user_id=None)], user_id="bob")  # --user supplies it
    assert counts == {"records": 1, "history": 1, "reassigned": 0}
    assert [h.op for h in await other.history(Scope("bob"))] == ["add"]


def test_the_cli_prints_one_error_line_and_writes_nothing(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    db = tmp_path / "db"
    mem = MemoryOS.open_sync(db, embedder=embedder)
    mem.add_sync(Scope("alice"), Fact(subject="Alice", summary="Alice sails"))
    before = run_sync(state(mem))
    for name, (line, message) in {"list": BAD_LINES["a JSON list"], "list record": BAD_LINES["record as a list"],
                                  "bare row": BAD_LINES["history row with only an id"]}.items():
        bad = tmp_path / f"{name}.jsonl"
        bad.write_text("\n".join([HEADER, record(id="r2"), line]) + "\n")
        out = runner.invoke(app, ["import", str(bad), "--db", str(db)])
        assert out.exit_code == 2 and (out.exception is None or isinstance(out.exception, SystemExit)), out.output
        errors = [text for text in out.output.splitlines() if text.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: line 3: "), out.output
        assert "Traceback" not in out.output
    assert run_sync(state(MemoryOS.open_sync(db, embedder=embedder))) == before


async def test_maintenance_skips_and_counts_malformed_history_rows_already_stored(mem, alice):
    [fact] = await mem.add(alice, Fact(subject="Alice", summary="Alice likes tea"))
    await mem.update(alice, "semantic", fact.id, {"summary": "Alice likes green tea"})
    bare = {name: None for name in ("at", "op", "memory_type", "record_id", "actor", "user_id", "agent_id", "session_id",
                                    "before", "after", "note")}
    await mem.storage.append_history([  # written around every check, as an old import did
        {**bare, "id": "bare-1"},
        {**bare, "id": "bare-2", "record_id": fact.id, "user_id": "alice", "agent_id": "assistant", "session_id": "s1"},
        {**bare, "id": "bare-3", "record_id": fact.id, "op": "update", "user_id": "alice"},
    ])
    out = await mem.maintain()
    assert out["history_malformed"] == 3 and "history_repaired" not in out
    outcome = await run_job(mem, "maintain", alice)
    assert outcome["errors"] == [] and outcome["history_malformed"] == 3
    assert [h.op for h in await mem.history(alice, fact.id) if h.op] == ["add", "update"]
    assert [h.record.summary for h in await mem.search("tea", alice)] == ["Alice likes green tea"]
