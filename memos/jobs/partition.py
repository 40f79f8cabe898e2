"""A job's records, split by the exact scope each record carries.

A job may be run for a wide scope (`Scope("alice")` spans all of Alice's agents and
sessions), but every decision it makes about two records -- they are duplicates, the newer
fact supersedes the older, these episodes support an insight, these entities are one -- relates
records of one *exact* scope only: the same `user_id`, `agent_id` and `session_id` as stored.
An id stored as "" is a scope of its own, not a wildcard: a fact an agent wrote outside any
session never merges with the same words written inside one, nor with another agent's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from memos.store.scope import Scope

__all__ = ["ScopeKey", "Scoped", "by_scope", "record_scope", "same_scope", "stored_scope", "user_jobs_lock"]


class Scoped(Protocol):
    """Anything stored with the three scope ids (every memory record)."""

    user_id: str
    agent_id: str
    session_id: str


S = TypeVar("S", bound=Scoped)
ScopeKey = tuple[str, str, str]
"""(user_id, agent_id, session_id) exactly as stored: what a job groups records by."""


def stored_scope(record: Scoped) -> ScopeKey:
    """The three ids `record` was stored with (an unset id is the empty string, never None)."""
    return record.user_id, record.agent_id or "", record.session_id or ""


def record_scope(record: Scoped) -> Scope:
    """The exact scope `record` was written in: where a job writes what it derives from it."""
    return Scope(*stored_scope(record))


def same_scope(*records: Scoped) -> bool:
    """True when all `records` carry the identical (user, agent, session)."""
    return len({stored_scope(r) for r in records}) <= 1


def by_scope(records: Iterable[S]) -> dict[ScopeKey, list[S]]:
    """`records` grouped by their exact scope, each group in the order given, groups sorted by key.

    Pure: records need not carry a valid user (a planner's test records carry none)."""
    groups: dict[ScopeKey, list[S]] = {}
    for record in records:
        groups.setdefault(stored_scope(record), []).append(record)
    return dict(sorted(groups.items()))


def user_jobs_lock(user_id: str) -> str:
    """The key (`MemoryOS.exclusive`) every job run for `user_id` holds (`memos.jobs.runs.run_job`)
    and forgetting the user holds too (`memos.portability.forget_user`): one job of a user at a
    time in every process of the store, and none across a forget (a reflection under way wrote
    insights drawn from the forgotten user's episodes after they were erased)."""
    return f"jobs\x1f{user_id}"
