"""Background-job commands: `worker`, `reflect`, `consolidate`, `inspect jobs`, and `jobs` (list/add/pause/resume/remove).

`memos inspect jobs` (= `memos jobs list`) shows every schedule, its next run, and the last
runs with their results (from history). `inspect jobs` joins an `inspect` group registered
before this module, or creates the group; a later module should reuse it (`inspect_app`).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from memos._sync import run_sync
from memos.store.scope import Scope

from ._app import JsonOption, UserOption, app, console, embedder_choice, emit_json, fail, guarded

__all__ = ["inspect_app", "jobs_app", "show_jobs"]

jobs_app = typer.Typer(help="Scheduled background jobs (reflection, consolidation, decay, maintenance).", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")

PathOption = Annotated[Path, typer.Option("--db", "--path", envvar="MEMOS_DB", help="The memos store (a directory or LanceDB URI).")]
AgentOption = Annotated[str | None, typer.Option("--agent", help="Agent id of the scope.")]
SessionOption = Annotated[str | None, typer.Option("--session", help="Session id of the scope.")]
EmbedderOption = Annotated[str, typer.Option(help="'local', 'none' (full-text only) or a pydantic-ai embedding model.")]
ModelOption = Annotated[str | None, typer.Option(help="pydantic-ai model for reflection/consolidation (omit: raw mode).")]
# memos.jobs.scheduler (APScheduler, SQLAlchemy) loads inside the commands that use it, not for
# `memos --help`; tests/test_cli.py checks this list against scheduler.JOB_KINDS.
KINDS_HELP = "One of: reflect, consolidate, decay, maintain."


def _scheduler(db: Path) -> Any:
    from memos.jobs.scheduler import MemoryScheduler

    return MemoryScheduler(db, mode="manual")


def _run_now(db: Path, kind: str, scope: Scope, embedder: str, model: str | None, options: dict[str, Any]) -> dict[str, Any]:
    from memos.jobs.runs import run_job
    from memos.memory import MemoryOS

    memory = MemoryOS.open_sync(db, embedder=embedder_choice(embedder))
    return run_sync(run_job(memory, kind, scope, model=model, options=options, actor="cli"))


def _print_outcome(outcome: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(outcome)
        return
    shown = {k: v for k, v in outcome.items() if k not in ("ids", "by_type", "started_at")}
    typer.echo("  ".join(f"{k}={v}" for k, v in shown.items()))
    if outcome.get("errors"):
        raise typer.Exit(1)


@app.command()
@guarded
def worker(
    db: PathOption = Path("memos-data"),
    embedder: EmbedderOption = "local",
    model: ModelOption = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds (default: run until Ctrl-C).")] = None,
    jobs_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL of the job store (default: <db>.jobs.sqlite).")] = None,
    stop_file: Annotated[Path | None, typer.Option(help="Finish and exit once this file exists.")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level of the job log on stderr.")] = "INFO",
) -> None:
    """Run the scheduled jobs of a store in this process until stopped (Ctrl-C, --duration, --stop-file)."""
    import logging

    from memos.jobs.worker import run_worker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)

    result = run_worker(db, embedder=embedder_choice(embedder), model=model, duration=duration, jobs_url=jobs_url, stop_file=stop_file)
    console.print(f"worker stopped after {result['runs']} job runs")


@app.command()
@guarded
def reflect(
    db: PathOption = Path("memos-data"), user: UserOption = "default", agent: AgentOption = None, session: SessionOption = None,
    model: ModelOption = None, embedder: EmbedderOption = "local",
    force: Annotated[bool, typer.Option(help="Reflect even below the importance threshold.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Reflect now: write cited insights from the scope's recent episodes (needs --model)."""
    _print_outcome(_run_now(db, "reflect", Scope(user, agent, session), embedder, model, {"force": force}), as_json)


