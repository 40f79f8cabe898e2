"""Scheduled reflection and consolidation, offline.

An agent's conversation is written turn by turn; a scheduler (persistent job store next to
the memory) reflects when enough important things have happened, and consolidates every
hour of (simulated) time. The clock is simulated, so a week passes in seconds.

    python examples/scheduled_reflection.py                 # scripted model, offline
    python examples/scheduled_reflection.py --steps 12      # shorter run (what the tests use)
    python examples/scheduled_reflection.py --model openai:gpt-4o-mini   # a real model

Without a model (`--raw`) reflection is skipped and the job says so; consolidation still runs.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos import MemoryOS, Scope
from memos.memtypes import Fact

TURNS = [
    ("I ran 8 km before work today.", 0.6),
    ("My knee hurt a bit after the run.", 0.7),
    ("Signed up for the Lisbon half marathon in May!", 0.9),
    ("I stretch for ten minutes after every run now.", 0.6),
    ("Bought new running shoes with more cushioning.", 0.5),
    ("Long run on Sunday: 16 km, felt great.", 0.7),
]


class Clock:
    """Simulated time: each step is one hour."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for a model, for both background agents.

    Reflection: turns the episodes it was shown into two cited insights. Consolidation: says a
    newer "moved to" fact supersedes an older "lives in" one, and keeps everything else.
    """
    prompt = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
    tool = info.output_tools[0]
    if "decisions" in tool.parameters_json_schema.get("properties", {}):
        pairs = re.findall(r"old \[(\w{32})\][^\n]*?: ([^\n]*)\n\s*new \[(\w{32})\][^\n]*?: ([^\n]*)", prompt)
        decisions = [{"old_id": o, "new_id": n, "action": "supersede" if "lives in" in old and "moved to" in new else "add",
                      "reason": "moved"} for o, old, n, new in pairs]
        return ModelResponse(parts=[ToolCallPart(tool.name, {"decisions": decisions})])
    ids = re.findall(r"\[([0-9a-f]{32})\]", prompt)
    insights = [
        {"kind": "fact", "subject": "user", "summary": "The user is training for the Lisbon half marathon",
         "importance": 0.8, "source_ids": ids[:3]},
        {"kind": "procedure", "summary": "The user's after-run routine", "steps": ["stretch ten minutes", "check the knee"],
         "importance": 0.6, "source_ids": ids[-3:]},
    ]
    return ModelResponse(parts=[ToolCallPart(tool.name, {"insights": insights})])


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="memory directory (default: a temporary one)")
    parser.add_argument("--steps", type=int, default=48, help="simulated hours")
    parser.add_argument("--model", help="a pydantic-ai model string instead of the scripted one")
    parser.add_argument("--raw", action="store_true", help="no model at all (reflection is skipped)")
    parser.add_argument("--embedder", default="none", help="'local' for vectors, 'none' for full-text only (fast)")
    args = parser.parse_args(argv)

    db = args.db or Path(tempfile.mkdtemp()) / "memory"
    clock = Clock()
    mem = MemoryOS.open_sync(db, embedder=None if args.embedder == "none" else args.embedder, clock=clock)
    user = Scope("runner", "coach")
    model = None if args.raw else (args.model or FunctionModel(scripted_model))
    scheduler = mem.scheduler(model=model, mode="manual")  # manual: we drive it with the simulated clock
    scheduler.add("reflect", user, every=timedelta(hours=1), options={"threshold": 3.0})  # 3.0 = 30 on GA's 1-10 scale
    scheduler.add("consolidate", user, every=timedelta(hours=6))

    totals = {"turns": 0, "insights": 0, "merged": 0, "superseded": 0, "errors": 0}
    for step in range(args.steps):
        text, importance = TURNS[step % len(TURNS)]
        mem.ingest_sync(user, [{"speaker": "user", "text": text, "importance": importance, "id": f"msg-{step}"}])
        if step == 2:
            mem.add_sync(user, Fact(subject="user", summary="user lives in Porto"))
        if step == 5:
            mem.add_sync(user, Fact(subject="user", summary="user moved to Lisbon"))
        totals["turns"] += 1
        clock.now += timedelta(hours=1)
        for outcome in scheduler.run_due():
            totals["insights"] += outcome.get("insights", 0)
            totals["merged"] += outcome.get("merged", 0)
            totals["superseded"] += outcome.get("superseded", 0)
            totals["errors"] += len(outcome.get("errors", []))
            if any(outcome.get(k) for k in ("insights", "merged", "superseded", "errors")) or "raw" in str(outcome.get("skipped")):
                shown = {k: outcome[k] for k in ("job", "insights", "merged", "superseded", "skipped", "reason", "errors")
                         if outcome.get(k)}
                print(f"{clock.now:%a %H:%M}  {shown}")
    scheduler.shutdown()
    print("insights now in memory:")
    for record in [*mem.list_sync(user, "semantic", status=None), *mem.list_sync(user, "procedural", status=None)]:
        print(f"  [{record.status}] {record.render()}   <- cites {len(record.source_ids)} records")
    print(totals)
    return totals


if __name__ == "__main__":
    main()
