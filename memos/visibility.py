"""Why a scope sees nothing: the counts behind an empty search, context or graph.

An agent sees its own records and its user's shared ones (stored without an agent; see
`memos.store.scope`). Records another agent of the user wrote stay out of its view, and a
query that comes back empty says nothing about them by itself. `scope_counts` counts what
the scope sees and what the user holds under each agent; `empty_note` turns that into the
one line a command prints: "0 memories for user alice, agent assistant; 800 for alice under
other agents (chef: 800); pass --agent to see them".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memos.store.scope import Scope, Where

if TYPE_CHECKING:
    from memos.memory import MemoryOS

__all__ = ["ScopeCounts", "describe", "empty_note", "scope_counts"]


@dataclass(frozen=True)
class ScopeCounts:
    """Active memories (every store searched by default) a scope sees, and its user's by agent."""

    scope: Scope
    seen: int
    """What `scope` sees: its agent's own records and the user's shared ones."""
    by_agent: dict[str, int] = field(default_factory=dict)
    """The user's records per agent id ("" is the shared records), in any session."""

    @property
    def user_total(self) -> int:
        return sum(self.by_agent.values())

    @property
    def elsewhere(self) -> dict[str, int]:
        """The user's records under agents this scope does not see."""
        agent = self.scope.agent_id
        if agent is None:
            return {}
        return {a: n for a, n in self.by_agent.items() if a not in (agent, "")}


def describe(scope: Scope) -> str:
    """The scope in words: "user alice, agent assistant, session s1" (an agent "" is "shared records only")."""
    parts = [f"user {scope.user_id}"]
    if scope.agent_id:
        parts.append(f"agent {scope.agent_id}")
    elif scope.agent_id == "":
        parts.append("shared records only")
    if scope.session_id is not None:
        parts.append(f"session {scope.session_id or '(none)'}")
    return ", ".join(parts)


async def scope_counts(memory: MemoryOS, scope: Scope) -> ScopeCounts:
    """What `scope` sees, and its user's active records per agent (two reads of each store)."""
    stores = memory.searchable_types
    seen = await memory.counts(scope)
    where = Where(Scope(scope.user_id)).status_in(("active",)).build()
    by_agent: Counter[str] = Counter()
    for name in stores:
        for row in await memory.storage.rows(name, where, columns=["agent_id"]):
            by_agent[row["agent_id"] or ""] += 1
    return ScopeCounts(scope, sum(seen[name] for name in stores), dict(sorted(by_agent.items())))


def empty_note(counts: ScopeCounts) -> str | None:
    """One line on why `counts.scope` sees nothing (None when it sees something)."""
    if counts.seen:
        return None
    scope = counts.scope
    if not counts.user_total:
        return f"nothing is stored for user {scope.user_id} (0 memories under any agent)"
    note = f"0 memories for {describe(scope)}"
    if counts.elsewhere:
        others = ", ".join(f"{agent}: {n}" for agent, n in counts.elsewhere.items())
        note += (f"; {sum(counts.elsewhere.values())} for {scope.user_id} under other agents ({others}), "
                 "which this agent does not see: pass --agent to see them")
    else:
        note += f"; {counts.user_total} for {scope.user_id} in other sessions"
    return note
