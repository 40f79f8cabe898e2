"""The demo: a scripted multi-session conversation played through the whole memory OS.

In raw mode (no model, the default) each user turn is recorded, the context is compiled under
the budget (active retrieval, paging, summary) and the scripted reply is recorded; the demo
reports per step what was paged in and out and the tokens used. Then it answers recall
questions from memory by search. With a model, the same user turns go to the real chat agent
and memory manager, and the questions are asked to the agent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memos.context.session import MemorySession
from memos.store.scope import Scope

from .exceptions import ConfigError
from .memory import MemoryOS
from .memtypes import Episode, VaultItem

__all__ = ["DemoAnswer", "DemoResult", "DemoStep", "load_script", "run_demo"]

SCRIPT_NAME = "demo_conversation.json"


@dataclass
class DemoStep:
    """One user turn of the demo and what the memory OS did for it."""

    session: int
    turn: int
    text: str
    reply: str
    paged_in: list[str]
    evicted: int
    tokens: int
    budget: int
    sections: dict[str, int]
    pressure: bool


@dataclass
class DemoAnswer:
    """A recall question, what memory answered and whether the expected word was in it."""

    question: str
    expect: str
    answer: list[str]
    found: bool


@dataclass
class DemoResult:
    steps: list[DemoStep] = field(default_factory=list)
    answers: list[DemoAnswer] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    path: str = ""


def load_script(path: str | Path | None = None) -> dict[str, Any]:
    """The demo conversation: `path`, or the one shipped in `examples/`."""
    file = Path(path) if path else Path(__file__).resolve().parent.parent / "examples" / SCRIPT_NAME
    if not file.exists():
        raise ConfigError(f"demo script {file} not found; pass --script FILE (see examples/{SCRIPT_NAME})")
    return json.loads(file.read_text(encoding="utf-8"))


class _ScriptClock:
    """The demo's clock: the scripted time of the current turn."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


async def run_demo(
    path: str | Path,
    *,
    budget: int = 1500,
    steps: int | None = None,
    model: Any = None,
    manager_model: Any = "same",
    embedder: Any = "local",
    script: dict[str, Any] | None = None,
    on_step: Callable[[DemoStep], None] | None = None,
) -> DemoResult:
    """Play the demo conversation into the store at `path` (see the module docstring).

    `manager_model` is the memory manager's model: by default the chat model; None runs none."""
    script = script or load_script()
    sessions = script["sessions"]
    clock = _ScriptClock(datetime.fromisoformat(sessions[0]["date"]))
    memory = await MemoryOS.open(path, embedder=embedder, clock=clock, model=model if isinstance(model, str) else None,
                                 vault_key_file=Path(str(path)).with_suffix(".key"))
    user, assistant = script.get("user", "user").lower(), script.get("assistant", "assistant")
    result = DemoResult(path=str(path))
    agent = None
    done = 0
    scope = Scope(user, "demo", "main")  # one long-running conversation; the sessions are days apart
    session = None if model is not None else await MemorySession.open(memory, scope, budget=budget)
    if model is not None:
        agent = memory.agent(model, scope, budget=budget, manager_model=model if manager_model == "same" else manager_model,
                             name=assistant)
    for number, block in enumerate(sessions, 1):
        start = datetime.fromisoformat(block["date"])
        turns = block["turns"]
        for index in range(0, len(turns), 2):
            if steps is not None and done >= steps:
                break
            clock.now = start + timedelta(minutes=2 * index)
            text = turns[index][1]
            if agent is not None:
                reply = await agent.chat(text)
                assert agent.last is not None
                ctx = agent.last.context
            else:
                assert session is not None
                turn = await session.record_turn("user", text, actor=user)
                await _raw_mode_vault(memory, scope, script, turn)
                ctx = await session.compile(text)
                reply = turns[index + 1][1] if index + 1 < len(turns) else ""
                clock.now += timedelta(minutes=1)
                await session.record_turn("assistant", reply, actor=assistant)
            step = DemoStep(session=number, turn=index // 2 + 1, text=text, reply=reply,
                            paged_in=[h.record.render() for h in ctx.paged_in], evicted=len(ctx.evicted),
                            tokens=ctx.total_tokens, budget=ctx.budget, sections=ctx.sections,
                            pressure=ctx.pressure_notice is not None)
            result.steps.append(step)
            done += 1
            if on_step:
                on_step(step)
        if agent is not None:
            await agent.flush()
    result.answers = await _recall(memory, Scope(user, "demo"), script.get("questions", []), agent)
    if agent is not None:
        await agent.flush()  # the questions are turns too: let the manager finish before counting
    result.counts = await memory.counts(Scope(user, "demo"))
    return result


async def _raw_mode_vault(memory: MemoryOS, scope: Scope, script: dict[str, Any], turn: Episode) -> None:
    """Without a model nobody decides to use the vault, so the script says which turn holds a secret.

    Storing it with the turn as its source scrubs the secret out of the turn (see MemoryOS.add)."""
    for item in script.get("vault", []):
        if item["secret"] in turn.summary:
            await memory.add(scope, VaultItem(caption=item["caption"], secret=item["secret"], source_ids=[turn.id],
                                              entry_type=item.get("entry_type", "other")), actor="demo")


async def _recall(memory: MemoryOS, scope: Scope, questions: list[dict[str, str]], agent: Any) -> list[DemoAnswer]:
    answers = []
    for q in questions:
        if agent is not None:
            lines = [await agent.chat(q["question"])]
        else:
            hits = await memory.search(q["question"], scope, k=3, types=memory.searchable_types)
            lines = ["\n".join(h.lines()) for h in hits]  # the three hits, each with the turns that complete it
        found = any(q["expect"].lower() in line.lower() for line in lines)
        answers.append(DemoAnswer(question=q["question"], expect=q["expect"], answer=lines, found=found))
    return answers
