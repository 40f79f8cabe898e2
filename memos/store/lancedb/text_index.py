"""The full-text index memos builds over a table's `text` (its form: `memos.store.fulltext`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from lancedb.index import FTS

__all__ = ["text_index", "text_index_config"]


def text_index_config() -> Any:
    """The full-text index memos builds over a table's `text`: the simple tokenizer (see above),
    no positions (no phrase queries; a smaller index)."""
    return FTS(with_position=False)


def text_index(table: Any, *, replace: bool = True) -> Callable[[], Awaitable[Any]]:
    """The write that builds `table`'s full-text index (pass it to `Storage.write` or a retry)."""
    return lambda: table.create_index("text", config=text_index_config(), replace=replace)
