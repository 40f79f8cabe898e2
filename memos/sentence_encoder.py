"""A torch-free sentence encoder for BERT-family sentence-transformers weights.

The offline default embedder is all-MiniLM-L6-v2: a 6-layer BERT whose sentence vector is
the mean of its last hidden states over the real tokens, L2-normalised. That forward pass is
a few matrix products per layer, so it runs here on numpy (whose matmuls use the machine's
BLAS) with the model's own fast tokenizer (`tokenizers`, from its `tokenizer.json`) and its
weights memory-mapped from `model.safetensors` (read in place, not copied: the word-embedding
table is 47 MB of which a text touches a few rows). No torch, no transformers, nothing
downloaded; the vectors match sentence-transformers' to within float rounding
(tests/test_sentence_encoder.py checks them against reference vectors made with it).

Texts are sorted by length and encoded in batches of at most `batch_size` texts and
`batch_tokens` tokens, so padding costs little and the attention scores of long texts stay
small (32 texts of 256 tokens would need ~100 MB per layer for them at once); like
sentence-transformers, a text longer than the model's `max_seq_length` is truncated.

BLAS threads are chosen per call (`encode_threads`): as many as other processes leave idle,
one at least. OpenBLAS's threads wait for each other at every product, so when other processes
hold the cores a second thread stalls the first: on 2 cores at load 11-15 one thread encoded
LOCOMO turns 3-4x faster than two (26-31 against 6-10 turns/s, same run, alternating).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._proc import machine_ticks

__all__ = ["SHAPES_FILE", "SentenceEncoder", "THREADS_ENV", "blas_limit", "encode_threads", "free_cores", "length_batches",
           "padded", "random_weights", "safetensors_header", "set_encode_threads"]

_F32 = np.float32
_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}
# Abramowitz & Stegun 7.1.26: erf to 1.5e-7, below float32 rounding at BERT's activations.
_ERF_P = _F32(0.3275911)
_ERF_A = tuple(_F32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3 * hidden): query, key and value fused into one product
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


class SentenceEncoder:
    """Mean-pooled, normalised BERT sentence vectors from a sentence-transformers model folder.

    `model_dir` holds `config.json`, `tokenizer.json`, `model.safetensors` and (optionally)
    `sentence_bert_config.json` with `max_seq_length`. Only absolute position embeddings and
    mean pooling are supported, which is what the MiniLM / mpnet-free BERT models use.
    """

    def __init__(self, model_dir: str | Path, *, batch_size: int = 32, batch_tokens: int = 2048,
                 threads: int | None = None, weights: Mapping[str, np.ndarray] | None = None) -> None:
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{model_dir}: only BERT models with absolute positions are supported")
        st_config = model_dir / "sentence_bert_config.json"
        max_len = json.loads(st_config.read_text()).get("max_seq_length") if st_config.exists() else None
        self.max_length: int = int(max_len or config["max_position_embeddings"])
        self.heads: int = int(config["num_attention_heads"])
        self.eps = _F32(config.get("layer_norm_eps", 1e-12))
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.threads = threads
        """BLAS threads for an encode call; None: `encode_threads()` at each call."""

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()  # padding is done per length-sorted batch below
        self.tokenizer.enable_truncation(max_length=self.max_length)

        # `weights`: tensors by name instead of the folder's model.safetensors (a benchmark's
        # random weights of the same shapes cost the same FLOPs)
        w = weights if weights is not None else _map_safetensors(model_dir / "model.safetensors")
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(w[prefix + name], dtype=_F32)

        def dense(name: str) -> tuple[np.ndarray, np.ndarray]:
            # x @ W.T: BLAS reads the transposed view in place, no copy
            return get(name + ".weight").T, get(name + ".bias")

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")
        self.token_type = get("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self.dim: int = int(self.word.shape[1])
        self.layers: list[_Layer] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            q, k, v = (dense(p + f"attention.self.{n}") for n in ("query", "key", "value"))
            self.layers.append(_Layer(
                np.ascontiguousarray(np.concatenate([q[0], k[0], v[0]], axis=1)), np.concatenate([q[1], k[1], v[1]]),
                *dense(p + "attention.output.dense"),
                get(p + "attention.output.LayerNorm.weight"), get(p + "attention.output.LayerNorm.bias"),
                *dense(p + "intermediate.dense"),
                *dense(p + "output.dense"),
                get(p + "output.LayerNorm.weight"), get(p + "output.LayerNorm.bias"),
            ))
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{model_dir}: only the exact gelu activation is supported")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 vector per text, shape (len(texts), dim), in input order."""
        out = np.empty((len(texts), self.dim), dtype=_F32)
        if not texts:
            return out
        with blas_limit(self.threads if self.threads is not None else encode_threads()):
            self._encode_into(texts, out)
        return out

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids of each text (truncated to `max_length`), in input order."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def batches(self, ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """How a call's texts are grouped for the forward pass (`length_batches` with this
        encoder's limits): a pool of workers that encodes the same groups gets the same vectors."""
        return length_batches([len(i) for i in ids], self.batch_size, self.batch_tokens)

    def work(self, tokens: int) -> _Work:
        """Work arrays for batches of up to `tokens` padded tokens (they grow past it), reused by
        every layer of every batch: numpy's fresh temporaries, ~20 per layer, cost more than the
        matrix products at these sizes."""
        return _Work(tokens, self.dim, self.layers[0].up_w.shape[1])

    def _encode_into(self, texts: Sequence[str], out: np.ndarray) -> None:
        ids = self.tokenize(texts)
        batches = self.batches(ids)
        work = self.work(max(len(b) * len(ids[b[-1]]) for b in batches))
        for chunk in batches:
            out[chunk] = self.encode_ids([ids[i] for i in chunk], work)

    def encode_ids(self, batch: Sequence[Sequence[int]], work: _Work | None = None) -> np.ndarray:
        """The vectors of one batch of token-id lists (one forward pass; BLAS threads as set)."""
        ids, mask = padded(batch)
        n, length = ids.shape
        work = work or self.work(n * length)
        x = self.word[ids] + self.position[:length] + self.token_type
        x = self._layer_norm(x.reshape(n * length, self.dim), *self.emb_ln)
        # a padded key gets the most negative float added before the softmax, as in BERT
        bias = ((1.0 - mask) * np.finfo(_F32).min)[:, None, None, :]
        for layer in self.layers:
            x = self._block(x, layer, bias, n, length, work)
        hidden = x.reshape(n, length, self.dim)
        summed = np.einsum("nld,nl->nd", hidden, mask)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _block(self, x: np.ndarray, layer: _Layer, bias: np.ndarray, n: int, length: int, work: _Work) -> np.ndarray:
        """One transformer layer; the same operations in the same order as a plain numpy
        transcription (so the same bits), written into `work`'s arrays instead of new ones."""
        heads, head_dim = self.heads, self.dim // self.heads
        rows = n * length
        qkv = np.matmul(x, layer.qkv_w, out=work.take("qkv", rows, 3 * self.dim))
        qkv += layer.qkv_b
        qkv = qkv.reshape(n, length, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)  # (3, n, heads, length, head_dim)
        scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2)
        scores *= _F32(1.0 / math.sqrt(head_dim))
        scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = work.take("context", rows, self.dim)
        np.copyto(context.reshape(n, length, heads, head_dim), (scores @ qkv[2]).transpose(0, 2, 1, 3))
        attended = np.matmul(context, layer.out_w, out=work.take("attended", rows, self.dim))
        attended += layer.out_b
        attended += x
        x = self._layer_norm(attended, layer.ln1_g, layer.ln1_b, work)
        h = np.matmul(x, layer.up_w, out=work.take("up", rows, layer.up_w.shape[1]))
        h += layer.up_b
        _gelu_(h, work)
        y = np.matmul(h, layer.down_w, out=work.take("down", rows, self.dim))
        y += layer.down_b
        y += x
        return self._layer_norm(y, layer.ln2_g, layer.ln2_b, work)

    def _layer_norm(self, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, work: _Work | None = None) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        if work is None:
            centered, squared = x - mean, np.empty_like(x)
        else:  # the result must outlive the next layer norm's: two arrays, used in turn
            centered = np.subtract(x, mean, out=work.take(work.next_norm(), len(x), x.shape[1]))
            squared = work.take("squared", len(x), x.shape[1])
        var = np.mean(np.square(centered, out=squared), axis=-1, keepdims=True)
        centered *= 1.0 / np.sqrt(var + self.eps)
        centered *= gamma
        centered += beta
        return centered