@app.command()
@guarded
def consolidate(
    db: PathOption = Path("memos-data"), user: UserOption = "default", agent: AgentOption = None, session: SessionOption = None,
    model: ModelOption = None, embedder: EmbedderOption = "local",
    decay: Annotated[bool, typer.Option(help="Also archive stale low-value records.")] = False,
    maintain: Annotated[bool, typer.Option(help="Also compact tables and build indexes.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Consolidate now: merge duplicates, supersede contradicted facts (and optionally decay / maintain)."""
    scope = Scope(user, agent, session)
    outcomes = [_run_now(db, "consolidate", scope, embedder, model, {})]
    if decay:
        outcomes.append(_run_now(db, "decay", scope, embedder, model, {}))
    if maintain:
        outcomes.append(_run_now(db, "maintain", scope, embedder, model, {}))
    if as_json:
        emit_json(outcomes if len(outcomes) > 1 else outcomes[0])
        return
    for outcome in outcomes:
        _print_outcome(outcome, False)


def show_jobs(db: PathOption = Path("memos-data"), embedder: EmbedderOption = "none", as_json: JsonOption = False,
              last: Annotated[int, typer.Option(help="Last runs to show.")] = 10) -> None:
    """Schedules, next runs, and the last runs with their results."""
    from memos.memory import MemoryOS

    with _scheduler(db) as scheduler:
        jobs = [j.as_dict() for j in scheduler.jobs()]
    memory = MemoryOS.open_sync(db, embedder=embedder_choice(embedder))
    runs = run_sync(_all_runs(memory, last))
    if as_json:
        emit_json({"jobs": jobs, "runs": runs})
        return
    typer.echo(f"{len(jobs)} scheduled job(s)")
    for j in jobs:
        state = "paused" if j["paused"] else f"next {j['next_run_time']}"
        typer.echo(f"  {j['id']:<40} every {j['every_seconds']:.0f}s  {state}")
    typer.echo(f"last {len(runs)} run(s)")
    for r in runs:
        counts = {k: v for k, v in r.items() if isinstance(v, int | float) and k != "seconds"}
        typer.echo(f"  {r['at']}  {r.get('job')} {r.get('scope')}  {r.get('note')}  {counts}  errors={len(r.get('errors', []))}")


async def _all_runs(memory: Any, last: int) -> list[dict[str, Any]]:
    from memos.store.scope import Where

    entries = await memory.storage.history_rows(Where().eq("op", "job").build())
    out = [{**(e.after or {}), "at": e.at.isoformat(), "actor": e.actor, "note": e.note} for e in entries]
    return out[-last:]


jobs_app.command("list")(guarded(show_jobs))


def _inspect_group() -> typer.Typer:
    """The `inspect` group (memos/cli/inspect.py's, if already registered; else one made here)."""
    for group in app.registered_groups:
        if group.name == "inspect" and group.typer_instance is not None:
            return group.typer_instance
    made = typer.Typer(help="Look inside a memos store.", no_args_is_help=True)
    app.add_typer(made, name="inspect")
    return made


inspect_app = _inspect_group()
inspect_app.command("jobs")(guarded(show_jobs))


@jobs_app.command("add")
@guarded
def add_job(
    kind: Annotated[str, typer.Argument(help=KINDS_HELP)],
    db: PathOption = Path("memos-data"), user: UserOption = "default", agent: AgentOption = None, session: SessionOption = None,
    every: Annotated[float, typer.Option(min=1, help="Interval in seconds.")] = 3600,
    embedder: EmbedderOption = "local", model: ModelOption = None,
) -> None:
    """Schedule a job for a scope (replaces an existing one of the same kind)."""
    from memos.jobs.scheduler import JOB_KINDS

    if kind not in JOB_KINDS:
        fail(f"unknown job kind {kind!r}; known kinds: {', '.join(JOB_KINDS)}")
    with _scheduler(db) as scheduler:
        info = scheduler.add(kind, Scope(user, agent, session), every=timedelta(seconds=every),
                             options={"embedder": embedder_choice(embedder), "model": model})
    console.print(f"scheduled {info.id} every {every:.0f}s, next run {info.next_run_time}")


def _change(action: str, kind: str, db: Path, scope: Scope) -> None:
    with _scheduler(db) as scheduler:
        getattr(scheduler, action)(kind, scope)
    console.print(f"{action}d {kind} for {scope}" if action != "remove" else f"removed {kind} for {scope}")


@jobs_app.command("pause")
@guarded
def pause_job(kind: str, db: PathOption = Path("memos-data"), user: UserOption = "default", agent: AgentOption = None,
              session: SessionOption = None) -> None:
    """Pause a scope's job (kept in the job store)."""
    _change("pause", kind, db, Scope(user, agent, session))


@jobs_app.command("resume")
@guarded
def resume_job(kind: str, db: PathOption = Path("memos-data"), user: UserOption = "default", agent: AgentOption = None,
               session: SessionOption = None) -> None:
    """Resume a paused job."""
    _change("resume", kind, db, Scope(user, agent, session))


@jobs_app.command("remove")
@guarded
def remove_job(kind: str, db: PathOption = Path("memos-data"), user: UserOption = "default", agent: AgentOption = None,
               session: SessionOption = None) -> None:
    """Remove a scope's job from the job store."""
    _change("remove", kind, db, Scope(user, agent, session))
