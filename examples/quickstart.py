"""The README's 20-line example, runnable: python examples/quickstart.py [--model openai:gpt-4o-mini]."""

import argparse
import tempfile

from pydantic_ai.models.test import TestModel

from memos import MemoryOS, Scope
from memos.memtypes import Fact

parser = argparse.ArgumentParser()
parser.add_argument("--model", default=None, help="a pydantic-ai model; default: an offline test model")
parser.add_argument("--path", default=None)
args = parser.parse_args()
model = args.model or TestModel(call_tools=[], custom_output_text="How about a peanut-free pad thai?")

# --- the README example starts here ---
memory = MemoryOS.open_sync(args.path or tempfile.mkdtemp())   # local LanceDB + local embedder, offline
alice = Scope("alice", agent_id="assistant")

# raw mode: store turns and facts, search them within a token budget
memory.ingest_sync(alice, [{"speaker": "alice", "text": "I moved to Lisbon in May."}])
memory.add_sync(alice, Fact(subject="Alice", summary="Alice is allergic to peanuts", importance=0.9))
for hit in memory.search_sync("what should I not cook for Alice?", alice, budget_tokens=200):
    print(hit.memory_type, round(hit.score, 3), hit.record.render())

# an agent on it: core memory, paging, memory tools, a background memory manager
agent = memory.agent(model, alice, manager_model=args.model)
print(agent.chat_sync("Any dinner ideas for tonight?"))
print(agent.last.context.sections)                              # tokens per prompt section
agent.flush_sync()
