"""The loopback OpenAI-compatible stub the tests serve: `memos.bench.openai_stub` (one stub for
the tests and `memos bench embedder --remote-stub`).

Run it as a script (`python tests/openai_stub.py`) to print its base URL and serve until killed.
"""

from __future__ import annotations

from memos.bench.openai_stub import REPLY, STUB_DIM, main, serve_stub, stub_vector

__all__ = ["REPLY", "STUB_DIM", "serve_stub", "stub_vector"]

if __name__ == "__main__":
    main()
