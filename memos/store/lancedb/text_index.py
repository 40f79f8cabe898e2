"""The full-text index memos builds over a table's `text` (its form: `memos.store.fulltext`)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from lancedb.index import FTS

__all__ = ["has_tokenizer", "index_tokens", "text_index", "text_index_config"]

_BETWEEN = "zqxjmemosdocbreakzqxj"
"""A word put between texts tokenized in one call (the tokenizer's cost is mostly per call): it
comes out of the tokenizer as itself, and a text that holds it is tokenized alone."""


def text_index_config() -> Any:
    """The full-text index memos builds over a table's `text`: the simple tokenizer (see above),
    no positions (no phrase queries; a smaller index)."""
    return FTS(with_position=False)


def text_index(table: Any, *, replace: bool = True) -> Callable[[], Awaitable[Any]]:
    """The write that builds `table`'s full-text index (pass it to `Storage.write` or a retry)."""
    return lambda: table.create_index("text", config=text_index_config(), replace=replace)


@functools.cache
def has_tokenizer() -> bool:
    """Whether `index_tokens` can tokenize: pylance is installed (it is not imported here)."""
    return importlib.util.find_spec("lance") is not None


def index_tokens(texts: Sequence[str | None]) -> list[list[str]]:
    """Each text's tokens as the full-text index (`text_index_config`) splits it: Lance's own
    tokenizer with the same settings, repeats kept, in order (no text: no tokens). Needs pylance
    (the `serve` extra; `has_tokenizer`)."""
    import lance

    out: list[list[str]] = [[] for _ in texts]
    together = []
    for i, text in enumerate(texts):
        if text and _BETWEEN in text.lower():
            out[i] = [t.text for t in lance.tokenize(text)]
        elif text:
            together.append(i)
    if together:
        parts: list[list[str]] = [[]]
        for token in lance.tokenize(f" {_BETWEEN} ".join(texts[i] or "" for i in together)):
            if token.text == _BETWEEN:
                parts.append([])
            else:
                parts[-1].append(token.text)
        if len(parts) != len(together):  # cannot happen as the tokenizer splits words; then one by one
            parts = [[t.text for t in lance.tokenize(texts[i] or "")] for i in together]
        for i, tokens in zip(together, parts, strict=True):
            out[i] = tokens
    return out
