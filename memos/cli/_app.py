"""The shared typer app and the options every command uses."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from memos.exceptions import MemosError

__all__ = ["DbOption", "JsonOption", "UserOption", "app", "console", "embedder_choice", "emit_json", "fail", "guarded", "note_empty",
           "note_unseen", "open_existing"]

app = typer.Typer(name="memos", help="An operating-system-style memory for long-running LLM agents.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from memos import __version__

        typer.echo(f"memos {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                help="Print memos' version and exit.")] = False) -> None:
    """An operating-system-style memory for long-running LLM agents."""

DbOption = Annotated[Path, typer.Option("--db", envvar="MEMOS_DB", help="The memos store (a directory or LanceDB URI).")]
UserOption = Annotated[str, typer.Option("--user", "-u", help="The user id of the scope.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a clear error and exit."""
    from rich.markup import escape

    console.print(f"[red]error:[/red] {escape(message)}")  # a message is text: `[mcp]` is not markup
    raise typer.Exit(code)


def emit_json(data: Any, out: str | Path | None = "-") -> None:
    """Write JSON to a path, or to stdout for '-' / None."""
    text = json.dumps(data, indent=2, default=str)
    if out in (None, "-", Path("-")):
        sys.stdout.write(text + "\n")
    else:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")


def guarded(fn: Any) -> Any:
    """Turn memos' own errors into a clean message and exit code 2 instead of a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemosError as exc:
            fail(" ".join(str(exc).split()))  # one line, whatever the message held
        except Exception as exc:
            message = _model_setup_error(exc)
            if message is None:
                raise
            fail(message)

    return wrapper


def _model_setup_error(exc: Exception) -> str | None:
    """One line for a model that cannot be used as configured (a missing API key, a provider extra
    not installed, a server that refuses the request), instead of a long traceback."""
    if isinstance(exc, ImportError):  # a provider's client that is not installed
        from ._model import missing_extra

        return missing_extra(exc)
    errors = sys.modules.get("pydantic_ai.exceptions")
    if errors is None or not isinstance(exc, (errors.UserError, errors.ModelAPIError)):
        return None
    return f"{type(exc).__name__}: {exc}"


def embedder_choice(value: str) -> str | None:
    """An --embedder option as MemoryOS.open takes it ("none" means full-text only)."""
    return None if value.lower() == "none" else value


def open_existing(db: Path, *, embedder: str | None = None, vault_key_file: Path | None = None) -> Any:
    """Open a store that must already exist (a local path is checked; a URI is taken as given)."""
    from memos.memory import MemoryOS

    if "://" not in str(db) and not Path(db).exists():
        fail(f"no memos store at {db} (create one with `memos init {db}`)")
    return MemoryOS.open_sync(db, embedder=embedder, vault_key_file=vault_key_file)


def note_empty(memory: Any, scope: Any, what: str) -> bool:
    """Say on stderr why `what` came back empty for `scope` (`memos.visibility`): what the scope
    sees and what the user holds under other agents. True when the scope sees nothing at all."""
    from rich.markup import escape

    from memos._sync import run_sync
    from memos.visibility import describe, empty_note, scope_counts

    counts = run_sync(scope_counts(memory, scope))
    note = empty_note(counts) or f"nothing matched among the {counts.seen} memories of {describe(scope)}"
    console.print(escape(f"{what}: {note}"), soft_wrap=True)
    return not counts.seen


def note_unseen(memory: Any, scope: Any, what: str) -> None:
    """Say on stderr why `scope` sees no memory, only when it sees none while its user holds some
    elsewhere (`memos.visibility`); a new user's empty memory needs no note."""
    from rich.markup import escape

    from memos._sync import run_sync
    from memos.visibility import empty_note, scope_counts

    counts = run_sync(scope_counts(memory, scope))
    note = empty_note(counts) if counts.user_total else None
    if note:
        console.print(escape(f"{what}: {note}"), soft_wrap=True)
