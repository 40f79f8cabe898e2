"""Benchmarks: retrieval quality on LOCOMO and speed/memory at scale (`memos bench ...`).

The names below load on first use (PEP 562), so `memos.bench.embedder` runs without the
storage layer (LanceDB, pyarrow, pydantic) installed."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Conversation", "Question", "load_locomo", "run_qa_bench", "run_retrieval_bench"]

_LAZY = {"Conversation": ".locomo", "Question": ".locomo", "load_locomo": ".locomo", "run_qa_bench": ".qa", "run_retrieval_bench": ".retrieval"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'memos.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
