"""The torch-free encoder gives sentence-transformers' vectors for the shipped MiniLM weights."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memos.embeddings import LOCAL_EMBEDDER_NAME, local_encoder, local_model_dir

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"


@pytest.fixture(scope="module")
def reference() -> tuple[list[str], np.ndarray]:
    data = np.load(REFERENCE, allow_pickle=False)
    return [str(t) for t in data["texts"]], data["vectors"].astype(np.float32)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_vectors_match_sentence_transformers_reference(embedder, reference):
    texts, expected = reference
    assert len(texts) >= 250 and any("北京" in t for t in texts) and "" in texts
    got = local_encoder().encode(texts)
    cos = _cosines(got, expected)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.999, f"cosine {cos.min():.5f} for {texts[worst][:80]!r}"
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_long_texts_are_truncated_like_sentence_transformers(embedder, reference):
    texts, expected = reference
    encoder = local_encoder()
    long = [i for i, t in enumerate(texts) if encoder.tokenizer.encode(t).overflowing]  # cut at max_length
    assert len(long) >= 8
    got = encoder.encode([texts[i] for i in long])
    assert _cosines(got, expected[long]).min() >= 0.999
    # past the limit, more text changes nothing
    first, doubled = encoder.encode([texts[long[-1]], texts[long[-1]] * 2])
    assert float(first @ doubled) > 0.9999


def test_order_and_batching_do_not_change_vectors(embedder, reference):
    texts = reference[0][:70]
    one_by_one = np.stack([local_encoder().encode([t])[0] for t in texts])
    batched = local_encoder().encode(list(reversed(texts)))[::-1]
    assert _cosines(one_by_one, batched).min() > 0.99999


def test_thread_count_changes_no_vector(embedder, reference, monkeypatch):
    from memos.sentence_encoder import encode_threads

    texts = reference[0][:40]
    encoder = local_encoder()
    monkeypatch.setenv("MEMOS_ENCODER_THREADS", "1")
    assert encode_threads() == 1
    one = encoder.encode(texts)
    monkeypatch.setenv("MEMOS_ENCODER_THREADS", "2")
    assert encode_threads() == 2
    assert _cosines(one, encoder.encode(texts)).min() > 0.99999
    monkeypatch.delenv("MEMOS_ENCODER_THREADS")
    assert 1 <= encode_threads() <= (os.cpu_count() or 1)


def test_the_encoder_takes_the_cores_other_processes_leave_free():
    """This process's own work is no reason to encode on fewer threads; other processes' is."""
    from memos.sentence_encoder import _OtherProcesses, free_cores

    assert free_cores(2, others=0.0) == 2
    assert free_cores(2, others=0.3) == 2
    assert free_cores(2, others=1.2) == 1
    assert free_cores(2, others=9.0) == 1  # one at least
    assert free_cores(4, others=1.0) == 3
    # this process keeping a core busy is not counted as another's
    others = _OtherProcesses()
    if others.busy() is None:
        return  # no /proc/stat here
    machine = others._sample()
    deadline = time.monotonic() + 30
    while time.process_time() - machine[2] < 0.3 and time.monotonic() < deadline:  # 0.3 s of this process's CPU
        sum(i * i for i in range(1000))
    seen, after = others.busy(), others._sample()
    wall, busy_s, own_s = after[0] - machine[0], after[1] - machine[1], after[2] - machine[2]  # busy_s: every process's, this one's too
    assert own_s >= 0.3, own_s
    # counted as another's, this process's own seconds would be in `seen`; on a machine busy with
    # other work too (a parallel test run), compared in CPU seconds, not against a share of a core
    assert seen * wall <= busy_s - own_s / 2, (seen, wall, busy_s, own_s)


async def test_embedder_keeps_the_name_and_dim_stores_record(embedder):
    assert (embedder.name, embedder.dim) == (LOCAL_EMBEDDER_NAME, 384)
    vectors = await embedder.embed_documents(["I moved to Lisbon in May.", "我上个月搬到了上海。"])
    query = await embedder.embed_query("I moved to Lisbon in May.")
    assert len(vectors) == 2 and all(len(v) == 384 for v in vectors)
    assert sum(a * b for a, b in zip(query, vectors[0], strict=True)) > 0.9999


async def test_the_local_embedder_hands_the_encoder_whole_calls(embedder, reference, monkeypatch):
    """An ingest's texts reach the encoder LOCAL_BATCH at a time, not a remote API's 64: the
    encoder sorts a call by length, so a bigger call pads less (LOCOMO: 95 -> 140 texts/s)."""
    import memos.embeddings as embeddings

    texts = reference[0][:150]
    calls: list[int] = []
    encode = type(local_encoder()).encode

    def counted(self, batch):
        calls.append(len(batch))
        return encode(self, batch)

    monkeypatch.setattr(type(local_encoder()), "encode", counted)
    assert embedder.batch_size == embeddings.LOCAL_BATCH >= 1024
    whole = await embedder.embed_documents(texts)
    assert calls == [150]
    calls.clear()
    small = await embeddings.TextEmbedder(embedder.name, embedder.dim, embedder.embedder, batch_size=64).embed_documents(texts)
    assert calls == [64, 64, 22]
    assert _cosines(np.array(whole), np.array(small)).min() > 0.99999


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None, reason="sentence-transformers not installed")
def test_vectors_match_live_sentence_transformers(embedder, reference):
    from sentence_transformers import SentenceTransformer

    texts = reference[0]
    model = SentenceTransformer(str(local_model_dir()), device="cpu")
    expected = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    assert _cosines(local_encoder().encode(texts), expected).min() >= 0.999


def test_the_default_embedder_needs_no_torch(tmp_path):
    code = (
        "import sys, memos\n"
        f"mem = memos.MemoryOS.open_sync({str(tmp_path / 'db')!r})\n"
        "mem.ingest_sync(memos.Scope('alice'), [{'speaker': 'alice', 'text': 'I moved to Lisbon in May.'}])\n"
        "assert mem.search_sync('where does alice live?', memos.Scope('alice'), k=1)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"
    assert "Loading weights" not in out.stderr and "%|" not in out.stderr
