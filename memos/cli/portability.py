"""`memos export`, `memos import`, `memos forget`, `memos vault rotate-key`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memos._sync import run_sync
from memos.store.scope import Scope

from ._app import DbOption, JsonOption, UserOption, app, console, emit_json, fail, guarded, open_existing

if TYPE_CHECKING:
    from memos.memory import MemoryOS

vault_app = typer.Typer(help="Vault key management.", no_args_is_help=True)
app.add_typer(vault_app, name="vault")


def _open(db: Path, key_file: Path | None) -> MemoryOS:
    return open_existing(db, vault_key_file=key_file)


KeyOption = Annotated[Path | None, typer.Option("--key-file", help="Vault key file (default: the store's own <store>.vault.key, or $MEMOS_VAULT_KEY).")]


@app.command("export")
@guarded
def export_cmd(
    out: Annotated[Path, typer.Argument(help="JSONL file to write ('-' for stdout).")],
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str | None, typer.Option(help="Only this agent's records.")] = None,
    key_file: KeyOption = None,
) -> None:
    """Export a scope's records and history as JSON lines (vault secrets stay encrypted)."""
    from memos.portability import export_scope

    memory = _open(db, key_file)
    lines = list(run_sync(export_scope(memory, Scope(user, agent))))
    text = "\n".join(lines) + "\n"
    if str(out) == "-":
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"exported {len(lines) - 1} lines for user {user!r} to {out}")


@app.command("import")
@guarded
def import_cmd(
    file: Annotated[Path, typer.Argument(help="A JSONL export from `memos export`.")],
    db: DbOption = Path("memos-data"),
    user: Annotated[str | None, typer.Option("--user", "-u", help="Import into this user instead of the exported one.")] = None,
    source_key_file: Annotated[Path | None, typer.Option(help="The exporting store's vault key (when the key or user changes).")] = None,
    key_file: KeyOption = None,
    json_out: JsonOption = False,
) -> None:
    """Import an export (records re-embedded; vault secrets re-encrypted only when needed)."""
    from memos.crypto import decode_key
    from memos.memory import MemoryOS
    from memos.portability import import_lines

    if not file.exists():
        fail(f"{file} does not exist")
    from rich.progress import Progress

    memory = MemoryOS.open_sync(db, vault_key_file=key_file)
    source = decode_key(source_key_file.read_text(), str(source_key_file)) if source_key_file else None
    with Progress(console=console, disable=json_out) as progress:
        task = progress.add_task(f"importing {file.name}", total=None)
        counts = run_sync(import_lines(memory, file.read_text(encoding="utf-8").splitlines(), user_id=user, source_key=source,
                                       progress=lambda n, total: progress.update(task, completed=n, total=total)))
    emit_json(counts) if json_out else console.print(f"imported {counts['records']} records and {counts['history']} history rows")


@app.command()
@guarded
def forget(
    user: Annotated[str, typer.Option("--user", "-u", help="The user whose memories are deleted everywhere.")],
    db: DbOption = Path("memos-data"),
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Delete every record, history row and session state of a user, and purge old versions."""
    from memos.portability import forget_user

    memory = _open(db, None)
    if not any(memory.counts_sync(Scope(user), status=None).values()) and not memory.history_sync(Scope(user), limit=1):
        known = sorted({r["user_id"] for name in memory.type_names
                        for r in run_sync(memory.storage.rows(name, None, columns=["user_id"]))})
        fail(f"no memories of user {user!r} in {db}; nothing deleted (users here: {', '.join(map(repr, known)) or 'none'})", code=1)
    if not yes and not typer.confirm(f"Delete all memories of user {user!r} in {db}? This cannot be undone."):
        fail("cancelled", code=1)
    removed = run_sync(forget_user(memory, user))
    emit_json(removed) if json_out else console.print(f"forgot user {user!r}: {removed}")


@vault_app.command("rotate-key")
@guarded
def rotate_key(db: DbOption = Path("memos-data"), key_file: KeyOption = None) -> None:
    """Re-encrypt every vault secret under a new key (written to the key file when done)."""
    memory = _open(db, key_file)
    done = memory.rotate_vault_key_sync()
    console.print(f"re-encrypted {done} secrets; the new key is in {memory.key_file}")
