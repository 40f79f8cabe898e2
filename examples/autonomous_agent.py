"""A long-running autonomous agent: it works through a task list over many steps, saves what it
learns, and a scheduler reflects on its work in the background.

    python examples/autonomous_agent.py                       # scripted model, offline
    python examples/autonomous_agent.py --steps 6             # a short run (what the tests use)
    python examples/autonomous_agent.py --model openai:gpt-4o-mini

Each step the agent gets the next task; its context holds its core blocks, what it recalled
for the task and the recent steps (older steps page out into the running summary). It records
results with memory tools; every few steps of simulated time the reflection job turns the
episodes into cited insights.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos import MemoryOS, Scope

TASKS = [
    "Find out which day the team standup moved to (it moved from Monday to Tuesday).",
    "Write down how to deploy the docs site: build, upload to the bucket, purge the CDN cache.",
    "Note that the staging database password rotates every 30 days.",
    "Summarise the customer complaint about slow exports (over 2 minutes for 10k rows).",
    "Record that the export fix shipped in release 4.2.",
    "Plan next week: profile exports, update the deploy guide, prepare the release notes.",
]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 4, 6, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for a model: saves each task's outcome with a tool, then reports; reflects when asked."""
    if info.output_tools:  # the reflection agent: cite the first episodes it was shown
        ids = re.findall(r"\[([0-9a-f]{32})\]", "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts))
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"insights": [
            {"kind": "fact", "subject": "team", "summary": "The team works on docs deploys and export performance",
             "importance": 0.7, "source_ids": ids[:2]}]})])
    last = messages[-1]
    if any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart("Done, and saved to memory.")])
    task = str(last.parts[-1].content)
    store = "procedural" if "how to" in task else "semantic"
    fields = ({"summary": task[:80], "steps": [s.strip() for s in task.split(":")[-1].split(",")]} if store == "procedural"
              else {"subject": "work", "summary": task})
    return ModelResponse(parts=[ToolCallPart("memory_insert", {"store": store, "fields": fields})])


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=len(TASKS) * 2)
    parser.add_argument("--model", help="a pydantic-ai model string instead of the scripted one")
    parser.add_argument("--db", type=Path)
    parser.add_argument("--embedder", default="local", help="'local' or 'none' (full-text only)")
    args = parser.parse_args(argv)

    clock = Clock()
    memory = MemoryOS.open_sync(args.db or Path(tempfile.mkdtemp()) / "memory", clock=clock,
                                embedder=None if args.embedder == "none" else args.embedder)
    me = Scope("ops", "worker", "run-1")
    model = args.model or FunctionModel(scripted)
    agent = memory.agent(model, me, budget=1500)
    jobs = memory.scheduler(model=model, mode="manual")
    jobs.add("reflect", Scope("ops", "worker"), every=timedelta(hours=2), options={"threshold": 2.0})
    totals = {"steps": 0, "saved": 0, "insights": 0}
    for step in range(args.steps):
        task = TASKS[step % len(TASKS)]
        reply = agent.chat_sync(f"Next task: {task}")
        ctx = agent.last.context
        totals["steps"] += 1
        totals["saved"] += "memory_insert" in agent.last.tool_calls
        print(f"step {step + 1:>2}: {reply}  [{ctx.total_tokens}/{ctx.budget} tokens, recalled {len(ctx.paged_in)}, "
              f"paged out {len(ctx.evicted)}]")
        clock.now += timedelta(hours=1)
        for outcome in jobs.run_due():
            totals["insights"] += outcome.get("insights", 0)
    jobs.shutdown()
    print(totals, memory.counts_sync(Scope("ops")))
    return totals


if __name__ == "__main__":
    main()
