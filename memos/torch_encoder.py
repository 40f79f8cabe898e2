"""The local encoder's forward pass on torch: a GPU when there is one (`memos-memory[gpu]`).

The same BERT sentence encoder as `memos.sentence_encoder` (same weights, tokenizer, length-
sorted batches and mean pooling), written with torch's kernels so that it runs on a CUDA device
in half precision: a GPU encodes a call's texts in a few large batches. Built from a loaded
`SentenceEncoder`, whose float32 arrays it copies to the device. Its vectors differ from the
numpy encoder's by float rounding only (half precision: cosine >= 0.999; tests check both).
torch is imported here and nowhere else in memos, and only when this encoder is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .sentence_encoder import SentenceEncoder, length_batches

__all__ = ["TorchSentenceEncoder", "cpu_dtype_name", "cpu_has_bf16"]

_BF16_FLAGS = ("amx_bf16",)
"""CPU flags (as /proc/cpuinfo names them) under which torch's bfloat16 products beat float32:
AMX tiles. AVX-512 BF16 alone (`avx512_bf16`, the flags of AMD Zen 4 or Intel Cooper Lake) does
not: on an Intel Xeon with it and no AMX, torch's bfloat16 encoder ran LOCOMO turns at 91-93
texts/s against 146-151 in float32 on one thread, 176-180 against 272-285 on two
(docs/benchmarks.md)."""


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """True where torch multiplies bfloat16 faster than float32 on this CPU: where it has AMX
    tiles for it, as /proc/cpuinfo says (`_BF16_FLAGS`; elsewhere bfloat16 is slower)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return any(flag in flags for flag in _BF16_FLAGS)


def cpu_dtype_name(cpuinfo: str | None = None) -> str:
    """The dtype the torch encoder uses on this CPU: bfloat16 where it has AMX, else float32."""
    return "bfloat16" if cpu_has_bf16(cpuinfo) else "float32"


class TorchSentenceEncoder:
    """`encode(texts)` as `SentenceEncoder.encode`, on a torch `device` in `dtype`.

    `dtype` None: float16 on CUDA, float32 elsewhere (CPU half precision is slow and is for
    checks only); a name ("bfloat16", "float32", "float16") is taken as torch's dtype of that
    name. A GPU takes far larger batches than the CPU: `batch_size` texts and `batch_tokens`
    padded tokens a batch, by default 512 and 65,536 there (attention runs in
    torch's fused kernel, which never holds a batch's full score matrix) and the numpy
    encoder's limits on the CPU."""

    def __init__(self, encoder: SentenceEncoder, device: str = "cuda", *, dtype: Any = None,
                 batch_size: int | None = None, batch_tokens: int | None = None) -> None:
        import torch

        self._torch = torch
        self.encoder = encoder
        self.device = torch.device(device)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        self.dtype = dtype if dtype is not None else (torch.float16 if self.device.type == "cuda" else torch.float32)
        self.dim = encoder.dim
        on_gpu = self.device.type != "cpu"
        self.batch_size = batch_size or (512 if on_gpu else encoder.batch_size)
        self.batch_tokens = batch_tokens or (65_536 if on_gpu else encoder.batch_tokens)

        def put(array: np.ndarray) -> Any:
            return torch.from_numpy(np.array(array, dtype=np.float32)).to(self.device, self.dtype)  # a writable copy

        self._word, self._position, self._token_type = put(encoder.word), put(encoder.position), put(encoder.token_type)
        self._emb_ln = tuple(put(a) for a in encoder.emb_ln)
        self._layers = [tuple(put(getattr(layer, f)) for f in layer.__dataclass_fields__) for layer in encoder.layers]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 vector per text, shape (len(texts), dim), in input order."""
        torch = self._torch
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.encoder.tokenize(texts)
        batches = length_batches([len(i) for i in ids], self.batch_size, self.batch_tokens)
        with torch.inference_mode():
            done = [self._encode_ids([ids[i] for i in batch]) for batch in batches]
            vectors = torch.cat(done).cpu().numpy()  # one copy back, after every batch was queued
        out[[i for batch in batches for i in batch]] = vectors
        return out

    def _encode_ids(self, batch: list[list[int]]) -> Any:
        torch = self._torch
        functional = torch.nn.functional
        n, length = len(batch), max(len(seq) for seq in batch)
        ids = torch.zeros((n, length), dtype=torch.long)
        mask = torch.zeros((n, length), dtype=torch.bool)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = True
        ids, mask = ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)
        dim, heads = self.dim, self.encoder.heads
        eps = float(self.encoder.eps)
        x = self._word[ids] + self._position[:length] + self._token_type
        x = functional.layer_norm(x, (dim,), *self._emb_ln, eps=eps)
        keys = mask[:, None, None, :]  # a padded key takes no part in attention
        for qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, up_w, up_b, down_w, down_b, ln2_g, ln2_b in self._layers:
            qkv = (x @ qkv_w + qkv_b).view(n, length, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            context = functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=keys)
            context = context.transpose(1, 2).reshape(n, length, dim)
            x = functional.layer_norm(context @ out_w + out_b + x, (dim,), ln1_g, ln1_b, eps=eps)
            h = functional.gelu(x @ up_w + up_b)
            x = functional.layer_norm(h @ down_w + down_b + x, (dim,), ln2_g, ln2_b, eps=eps)
        weights = mask.to(torch.float32)
        pooled = (x.float() * weights[:, :, None]).sum(dim=1) / weights.sum(dim=1, keepdim=True).clamp(min=1e-9)
        return functional.normalize(pooled, dim=1, eps=1e-12)
