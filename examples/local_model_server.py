"""memos with a local OpenAI-compatible model server (Ollama, vLLM, llama.cpp server).

    pip install -e ".[local,openai]"
    ollama serve & ollama pull llama3.2
    python examples/local_model_server.py --base-url http://localhost:11434/v1 --model llama3.2

Without --base-url it runs offline with pydantic-ai's TestModel in place of the server.
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

from memos import MemoryOS, Scope


def local_model(base_url: str, name: str) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel  # needs the `openai` extra
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url, api_key="local"))


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="e.g. http://localhost:11434/v1 (Ollama) or http://localhost:8000/v1 (vLLM)")
    parser.add_argument("--model", default="llama3.2")
    parser.add_argument("--path", default=None)
    args = parser.parse_args(argv)
    if args.base_url:
        model = local_model(args.base_url, args.model)
    else:
        from pydantic_ai.models.test import TestModel

        model = TestModel(call_tools=[], custom_output_text="(offline stand-in for the local server) Hello!")
    memory = MemoryOS.open_sync(args.path or tempfile.mkdtemp(), model=args.model)  # token counting for this model
    agent = memory.agent(model, Scope("me", "local"), budget=3000, manager_model=model if args.base_url else None)
    reply = agent.chat_sync("Hi! I'm Sam and I keep bees.")
    print(reply, agent.last.context.sections)
    agent.flush_sync()
    return reply


if __name__ == "__main__":
    main()
