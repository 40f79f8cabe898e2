"""The full-text index memos builds over a table's `text` (its form: `memos.store.fulltext`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import lancedb
from lancedb.index import FTS

__all__ = ["index_tokens", "text_index", "text_index_config"]

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
def _tokenize() -> Callable[[str], Iterable[Any]]:
    """LanceDB's tokenizer with the index's settings (`text_index_config`): every option of
    `lancedb.tokenize` taken from the index's config, so the two cannot drift apart."""
    config = text_index_config()
    options = {name: getattr(config, name) for name in inspect.signature(lancedb.tokenize).parameters if hasattr(config, name)}
    return functools.partial(lancedb.tokenize, **options)


def index_tokens(texts: Sequence[str | None]) -> list[list[str]]:
    """Each text's tokens as the full-text index (`text_index_config`) splits it: LanceDB's own
    tokenizer with the same settings (`lancedb.tokenize`, the one the index runs), repeats kept, in
    order (no text: no tokens)."""
    tokenize = _tokenize()
    out: list[list[str]] = [[] for _ in texts]
    together = []
    for i, text in enumerate(texts):
        if text and _BETWEEN in text.lower():
            out[i] = [t.text for t in tokenize(text)]
        elif text:
            together.append(i)
    if together:
        parts: list[list[str]] = [[]]
        for token in tokenize(f" {_BETWEEN} ".join(texts[i] or "" for i in together)):
            if token.text == _BETWEEN:
                parts.append([])
            else:
                parts[-1].append(token.text)
        if len(parts) != len(together):  # cannot happen as the tokenizer splits words; then one by one
            parts = [[t.text for t in tokenize(texts[i] or "")] for i in together]
        for i, tokens in zip(together, parts, strict=True):
            out[i] = tokens
    return out
