"""The background jobs: reflect, consolidate, decay, maintain -- and how a scheduled run finds its store.

Each job takes a `MemoryOS`, a scope and options, does its work through the facade (so every
change is in history), and returns a result dict (counts, errors, skipped reason). `run_job`
wraps any of them: it times the run, logs it and appends one history row (`op="job"`,
`memory_type="job"`, the result as JSON in `after`) -- what `memos inspect jobs` shows.

Reflection trigger (Generative Agents): reflect when the importance of the episodes stored
since the last reflection adds up to `threshold`. GA used 150 on a 1-10 poignancy scale; our
importance is 0-1, i.e. poignancy / 10, so the default threshold is 15.0 (e.g. 30 episodes of
importance 0.5). It also reflects after `interval` when there is anything new at all, and never
twice within `debounce`. Its state (the last reflection time) is the meta key
`reflection:<user>:<agent>:<session>` (see `reflection_state`). Without a model (raw mode)
reflection is skipped and the result says so.

`run_scheduled_job` is the module-level function the persistent job store references: it runs
on the `MemoryOS` the scheduler was opened with (`MemoryOS.scheduler()`, `memos worker`), or
opens the store itself.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from memos._sync import run_sync
from memos.exceptions import ConfigError, MemosError
from memos.memtypes import Fact, MemoryRecord, Procedure
from memos.store.lancedb.errors import is_conflict
from memos.store.scope import Scope
from memos.telemetry import span

from .consolidation import ConsolidationPlan, Merge, Supersede, apply_plan, normalize_text, plan_consolidation
from .decay import DecayPolicy, apply_decay
from .partition import ScopeKey, by_scope, same_scope, stored_scope, user_jobs_lock
from .reflection_state import reflection_key, reflection_state, scope_key

if TYPE_CHECKING:
    from memos.memory import MemoryOS
    from memos.model_backend import ModelBackend
    from memos.store.protocol import Store

    from .scheduler import LiveStore

__all__ = [
    "ReflectionPolicy",
    "consolidate",
    "decay",
    "job_history",
    "maintain_tables",
    "reflect",
    "reflection_state",
    "refresh_tables",
    "run_job",
    "run_scheduled_job",
    "should_reflect",
]

log = logging.getLogger("memos.jobs.runs")


@dataclass(frozen=True)
class ReflectionPolicy:
    """When reflection runs for a scope."""

    threshold: float = 15.0
    """Summed importance (0-1 each) of new episodes that triggers a reflection (GA's 150 / 10)."""
    interval: timedelta | None = timedelta(hours=24)
    """Reflect anyway after this long if there is at least one new episode (None: never)."""
    debounce: timedelta = timedelta(minutes=10)
    """Never reflect twice for one scope within this window."""
    max_episodes: int = 100
    """How many of the newest new episodes the reflection agent reads."""


def should_reflect(accumulated: float, new_episodes: int, last_at: datetime | None, now: datetime,
                   policy: ReflectionPolicy = ReflectionPolicy()) -> tuple[bool, str]:
    """Pure trigger decision: (reflect?, why)."""
    if new_episodes == 0:
        return False, "no new episodes since the last reflection"
    if last_at is not None and now - last_at < policy.debounce:
        return False, f"debounced: last reflection {now - last_at} ago (< {policy.debounce})"
    if accumulated >= policy.threshold:
        return True, f"importance {accumulated:.2f} >= threshold {policy.threshold}"
    if policy.interval is not None and last_at is not None and now - last_at >= policy.interval:
        return True, f"interval {policy.interval} passed"
    return False, f"importance {accumulated:.2f} below threshold {policy.threshold}"


async def _new_episodes(memory: MemoryOS, scope: Scope, since: datetime | None) -> list[MemoryRecord]:
    return await memory.added_since(scope, memory.turn_type, since)


async def reflect(memory: MemoryOS, scope: Scope, *, model: Any = None, policy: ReflectionPolicy = ReflectionPolicy(),
                  force: bool = False) -> dict[str, Any]:
    """Write cited insights (facts, procedures) from the episodes since the last reflection.

    The trigger counts every new episode of `scope`; the model then reflects once per exact
    scope among them (`memos.jobs.partition`), and each insight is written in the scope of the
    episodes it cites, so a user-wide run never mixes two agents' or sessions' episodes."""
    now = memory.clock()
    state = await reflection_state(memory, scope)
    episodes = await _new_episodes(memory, scope, state["last_at"])
    accumulated = round(sum(e.importance for e in episodes), 6)
    result: dict[str, Any] = {"new_episodes": len(episodes), "importance": accumulated, "threshold": policy.threshold}
    if model is None:
        return {**result, "skipped": "raw mode: no model configured, reflection needs one"}
    due, why = should_reflect(accumulated, len(episodes), state["last_at"], now, policy)
    if not (due or (force and episodes)):
        return {**result, "skipped": why}
    shown = episodes[-policy.max_episodes:]
    records: list[MemoryRecord] = []
    for key, group in by_scope(shown).items():  # one reflection per exact scope: insights never mix agents or sessions
        owner, cited = Scope(*key), {e.id for e in group}
        for insight in await memory.backend.reflect(model, group, now=now):
            if not set(insight.source_ids) <= cited:
                continue  # the agent checks this too; a backend that does not cannot cite across scopes
            if insight.kind == "procedure":
                records.append(Procedure(steps=list(insight.steps), summary=insight.summary, importance=insight.importance,
                                         source_ids=list(insight.source_ids), tags=["reflection"], **owner.stamp()))
            else:
                records.append(Fact(subject=insight.subject or scope.user_id, source="reflection", valid_from=now,
                                    summary=insight.summary, importance=insight.importance,
                                    source_ids=list(insight.source_ids), tags=["reflection"], **owner.stamp()))
    for key, written in by_scope(records).items():
        await memory.add(Scope(*key), written, actor="reflection")
    await memory.set_state(reflection_key(scope), json.dumps({
        "last_at": now.isoformat(), "episodes": len(shown), "importance": accumulated, "insights": len(records)}))
    return {**result, "reason": why if due else "forced", "insights": len(records),
            "facts": sum(isinstance(r, Fact) for r in records), "procedures": sum(isinstance(r, Procedure) for r in records),
            "ids": [r.id for r in records]}


async def consolidate(memory: MemoryOS, scope: Scope, *, model: Any = None, types: Sequence[str] | None = None,
                      similarity: float = 0.95) -> dict[str, Any]:
    """Merge duplicates and supersede contradicted facts in every store of `scope` whose type
    declares `consolidate` (`types` narrows it; a named store that does not declare it is left alone).

    Only records of one exact scope are ever related (`memos.jobs.partition`): run for a user, it
    consolidates each of the user's (agent, session) scopes on its own."""
    totals: dict[str, Any] = {"merged": 0, "superseded": 0, "skipped": 0, "by_type": {}}
    for name in memory.types if types is None else types:
        if name not in memory.types or not memory.types[name].consolidate:
            continue
        records = await memory.list(scope, name, status="active", limit=None)
        plan = plan_consolidation(name, records, await memory.stored_vectors(scope, name), similarity=similarity,
                                  contradictions=model is None)
        if model is not None and memory.types[name].supersede_contradictions:
            plan = await _model_contradictions(memory.backend, model, plan, records, memory.clock())
        done = await apply_plan(memory, scope, plan)
        totals["by_type"][name] = done
        for key in ("merged", "superseded", "skipped"):
            totals[key] += done[key]
    if "entity" in memory.types and "relation" in memory.types:  # the entity graph: duplicates, contradictions
        totals["graph"] = await memory.graph.consolidate(scope)
    totals["mode"] = "model" if model is not None else "heuristic"
    return totals


async def _model_contradictions(backend: ModelBackend, model: Any, plan: ConsolidationPlan, records: list[MemoryRecord], now: datetime) -> ConsolidationPlan:
    """Ask the consolidation agent about facts sharing a subject in one exact scope; keep its
    supersede/update decisions (a decision relating two scopes is dropped)."""
    merged = {i for m in plan.merges for i in m.merged_ids}
    by_subject: dict[tuple[ScopeKey, str], list[MemoryRecord]] = {}
    for r in records:
        if r.id not in merged and r.status == "active":
            by_subject.setdefault((stored_scope(r), normalize_text(getattr(r, "subject", ""))), []).append(r)
    pairs = []
    for facts in by_subject.values():
        facts.sort(key=lambda r: (r.valid_from or r.created_at, r.id))
        pairs += [(a, b) for i, a in enumerate(facts) for b in facts[i + 1:]]
    if not pairs:
        return plan
    by_id = {r.id: r for r in records}
    for decision in await backend.decide_conflicts(model, pairs[:40], now=now):
        old, new = by_id.get(decision.old_id), by_id.get(decision.new_id)
        if old is None or new is None or not same_scope(old, new):
            continue
        if decision.action == "supersede":
            plan.supersedes.append(Supersede(old.id, new.id, new.valid_from or new.created_at, decision.reason or "model"))
        elif decision.action == "update":
            plan.merges.append(Merge(new.id, (old.id,), max(old.importance, new.importance),
                                     tuple(dict.fromkeys([*new.source_ids, *old.source_ids])),
                                     tuple(dict.fromkeys([*new.tags, *old.tags])), old.access_count + new.access_count,
                                     decision.reason or "model: update"))
    return plan


async def decay(memory: MemoryOS, scope: Scope, *, policy: DecayPolicy = DecayPolicy()) -> dict[str, Any]:
    """Archive stale low-value records of `scope` (see `memos.jobs.decay`)."""
    return await apply_decay(memory, scope, policy)


async def maintain_tables(memory: MemoryOS, scope: Scope | None = None, *, min_rows: int | None = None) -> dict[str, Any]:
    """Compact the tables and build the indexes they need (store-wide; the scope only labels the run)."""
    return await memory.maintain(min_rows=min_rows)


def _decay_policy(options: dict[str, Any]) -> DecayPolicy:
    fields = {k: v for k, v in options.items() if k in DecayPolicy.__dataclass_fields__}
    if fields.get("types") is not None:
        fields["types"] = tuple(fields["types"])
    return DecayPolicy(**fields)


def _reflection_policy(options: dict[str, Any]) -> ReflectionPolicy:
    fields: dict[str, Any] = {}
    for key in ("threshold", "max_episodes"):
        if key in options:
            fields[key] = options[key]
    for key in ("interval", "debounce"):
        if f"{key}_seconds" in options:
            value = options[f"{key}_seconds"]
            fields[key] = None if value is None else timedelta(seconds=value)
    return ReflectionPolicy(**fields)


async def run_job(memory: MemoryOS, kind: str, scope: Scope, *, model: Any = None, options: dict[str, Any] | None = None,
                  actor: str = "scheduler") -> dict[str, Any]:
    """Run one job, log it, and append its outcome to history; returns the outcome."""
    if kind not in ("reflect", "consolidate", "decay", "maintain"):
        raise ConfigError(f"unknown job kind {kind!r}; known kinds: reflect, consolidate, decay, maintain")
    opts = dict(options or {})
    started = memory.clock()
    clock_start = time.perf_counter()
    outcome: dict[str, Any] = {"job": kind, "scope": str(scope), "started_at": started.isoformat(), "errors": []}
    # one job of a user at a time in every process of the store (the scheduler, `memos worker`, a run by hand), and none
    # across a forget: two reflections at once each wrote the same insights; a later run starts from what the earlier wrote
    # (maintain is store-wide: its key is no user's, as "jobs<US>maintain" was a user called "maintain")
    async with memory.exclusive("maintain" if kind == "maintain" else user_jobs_lock(scope.user_id)):
        await memory.refresh()
        await _run_kind(memory, kind, scope, model, opts, outcome)
        outcome["seconds"] = round(time.perf_counter() - clock_start, 3)
        summary = {k: v for k, v in outcome.items() if isinstance(v, int | float | str) and k not in ("scope", "started_at")}
        log.info("job %s for %s: %s", kind, scope, summary)
        await memory.record_job(scope, kind, outcome, actor=actor,  # (its history row is the user's too)
                                note="failed" if outcome["errors"] else outcome.get("skipped", "ok"))
    return outcome


async def _run_kind(memory: MemoryOS, kind: str, scope: Scope, model: Any, opts: dict[str, Any], outcome: dict[str, Any]) -> None:
    """The job's own work, its results and errors into `outcome`."""
    with span("memos.job", job=kind, user_id=scope.user_id):
        try:
            if kind == "reflect":
                outcome.update(await reflect(memory, scope, model=model, policy=_reflection_policy(opts), force=opts.get("force", False)))
            elif kind == "consolidate":
                outcome.update(await consolidate(memory, scope, model=model, similarity=opts.get("similarity", 0.95),
                                                 types=opts.get("types")))
            elif kind == "decay":
                outcome.update(await decay(memory, scope, policy=_decay_policy(opts)))
            else:
                outcome.update(await maintain_tables(memory, scope, min_rows=opts.get("min_rows")))
        except (MemosError, OSError, RuntimeError) as exc:
            if isinstance(exc, MemosError) or is_conflict(exc):  # an expected race or a storage failure: one line
                log.warning("job %s for %s stopped: %s: %s", kind, scope, type(exc).__name__, exc)
            else:  # a defect: logged with its traceback
                log.exception("job %s for %s failed", kind, scope)
            outcome["errors"].append(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # recorded in history and logged with its traceback, then reported in the outcome
            log.exception("job %s for %s failed", kind, scope)
            outcome["errors"].append(f"{type(exc).__name__}: {exc}")


async def refresh_tables(storage: Store) -> None:
    """Point every table handle at its latest version, so a job sees other processes' writes.

    LanceDB handles opened without a read-consistency interval stay on the version they
    loaded; a worker that runs for hours would otherwise consolidate a stale snapshot.
    """
    await storage.refresh()


async def job_history(memory: MemoryOS, scope: Scope | None = None, *, kind: str | None = None, limit: int | None = 20) -> list[dict[str, Any]]:
    """The newest job outcomes (oldest first), optionally for one scope and kind."""
    entries = await memory.job_rows(scope, kind=kind)
    out = [{**(e.after or {}), "at": e.at.isoformat(), "actor": e.actor, "note": e.note} for e in entries]
    return out[-limit:] if limit else out


# --- how a scheduled job finds its store ---------------------------------------------------------

def run_scheduled_job(kind: str, uri: str, user_id: str, agent_id: str | None, session_id: str | None,
                      options: dict[str, Any], *, live: LiveStore | None = None) -> dict[str, Any]:
    """The job store's entry point (plain, picklable arguments; runs in a scheduler thread).

    `live`: what the scheduler running it holds (`memos.jobs.scheduler.LiveStore`): the open memory
    (and model) it was given, else the stores it opened for its jobs so far; without it (a call
    by hand) the store is opened for this run."""
    from memos.memory import MemoryOS

    scope = Scope(user_id, agent_id, session_id)
    model = options.get("model")
    if live is not None and live.memory is not None:
        memory, model = live.memory, live.model if live.model is not None else model
    else:
        embedder = options.get("embedder", "local")
        opened = live.opened if live is not None else {}
        if embedder not in opened:
            opened[embedder] = MemoryOS.open_sync(uri, embedder=embedder)
        memory = opened[embedder]
    if not isinstance(memory, MemoryOS):
        raise ConfigError(f"a scheduler's memory must be a MemoryOS, got {type(memory).__name__}")
    outcome = run_sync(run_job(memory, kind, scope, model=model, options=options))
    return {"job_id": f"{kind}:{scope_key(scope)}", **outcome}
