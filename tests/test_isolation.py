"""Tenant isolation as a property: random operation sequences over several scopes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memos import MemoryOS, Scope
from memos.exceptions import RecordNotFoundError
from memos.memtypes import Fact

SCOPES = [Scope("alice", "a1", "s1"), Scope("alice", "a2", "s1"), Scope("bob", "a1", "s1"), Scope("carol", "a1", "s9")]
WORDS = ["tea", "bank", "garden", "piano", "lisbon", "dog"]

ops = st.lists(st.tuples(st.sampled_from(["add", "update", "delete", "archive", "read"]), st.integers(0, 3),
                         st.integers(0, 50), st.sampled_from(WORDS)), min_size=4, max_size=14)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sequence=ops)
def test_no_operation_in_one_scope_returns_or_changes_another_scopes_data(tmp_path_factory, sequence):
    mem = MemoryOS.open_sync(tmp_path_factory.mktemp("iso"), embedder=None)
    owned: dict[str, Scope] = {}          # record id -> owner scope
    summaries: dict[str, str] = {}        # record id -> expected summary
    archived: set[str] = set()
    for op, who, pick, word in sequence:
        scope = SCOPES[who]
        ids = sorted(owned)
        target = ids[pick % len(ids)] if ids else None
        if op == "add" or target is None:
            [fact] = mem.add_sync(scope, Fact(subject=scope.user_id, summary=f"{scope.user_id} {word} {pick}"))
            owned[fact.id], summaries[fact.id] = scope, fact.summary
            continue
        mine = owned[target] == scope
        if op == "read":
            visible = {h.id for h in mem.search_sync(word, scope, k=50)} | {r.id for r in mem.list_sync(scope, "semantic", limit=None)}
            assert all(owned[i] == scope for i in visible if i in owned)
            assert all(e.user_id == scope.user_id and e.agent_id == scope.agent_id for e in mem.history_sync(scope))
            assert mem.counts_sync(scope)["semantic"] == sum(1 for i, s in owned.items() if s == scope and i not in archived)
            continue
        try:
            if op == "update":
                mem.update_sync(scope, "semantic", target, {"summary": f"{scope.user_id} changed {word}"})
                summaries[target] = f"{scope.user_id} changed {word}"
            elif op == "archive":
                mem.archive_sync(scope, "semantic", target)
                if mine:
                    archived.add(target)
            else:
                mem.delete_sync(scope, "semantic", target)
                if mine:
                    summaries.pop(target)
                    owned.pop(target)
                    archived.discard(target)
            assert mine, f"{op} by {scope} changed a record of {owned.get(target)}"
        except RecordNotFoundError:
            assert not mine, f"{op} by the owner {scope} failed"
    for record_id, summary in summaries.items():
        assert mem.get_sync(owned[record_id], "semantic", record_id).summary == summary
