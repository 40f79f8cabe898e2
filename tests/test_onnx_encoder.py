"""The local encoder in onnxruntime (`memos.onnx_encoder`): the numpy encoder's vectors, and what
a server picks by default."""

from __future__ import annotations

import numpy as np
import pytest

from memos.embeddings import LOCAL_EMBEDDER_NAME, ONNX, local_embedder, local_encoder, served_embedder
from memos.onnx_encoder import OnnxSentenceEncoder, onnx_installed

pytestmark = pytest.mark.skipif(not onnx_installed(), reason="onnxruntime and onnx not installed (memos-memory[serve])")

TEXTS = [
    "where does alice work now?",
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt accepted.",
    "我周末在杭州打羽毛球",
    "iPhone很好用, but the battery dies by noon",
    "ok",
    " ".join(f"word{i}" for i in range(400)),  # past the 256 tokens kept
]


def test_vectors_are_the_numpy_encoders() -> None:
    numpy_encoder = local_encoder()
    onnx_encoder = OnnxSentenceEncoder(numpy_encoder)
    texts = TEXTS + [f"client {i} wrote fact {i} about the weather in town {i % 7}" for i in range(40)]  # several batches
    ours, theirs = onnx_encoder.encode(texts), numpy_encoder.encode(texts)
    assert ours.shape == theirs.shape == (len(texts), numpy_encoder.dim) and ours.dtype == np.float32
    assert np.abs(ours - theirs).max() < 1e-5
    assert (ours * theirs).sum(axis=1).min() > 0.99999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


async def test_the_onnx_device_embeds_interchangeably(embedder) -> None:
    onnx = local_embedder(device=ONNX)
    assert onnx.name == embedder.name == LOCAL_EMBEDDER_NAME  # a store built with one searches with the other
    ours = np.array(await onnx.embed_query("which city does alice's sister live in"))
    theirs = np.array(await embedder.embed_query("which city does alice's sister live in"))
    assert float(ours @ theirs) > 0.99999


def test_a_server_takes_onnx_unless_told(monkeypatch) -> None:
    monkeypatch.delenv("MEMOS_ENCODER_DEVICE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # whatever this machine has: the CPU
    chosen = served_embedder("local")
    assert chosen.name == LOCAL_EMBEDDER_NAME and chosen.embedder.device == ONNX
    assert served_embedder("none") == "none" and served_embedder(None) is None
    monkeypatch.setenv("MEMOS_ENCODER_DEVICE", "cpu")  # the numpy encoder, as asked
    assert served_embedder("local") == "local"
