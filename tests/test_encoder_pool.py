"""The local encoder's pool: the same vectors as one process, workers that start and stop cleanly."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memos.embeddings import local_embedder, local_encoder, local_model_dir

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [str(t) for t in np.load(REFERENCE, allow_pickle=False)["texts"]][:120]


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_pool_gives_the_vectors_of_one_process(embedder, texts, kind):
    from memos.encoder_pool import EncoderPool

    encoder = local_encoder()
    one = encoder.encode(texts)
    pool = EncoderPool(encoder, local_model_dir(), 2, kind=kind)
    try:
        many = pool.encode(texts)
        assert pool._threads  # the workers did start
    finally:
        pool.close()
    assert np.abs(one - many).max() <= 1e-6
    # closed: encoded in this process (to float32 rounding: the encoder picks its BLAS threads from the
    # cores free at each call, and a sum in another order may differ in the last bit)
    assert np.abs(pool.encode(texts[:5]) - encoder.encode(texts[:5])).max() <= 1e-6


def test_a_worker_that_dies_hands_the_call_back(embedder, texts):
    from memos.encoder_pool import EncoderPool

    encoder = local_encoder()
    pool = EncoderPool(encoder, local_model_dir(), 2)
    try:
        pool.encode(texts[:60])
        for proc in pool._procs:
            proc.kill()
            proc.wait()
        assert np.abs(pool.encode(texts) - encoder.encode(texts)).max() <= 1e-6
        assert pool._closed
    finally:
        pool.close()


SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from memos.embeddings import local_embedder

    with open(sys.argv[1], "a") as log:  # no __main__ guard: a worker must not run this again
        log.write("ran\\n")
    texts = json.loads(Path(sys.argv[2]).read_text())
    embedder = local_embedder(workers=2)
    embedder.embedder.encode(texts)
    print(json.dumps([p.pid for p in embedder.embedder.backend()._procs]))
""")


def test_a_script_using_the_pool_runs_once_and_exits_with_its_workers(tmp_path, texts):
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    env = {**os.environ, "MEMOS_ENCODER_WORKERS": ""}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "log"), str(tmp_path / "texts.json")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "log").read_text() == "ran\n"
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(pids) == 2
    for pid in pids:  # the workers ended with their parent
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_pool_size_follows_the_override(monkeypatch):
    from memos.encoder_pool import pool_workers

    monkeypatch.setenv("MEMOS_ENCODER_WORKERS", "3")
    assert pool_workers() == 3
    monkeypatch.setenv("MEMOS_ENCODER_WORKERS", "0")
    assert pool_workers() == 1
    monkeypatch.delenv("MEMOS_ENCODER_WORKERS")
    assert 1 <= pool_workers() <= (os.cpu_count() or 1)


def test_the_local_device_is_the_cpu_without_a_gpu(monkeypatch):
    from memos.embeddings import local_device

    monkeypatch.setenv("MEMOS_ENCODER_DEVICE", "cuda:1")
    assert local_device() == "cuda:1"
    monkeypatch.delenv("MEMOS_ENCODER_DEVICE")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_device() == "cpu"


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (memos-memory[gpu])")
def test_the_torch_encoder_gives_the_numpy_encoders_vectors(embedder, texts):
    import torch

    from memos.torch_encoder import TorchSentenceEncoder

    encoder = local_encoder()
    sample = texts[:24] + [t for t in texts if len(t) > 1000][:2] + [""]
    expected = encoder.encode(sample)
    assert _cosines(TorchSentenceEncoder(encoder, "cpu").encode(sample), expected).min() >= 0.999
    short = [t for t in texts if 0 < len(t) < 50][:6]
    half = TorchSentenceEncoder(encoder, "cpu", dtype=torch.float16).encode(short)
    assert _cosines(half, encoder.encode(short)).min() >= 0.999
    device = "cuda" if torch.cuda.is_available() else None
    if device:
        assert _cosines(local_embedder(device=device).embedder.encode(sample), expected).min() >= 0.999


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (memos-memory[gpu])")
def test_a_gpu_that_is_not_there_is_a_config_error():
    import torch

    from memos.exceptions import ConfigError

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(ConfigError, match="cannot run on 'cuda'"):
        local_embedder(device="cuda").embedder.encode(["hello"])


def test_bfloat16_is_chosen_only_where_the_cpu_has_amx_for_it():
    from memos.torch_encoder import cpu_dtype_name, cpu_has_bf16

    sapphire = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
    zen4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16\n"  # bfloat16 without AMX: slower
    ice_lake = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"
    assert cpu_has_bf16(sapphire) and cpu_dtype_name(sapphire) == "bfloat16"
    assert not cpu_has_bf16(zen4) and cpu_dtype_name(zen4) == "float32"
    assert not cpu_has_bf16(ice_lake) and cpu_dtype_name(ice_lake) == "float32"
    assert cpu_dtype_name("") == "float32"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (memos-memory[gpu])")
def test_the_torch_cpu_device_gives_the_numpy_encoders_vectors(embedder, texts):
    import torch

    from memos.embeddings import TORCH_CPU
    from memos.torch_encoder import TorchSentenceEncoder, cpu_dtype_name

    encoder = local_encoder()
    sample = texts[:24] + ["我们下周三在上海见面", ""]
    expected = encoder.encode(sample)
    chosen = local_embedder(device=TORCH_CPU).embedder
    backend = chosen.backend()
    assert isinstance(backend, TorchSentenceEncoder) and backend.device.type == "cpu"
    assert backend.dtype == getattr(torch, cpu_dtype_name())
    assert _cosines(chosen.encode(sample), expected).min() >= 0.999
    bf16 = TorchSentenceEncoder(encoder, "cpu", dtype="bfloat16").encode(sample[:8])
    assert _cosines(bf16, expected[:8]).min() >= 0.999


def test_workers_import_the_parents_memos_whatever_the_working_directory(embedder, texts, tmp_path, monkeypatch, caplog):
    """A `memos/` folder in the working directory (a checkout of another version) is not what the workers run."""
    from memos.encoder_pool import EncoderPool

    fake = tmp_path / "memos"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "sentence_encoder.py").write_text("raise ImportError('the memos in the working directory was imported')\n")
    (fake / "_encoder_worker.py").write_text("raise ImportError('the memos in the working directory was imported')\n")
    monkeypatch.chdir(tmp_path)
    encoder = local_encoder()
    pool = EncoderPool(encoder, local_model_dir(), 2)
    try:
        with caplog.at_level("WARNING", logger="memos.encoder_pool"):
            many = pool.encode(texts[:60])
        assert not pool._closed and pool._procs  # the workers encoded the call: no fall-back
        assert all(p.poll() is None for p in pool._procs)
    finally:
        pool.close()
    assert "encoder pool failed" not in caplog.text
    assert np.abs(many - encoder.encode(texts[:60])).max() <= 1e-6
