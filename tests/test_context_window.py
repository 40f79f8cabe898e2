"""The pure context-window planner: never over budget, drops in the documented order."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memos.memtypes import CoreBlock

from memos.context.paging import newest_lines
from memos.context.window import DROP_ORDER, BudgetPolicy, SectionSizes, plan_context, render_system_prompt
from memos.exceptions import BudgetError, ConfigError
from memos.tokens import tokenizer_for

POLICY = BudgetPolicy(total=4000)


def sizes(**kw) -> SectionSizes:
    base = dict(instructions=200, core=300, metadata=30, summary=0, turns=[50], memories=[], notice=40)
    return SectionSizes(**{**base, **kw})


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(256, 9000),
    instructions=st.integers(0, 3000),
    core=st.integers(0, 3000),
    metadata=st.integers(0, 200),
    summary=st.integers(0, 3000),
    turns=st.lists(st.integers(1, 1500), min_size=1, max_size=60),
    memories=st.lists(st.integers(1, 800), max_size=40),
    notice=st.integers(0, 80),
)
def test_plan_never_exceeds_the_budget(total, instructions, core, metadata, summary, turns, memories, notice):
    policy = BudgetPolicy(total=total)
    s = SectionSizes(instructions, core, metadata, summary, turns, memories, notice)
    try:
        plan = plan_context(s, policy)
    except BudgetError:
        assert instructions + core + turns[-1] > total
        return
    kept_turns = sum(turns[plan.evict:])
    assert plan.sections["turns"] == kept_turns
    assert plan.total <= total
    assert plan.evict < len(turns), "the newest turn is never evicted"
    assert plan.sections["memories"] == sum(memories[i] for i in plan.memories)
    assert plan.summary_tokens <= summary


def test_documented_drop_order():
    assert DROP_ORDER == ("memories", "summary", "turns", "metadata")


def test_instructions_core_and_newest_turn_are_never_dropped():
    with pytest.raises(BudgetError, match="budget is 4000"):
        plan_context(sizes(instructions=2000, core=1900, turns=[10, 200]), POLICY)


def test_memories_give_way_before_the_summary_and_lowest_ranked_first():
    # the summary keeps its share; memories fill what is left, best-ranked first, skipping one too big
    plan = plan_context(sizes(summary=400, turns=[100] * 5, memories=[900, 2000, 600, 500, 300]), POLICY)
    assert plan.summary_tokens == 400
    assert plan.memories[:2] == [0, 2]
    assert 1 not in plan.memories
    assert plan.total <= POLICY.total


def test_summary_is_cut_to_its_share():
    plan = plan_context(sizes(summary=5000), POLICY)
    assert plan.summary_tokens == int((4000 - 200 - 300 - 30) * POLICY.summary_share)


def test_metadata_goes_only_when_nothing_else_can():
    plan = plan_context(sizes(instructions=2000, core=1950, metadata=30, turns=[40]), POLICY)
    assert plan.metadata is False and plan.total <= 4000
    assert plan_context(sizes(), POLICY).metadata is True


def test_no_eviction_below_the_threshold_and_down_to_the_target_above_it():
    rest = 4000 - 200 - 300 - 30
    cap = int(rest * POLICY.turns_share)
    under = [cap * 0.85 // 10] * 10
    plan = plan_context(sizes(turns=[int(x) for x in under]), POLICY)
    assert plan.evict == 0 and plan.pressure  # 85% of the share: warned, not evicted
    over = [cap // 10] * 10
    plan = plan_context(sizes(turns=over), POLICY)
    assert plan.evict > 0
    assert sum(over[plan.evict:]) <= POLICY.evict_to * cap
    assert sum(over[plan.evict - 1:]) > POLICY.evict_to * cap, "evicts no more than needed"


def test_a_huge_newest_turn_evicts_everything_else_but_stays():
    plan = plan_context(sizes(turns=[100, 100, 3000]), POLICY)
    assert plan.evict == 2 and plan.sections["turns"] == 3000


def test_bad_policies_are_config_errors():
    with pytest.raises(ConfigError):
        BudgetPolicy(total=100)
    with pytest.raises(ConfigError):
        BudgetPolicy(turns_share=0.9, summary_share=0.2)
    with pytest.raises(ConfigError):
        BudgetPolicy(evict_to=0.8, warn_at=0.7)
    with pytest.raises(ConfigError):
        plan_context(sizes(turns=[]), POLICY)


def test_policy_for_model_caps_the_context_size():
    assert BudgetPolicy.for_model("openai:gpt-4o").total == 8000
    assert BudgetPolicy.for_model("openai:gpt-4o", cap=200_000).total == 128_000
    assert BudgetPolicy.for_model("some-unknown-model", cap=3000).total == 3000


def test_render_shows_each_block_with_used_and_limit_and_no_fixed_date():
    block = CoreBlock(label="human", value="Name: Alice", limit=500, read_only=True)
    text = render_system_prompt(instructions="INSTR", blocks=[block], counts={"semantic": 3}, last_reflection=None,
                                summary="- earlier", memories=[], notice="PRESSURE", now=datetime(2031, 2, 3, tzinfo=UTC))
    assert '<human chars="11/500" read_only="true">' in text
    assert "Name: Alice" in text and "semantic: 3" in text and "- earlier" in text and "PRESSURE" in text
    assert "2031-02-03" in text
    assert "recalled_memories" not in text  # empty sections are left out


_TOKENIZER = tokenizer_for("gpt-4o")
_LINE = st.lists(st.sampled_from(["- [2023-05-08] Ana:", "went", "to", "Lisbon", "!", "\n", "  ", "羽毛球", "ok.", "...", "#"]),
                 max_size=12).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, max_size=25), tokens=st.integers(-1, 120), at_least=st.integers(0, 1))
def test_the_newest_lines_that_fit_are_what_dropping_the_oldest_one_by_one_leaves(lines, tokens, at_least):
    """`newest_lines` (the running summary's cut) counts the text a few times, not once per line
    dropped, and keeps exactly what the one-by-one loop kept."""
    count = _TOKENIZER.count
    naive = list(lines)
    while len(naive) > at_least and count("\n".join(naive)) > tokens:
        naive.pop(0)
    assert newest_lines(lines, tokens, count, at_least=at_least) == naive
