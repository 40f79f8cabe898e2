"""`memos demo` and `memos chat`: the memory OS in action."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memos._sync import run_sync
from memos.store.lancedb._malloc import freeze_startup_objects
from memos.store.scope import Scope

from ._app import DbOption, JsonOption, UserOption, app, emit_json, fail, guarded, note_unseen
from ._model import choose_model

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from memos.demo import DemoStep

out = Console()
BaseUrlOption = Annotated[str | None, typer.Option(
    "--base-url", envvar="MEMOS_BASE_URL",
    help="An OpenAI-compatible server's URL (e.g. http://localhost:11434/v1 for Ollama): the model is called "
         "through its chat-completions API.")]


def _bar(used: int, total: int, width: int = 24) -> str:
    filled = min(width, round(width * used / max(total, 1)))
    colour = "red" if used > 0.9 * total else "yellow" if used > 0.7 * total else "green"
    return f"[{colour}]{'█' * filled}[/{colour}]{'░' * (width - filled)} {used:>5}/{total}"


def _print_step(step: DemoStep) -> None:
    head = f"[bold]s{step.session}·{step.turn:02d}[/bold] {_bar(step.tokens, step.budget)}"
    moved = f"paged in {len(step.paged_in):>2}" + (f", [magenta]evicted {step.evicted}[/magenta]" if step.evicted else "")
    warn = " [yellow]⚠ pressure[/yellow]" if step.pressure else ""
    out.print(f"{head}  {moved}{warn}  [dim]{escape(step.text[:60])}[/dim]")
    for line in step.paged_in[:2]:
        out.print(f"        [cyan]↳ {escape(line[:100])}[/cyan]")


@app.command()
@guarded
def demo(
    path: Annotated[Path | None, typer.Option("--path", help="Store directory (default: a fresh temp dir).")] = None,
    budget: Annotated[int, typer.Option(min=256, help="Token budget of the working context.")] = 1500,
    steps: Annotated[int | None, typer.Option(min=1, help="Stop after this many user turns.")] = None,
    model: Annotated[str | None, typer.Option(help="A pydantic-ai model (e.g. openai:gpt-4o-mini); default raw mode.")] = None,
    script: Annotated[Path | None, typer.Option(help="Another conversation script (JSON like examples/demo_conversation.json).")] = None,
    base_url: BaseUrlOption = None,
    json_out: JsonOption = False,
) -> None:
    """Play a three-session conversation through the memory OS, offline, and answer recall questions."""
    from memos.demo import load_script, run_demo

    store = path or Path(tempfile.mkdtemp(prefix="memos-demo-")) / "memory"
    data = load_script(script)
    if not json_out:
        mode = f"model {model}" if model else "raw mode (no model, no API key)"
        out.print(f"[bold]memos demo[/bold] — {data['title']}: {mode}; budget {budget} tokens; store {store}")
    chosen = _model(model, base_url) if model else None
    result = run_sync(run_demo(store, budget=budget, steps=steps, model=chosen, script=data,
                               manager_model=None if model == "test" else "same",
                               on_step=None if json_out else _print_step))
    if json_out:
        emit_json({"steps": [s.__dict__ for s in result.steps], "answers": [a.__dict__ for a in result.answers],
                   "counts": result.counts, "path": result.path})
        return
    table = Table(title="Recall from memory", show_lines=False)
    table.add_column("question")
    table.add_column("memory's answer (its 3 hits, each with the turns that complete it)")
    table.add_column("ok")
    for answer in result.answers:
        # all it judged, uncut; memory's text is text, not markup (`[vault item ...]`)
        table.add_row(escape(answer.question), escape("\n".join(answer.answer)), "✓" if answer.found else "✗")
    out.print(table)
    peak = max((s.tokens for s in result.steps), default=0)
    evicted = sum(s.evicted for s in result.steps)
    out.print(f"{len(result.steps)} steps, peak {peak}/{budget} tokens, {evicted} turns paged out into the summary; "
              f"stored: {result.counts}; recall {sum(a.found for a in result.answers)}/{len(result.answers)}")


@app.command()
@guarded
def chat(
    model: Annotated[str, typer.Option(help="A pydantic-ai model string, e.g. openai:gpt-4o-mini or 'test' (offline).")],
    db: DbOption = Path("memos-data"),
    user: UserOption = "default",
    agent: Annotated[str, typer.Option(help="Agent id of the scope.")] = "assistant",
    session: Annotated[str, typer.Option(help="Session id (a new id starts a fresh working context).")] = "default",
    budget: Annotated[int, typer.Option(min=256, help="Token budget of the working context.")] = 4000,
    message: Annotated[list[str] | None, typer.Option("--message", "-m", help="Send these messages and exit (no REPL).")] = None,
    base_url: BaseUrlOption = None,
) -> None:
    """Chat with a memory-backed agent (/help lists the commands; /exit leaves)."""
    from memos.memory import MemoryOS

    picked = choose_model(model, base_url)
    chosen = picked.model
    memory = MemoryOS.open_sync(db, model=model if model != "test" else None)
    bot = memory.agent(chosen, Scope(user, agent, session), budget=budget, manager_model=None if model == "test" else chosen,
                       approve=lambda call: typer.confirm(f"Reveal vault item {call.args}?", default=False))
    note_unseen(memory, Scope(user, agent), f"chat as agent {agent}")  # what it cannot see, said before the first turn
    inputs = iter(message) if message else None
    freeze_startup_objects()  # no full collection's pause inside a reply (memos.store.lancedb._malloc)
    while True:
        try:
            text = next(inputs) if inputs is not None else typer.prompt("you", prompt_suffix="> ")
        except (StopIteration, EOFError, KeyboardInterrupt, typer.Abort):
            break
        command = text.strip().split(maxsplit=1)[0] if text.strip().startswith("/") else None
        if command in ("/exit", "/quit"):
            break
        if command == "/context":
            out.print(bot.last.context.sections if bot.last else "no turn yet: the context is compiled when you send a message")
            continue
        if command is not None:  # never sent to the model
            if command != "/help":
                out.print(f"unknown command {command}")
            out.print(CHAT_HELP)
            continue
        try:
            reply = bot.chat_sync(text)
        except Exception as exc:
            unreachable = picked.explain(exc)
            if unreachable is None:
                raise
            fail(unreachable)
        ctx = bot.last.context if bot.last else None
        out.print(f"[bold green]{bot.name}>[/bold green] {reply}")
        if ctx:
            out.print(f"[dim]{_bar(ctx.total_tokens, ctx.budget)} paged in {len(ctx.paged_in)}, evicted {len(ctx.evicted)}[/dim]")
    bot.flush_sync()


CHAT_HELP = ("commands: /context  tokens per section of the last prompt · /help  this list · /exit  leave "
             "(anything else is sent to the agent)")


def _model(name: str, base_url: str | None = None) -> Model | str:
    """A model as pydantic-ai takes it ('test': an offline TestModel); with `base_url`, the
    chat-completions API of an OpenAI-compatible server (Ollama, vLLM, llama.cpp) serving `name`."""
    return choose_model(name, base_url).model
