"""An unknown keyword option of an entry point that passes its options on is a memos `ConfigError`
naming it and the options there are, not Python's raw TypeError from the call behind it."""

from __future__ import annotations

import pytest
from pydantic_ai.models.test import TestModel

from memos.exceptions import ConfigError


async def test_an_unknown_session_option_names_itself_and_the_accepted_ones(mem, alice, snapshot):
    before = await snapshot(mem)
    with pytest.raises(ConfigError, match=r"MemoryOS.session.*'nope'.*budget, .*retrieval_k") as info:
        await mem.session(alice, nope=1)
    assert not isinstance(info.value, TypeError)
    with pytest.raises(ConfigError, match=r"'colour', 'nope'"):
        await mem.session(alice, nope=1, colour="red", budget=4000)
    assert await snapshot(mem) == before  # nothing opened, nothing seeded
    assert (await mem.session(alice, budget=4000, retrieval_k=5)).budget.total == 4000


def test_an_unknown_agent_option_names_itself_and_the_accepted_ones(mem, alice):
    with pytest.raises(ConfigError, match=r"MemoryOS.agent.*'manage_evry'.*manage_every") as info:
        mem.agent(TestModel(), alice, manage_evry=2)
    assert not isinstance(info.value, TypeError)
