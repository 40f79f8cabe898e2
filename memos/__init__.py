"""memos: an operating-system-style memory for long-running LLM agents.

    from . import MemoryOS, Scope

    mem = MemoryOS.open_sync("memos-data")            # local LanceDB dir, offline embedder
    alice = Scope("alice")
    mem.ingest_sync(alice, [{"speaker": "alice", "text": "I moved to Lisbon in May."}])
    for hit in mem.search_sync("where does alice live?", alice, k=3):
        print(hit.memory_type, hit.text or hit.record.render())
"""

from __future__ import annotations

import os as _os

# LanceDB's settings, before anything of memos loads it. Its Rust log level: the variable this
# LanceDB reads is LANCEDB_LOG (LANCE_LOG, which memos set alone before, is not read: its WARN
# lines about retried compactions reached users' stderr); LANCE_LOG is honoured as its value.
_os.environ.setdefault("LANCE_LOG", "error")
_os.environ.setdefault("LANCEDB_LOG", _os.environ["LANCE_LOG"] or "error")
# Opt in now to LanceDB's coming default (vector index statistics without the IVF centroids):
# building a vector index again on a large table (a purge does, `Storage._scrub_table`) otherwise
# logs a deprecation WARN naming this variable, even at the error level.
_os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")

from memos.store.scope import Scope  # noqa: E402

from .exceptions import (  # noqa: E402
    BudgetError,
    ConfigError,
    DuplicateIdError,
    EmbeddingDimensionError,
    InvalidFilterError,
    InvalidRecordError,
    MemoryOSError,
    MemosError,
    OverloadedError,
    RecordChangedError,
    RecordNotFoundError,
    RecordSupersededError,
    ScopeError,
    StoreFullError,
    StoreUnavailableError,
    UnknownMemoryTypeError,
)

# The facade and what it pulls in (LanceDB, pyarrow, tiktoken) load on first use of a name below,
# so `import memos` (and `memos --help`) costs no storage import (PEP 562 module __getattr__).
_LAZY = {
    "Message": ".ingest", "MemoryOS": ".memory", "ScopedMemory": ".memory", "Hit": ".retrieval.ranking",
    "RankingPolicy": ".retrieval.ranking", "HistoryEntry": ".store.history", "Tokenizer": ".tokens", "tokenizer_for": ".tokens",
    "Client": ".client.sync", "AsyncClient": ".client.async_",
    "QueueLimits": ".batching",
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'memos' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AsyncClient",
    "BudgetError",
    "Client",
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
    "OverloadedError",
    "QueueLimits",
    "RankingPolicy",
    "RecordChangedError",
    "RecordNotFoundError",
    "RecordSupersededError",
    "Scope",
    "ScopeError",
    "ScopedMemory",
    "StoreFullError",
    "StoreUnavailableError",
    "Tokenizer",
    "UnknownMemoryTypeError",
    "tokenizer_for",
]

__version__ = "0.1.0"
