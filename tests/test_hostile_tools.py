"""Fuzzed tool arguments: each memory tool succeeds as documented or refuses, changing nothing."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_ai import ModelRetry

from memos.agents import ALL_TOOL_NAMES, memory_toolset
from memos.agents.deps import MemoryDeps
from memos import MemoryOS, Scope
from memos._sync import run_sync
from memos.exceptions import MemosError
from memos.memtypes import Fact

SCOPE = Scope("alice", "bot", "s1")
odd_text = st.one_of(st.text(max_size=40), st.sampled_from(["", " ", "\x00", "' OR 1=1 --", "\ud800", "é" * 3000,
                                                             "human", "persona", "2024-13-45", "9" * 400]))
values = st.one_of(odd_text, st.integers(-10**20, 10**20), st.floats(allow_nan=True), st.none(), st.booleans(),
                   st.lists(odd_text, max_size=3), st.dictionaries(odd_text, odd_text, max_size=3))
ARGS = {
    "core_memory_append": {"label": odd_text, "text": odd_text},
    "core_memory_replace": {"label": odd_text, "old": odd_text, "new": odd_text},
    "core_memory_rethink": {"label": odd_text, "new_value": odd_text},
    "memory_search": {"query": odd_text, "stores": st.one_of(st.none(), st.lists(odd_text, max_size=2)),
                      "since": st.one_of(st.none(), odd_text), "until": st.one_of(st.none(), odd_text), "k": st.integers(-5, 80)},
    "conversation_search": {"query": st.one_of(st.none(), odd_text), "since": st.one_of(st.none(), odd_text), "limit": st.integers(-5, 80)},
    "memory_insert": {"store": st.sampled_from(["semantic", "episodic", "procedural", "resource", "core", "vault", "nope", ""]),
                      "fields": st.dictionaries(st.sampled_from(["subject", "summary", "steps", "title", "importance", "tags", "user_id", "x"]),
                                                values, max_size=4)},
    "vault_store": {"caption": odd_text, "secret": odd_text, "entry_type": st.sampled_from(["credential", "other", "bogus"]),
                    "sensitivity": st.sampled_from(["low", "high", "secret!"])},
    "vault_reveal": {"item_id": odd_text},
    "entity_lookup": {"name": odd_text, "at": st.one_of(st.none(), odd_text)},
    "relation_add": {"subject": odd_text, "predicate": odd_text, "object": odd_text, "object_is_entity": st.booleans(),
                     "exclusive": st.booleans(), "since": st.one_of(st.none(), odd_text, st.sampled_from(["2024-05-01", "1900-01-01"]))},
    "relation_close": {"relation_id": odd_text, "when": st.one_of(st.none(), odd_text)},
}
assert set(ARGS) == set(ALL_TOOL_NAMES)


def state(mem: MemoryOS) -> dict:
    async def grab():
        out = {}
        for name in mem.type_names:
            rows = await mem.storage.rows(name, None)
            out[name] = sorted((r["id"], r["text"], r["status"]) for r in rows)
        out["history"] = len(await mem.storage.history_rows(None))
        return out
    return run_sync(grab())


_STORES: dict[str, tuple] = {}


def store(factory) -> tuple:
    """One store for the whole property run (each call compares its own before/after)."""
    if "fuzz" not in _STORES:
        mem = MemoryOS.open_sync(factory.mktemp("fuzz"), embedder=None, vault_key_file=factory.mktemp("k") / "v.key")
        session = mem.session_sync(SCOPE)
        run_sync(session.record_turn("user", "hello"))
        mem.add_sync(SCOPE, Fact(subject="Alice", summary="Alice likes tea"))
        _STORES["fuzz"] = (mem, memory_toolset(MemoryDeps(session)).tools)
    return _STORES["fuzz"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_tool_either_works_or_refuses_without_changing_anything(tmp_path_factory, data):
    mem, tools = store(tmp_path_factory)
    name = data.draw(st.sampled_from(sorted(ARGS)))
    args = data.draw(st.fixed_dictionaries(ARGS[name]))
    before = state(mem)
    try:
        result = run_sync(tools[name].function(**args))
    except (ModelRetry, MemosError, ValidationError, TypeError) as exc:
        assert state(mem) == before, f"{name}({args}) failed with {exc!r} but changed data"
        return
    assert isinstance(result, str)
    after = state(mem)
    if name in ("memory_search", "conversation_search", "vault_reveal", "entity_lookup"):
        assert after == before
    if name == "vault_store":
        shown = re.sub(r"[0-9a-f]{32}", "<id>", result)  # a short secret can occur inside a random id
        assert args["secret"] not in shown or args["secret"] in args["caption"] + name + "<id>stored vault item credential other low high"
