"""Mount memos on your own pydantic-ai agent (a capability: instructions, chosen memory tools, recorded turns).

    python examples/mount_on_your_agent.py                    # scripted model, offline
    python examples/mount_on_your_agent.py --model openai:gpt-4o-mini
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memos.agents import memory_capability
from memos import MemoryOS, Scope
from memos.memtypes import Fact


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Reads the recalled memories from its instructions; saves a new preference with a tool."""
    if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
        flight = next((line for line in (info.instructions or "").splitlines() if "flight" in line), "no flight found")
        return ModelResponse(parts=[TextPart(f"From memory: {flight.strip()}. I saved your seat preference.")])
    return ModelResponse(parts=[ToolCallPart("memory_insert", {"store": "semantic",
                                                               "fields": {"subject": "Alice", "summary": "Alice prefers window seats"}})])


async def main(model: object, path: str) -> str:
    memory = await MemoryOS.open(path)
    alice = Scope("alice", "travel-helper")
    await memory.add(alice, Fact(subject="Alice", summary="Alice's flight to Oslo leaves 3 March at 07:40"))

    chat = Scope("alice", "travel-helper", "chat")
    memos = await memory_capability(memory, chat, tools="write")  # default "read": search only; vault=True, manager=...
    agent = Agent(model, capabilities=[memos], instructions="You are Alice's travel helper.")  # your agent
    result = await agent.run("When is my flight? And please remember I like window seats.")
    print(result.output)
    print("semantic memory now:", [f.summary for f in await memory.list(alice, "semantic")])
    print("recorded turns:", [t.summary for t in await memory.list(chat, "episodic")])
    return result.output


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--path", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.model or FunctionModel(scripted), args.path or tempfile.mkdtemp()))