def padded(batch: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """A batch of token-id lists as one (n, longest) int64 array, zeros after each list's end, and
    its float32 mask (1 where a token is)."""
    n, length = len(batch), max(len(ids) for ids in batch)
    ids = np.zeros((n, length), dtype=np.int64)
    mask = np.zeros((n, length), dtype=_F32)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1.0
    return ids, mask


class _Work:
    """Named float32 arrays of up to `tokens` rows, reused by every layer of an encode call."""

    def __init__(self, tokens: int, dim: int, inner: int) -> None:
        self.tokens, self.dim, self.inner = tokens, dim, inner
        self._arrays: dict[str, np.ndarray] = {}
        self._norm = 0

    def take(self, name: str, rows: int, cols: int) -> np.ndarray:
        """A (rows, cols) view of the array named `name` (allocated on first use)."""
        flat = self._arrays.get(name)
        if flat is None or flat.size < rows * cols:
            flat = self._arrays[name] = np.empty(max(self.tokens, rows) * cols, dtype=_F32)
        return flat[: rows * cols].reshape(rows, cols)

    def next_norm(self) -> str:
        self._norm ^= 1
        return f"norm{self._norm}"


THREADS_ENV = "MEMOS_ENCODER_THREADS"
"""The environment variable that sets `encode_threads` (read on every call)."""


def set_encode_threads(threads: int) -> None:
    """`encode_threads` from now on, in this process and the processes it starts: `threads` BLAS
    threads a call, or (0) the cores other processes leave free."""
    if threads:
        os.environ[THREADS_ENV] = str(threads)
    else:
        os.environ.pop(THREADS_ENV, None)


def encode_threads() -> int:
    """BLAS threads for one encode call: `MEMOS_ENCODER_THREADS` if set, else the cores other
    processes leave free (`free_cores`), one at least."""
    if configured := os.environ.get(THREADS_ENV):
        return max(1, int(configured))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    others = _OTHERS.busy()
    if others is None:  # no /proc/stat: the load average, this process's share unknown
        try:
            others = max(0.0, os.getloadavg()[0] - 1.0)
        except OSError:  # not available on this platform
            return cores
    return free_cores(cores, others)


def length_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """Indices into `lengths` grouped for the forward pass: sorted by length, at most
    `batch_size` texts and `batch_tokens` padded tokens a group (one text at least)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        # sorted ascending: the batch's last text is its longest, so its padded size is known
        size = 1
        while (size < batch_size and start + size < len(order)
               and (size + 1) * lengths[order[start + size]] <= batch_tokens):
            size += 1
        batches.append(order[start : start + size])
        start += size
    return batches


def free_cores(cores: int, others: float) -> int:
    """The cores left when other processes keep `others` of them busy, one at least."""
    return max(1, min(cores, round(cores - others)))


class _OtherProcesses:
    """How many cores other processes (and other virtual machines: steal time) kept busy since
    the last look, from /proc/stat less this process's own CPU time.

    The 1-minute load average, used before, counts this process too and lags a minute: an ingest
    that kept both cores busy read as a busy machine, and so did the minute after another process
    ended, and it encoded on one thread (89 turns/s of LOCOMO on an idle machine; the encoder
    alone did 168 texts/s on two threads against 107 on one; README, issue 18)."""

    MIN_INTERVAL = 0.05

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, float, float] | None = None  # wall, machine busy s, own CPU s
        self._busy: float | None = None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def busy(self) -> float | None:
        """Cores busy with other work since the last call (the first call looks for `MIN_INTERVAL`)."""
        with self._lock:
            now = self._sample()
            if now is None:
                return None
            if self._last is None:
                time.sleep(self.MIN_INTERVAL)
                self._last, now = now, self._sample()
                if now is None:
                    return None
            wall = now[0] - self._last[0]
            if wall >= self.MIN_INTERVAL or self._busy is None:
                self._busy = max(0.0, (now[1] - self._last[1]) - (now[2] - self._last[2])) / max(wall, 1e-9)
                self._last = now
            return self._busy

    def _sample(self) -> tuple[float, float, float] | None:
        ticks = machine_ticks()
        if ticks is None:
            return None
        return time.monotonic(), ticks[0] / self._tick, time.process_time()


_OTHERS = _OtherProcesses()


_BLAS: Any = None


def blas_limit(threads: int) -> Any:
    """A context that runs numpy's BLAS on `threads` threads (threadpoolctl; a no-op without it)."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _BLAS = False
        else:
            _BLAS = ThreadpoolController().select(user_api="blas")
    return _BLAS.limit(limits=threads) if _BLAS else contextlib.nullcontext()


SHAPES_FILE = "model.shapes.json"
"""A model folder's stand-in for model.safetensors in benchmarks: that file's JSON header alone."""


def safetensors_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a .safetensors file (each tensor's dtype, shape and byte range) and
    the offset its data starts at: an 8-byte little-endian header length, then the header."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(header_len)), 8 + header_len


def random_weights(model_dir: str | Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 tensors shaped as the folder's model.safetensors (or, where the weights are
    not there, its `SHAPES_FILE`): the same FLOPs as the real weights, meaningless vectors."""
    model_dir = Path(model_dir)
    weights = model_dir / "model.safetensors"
    header = safetensors_header(weights)[0] if weights.exists() else json.loads((model_dir / SHAPES_FILE).read_text())
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal(meta["shape"], dtype=_F32) * _F32(0.05)) for name, meta in header.items()
            if name != "__metadata__"}


def _map_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a .safetensors file as read-only arrays over a memory map of it."""
    header, offset = safetensors_header(path)
    data = np.asarray(np.memmap(path, dtype=np.uint8, mode="r", offset=offset))
    tensors: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(meta["dtype"])
        begin, end = meta["data_offsets"]
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {meta['dtype']}")
        tensors[name] = data[begin:end].view(dtype).reshape(meta["shape"])
    return tensors


def _gelu_(x: np.ndarray, work: _Work | None = None) -> None:
    """The exact (erf) gelu, in place: x * (1 + erf(x / sqrt 2)) / 2 (temporaries in `work`)."""
    rows, cols = x.shape
    z, a, t, poly = (np.empty_like(x) for _ in range(4)) if work is None else \
        (work.take(name, rows, cols) for name in ("gelu_z", "gelu_a", "gelu_t", "gelu_poly"))
    np.multiply(x, _F32(1.0 / math.sqrt(2.0)), out=z)
    np.abs(z, out=a)
    np.multiply(a, _ERF_P, out=t)
    t += 1.0
    np.reciprocal(t, out=t)
    np.multiply(t, _ERF_A[0], out=poly)
    for coef in _ERF_A[1:]:
        poly += coef
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - erf(|z|)
    np.subtract(1.0, poly, out=poly)
    np.copysign(poly, z, out=poly)  # erf(z)
    poly += 1.0
    poly *= 0.5
    x *= poly

