"""memos: an operating-system-style memory for long-running LLM agents.

    from memos import MemoryOS, Scope

    mem = MemoryOS.open_sync("memos-data")            # local LanceDB dir, offline embedder
    alice = Scope("alice")
    mem.ingest_sync(alice, [{"speaker": "alice", "text": "I moved to Lisbon in May."}])
    for hit in mem.search_sync("where does alice live?", alice, k=3):
        print(hit.memory_type, hit.text or hit.record.render())
"""

from __future__ import annotations

import os as _os

_os.environ.setdefault("LANCE_LOG", "error")

from .exceptions import (  # noqa: E402
    BudgetError,
    ConfigError,
    DuplicateIdError,
    EmbeddingDimensionError,
    InvalidFilterError,
    InvalidRecordError,
    MemoryOSError,
    MemosError,
    RecordChangedError,
    RecordNotFoundError,
    StoreFullError,
    StoreUnavailableError,
    UnknownMemoryTypeError,
)
from .ingest import Message  # noqa: E402
from .memory import MemoryOS, ScopedMemory  # noqa: E402
from .ranking import Hit, RankingPolicy  # noqa: E402
from .scope import Scope  # noqa: E402
from .storage import HistoryEntry  # noqa: E402
from .tokens import Tokenizer, tokenizer_for  # noqa: E402
from .model_backend import register_backend  # noqa: E402


def _pydantic_ai_backend() -> object:
    """The agents' implementation of what the kernel asks of a model (loaded on first use, so
    `import memos` does not import pydantic-ai). The package root is the one place that wires
    the floor above the kernel in; the kernel itself never imports `memos.agents`."""
    from .agents.backend import BACKEND

    return BACKEND


register_backend(_pydantic_ai_backend)  # type: ignore[arg-type]

__all__ = [
    "BudgetError",
    "ConfigError",
    "DuplicateIdError",
    "EmbeddingDimensionError",
    "HistoryEntry",
    "Hit",
    "InvalidFilterError",
    "InvalidRecordError",
    "MemoryOS",
    "MemoryOSError",
    "MemosError",
    "Message",
    "RankingPolicy",
    "RecordChangedError",
    "RecordNotFoundError",
    "Scope",
    "ScopedMemory",
    "StoreFullError",
    "StoreUnavailableError",
    "Tokenizer",
    "UnknownMemoryTypeError",
    "tokenizer_for",
]

__version__ = "0.1.0"
