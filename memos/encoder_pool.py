"""The local encoder data-parallel over the machine's cores: one encode call, several workers.

One process encodes at one core's pace however many BLAS threads it is given: the element-wise
work (layer norms, gelu, softmax) and the per-batch Python run on one core while BLAS waits.
A pool of workers, each with one BLAS thread, encodes a call's batches side by side. The caller
tokenizes and forms the very batches `SentenceEncoder.encode` forms, so every batch is padded
and multiplied as it would be in one process and the vectors are the same; batches go out
longest first (the short ones fill in at the end) and come back into input order.

Workers are fresh interpreters (this package's `memos._encoder_worker`, never forked: the parent
may already run LanceDB's threads), each mapping the same weights file (the page cache holds one copy), or
threads of this process (`kind="thread"`: no start-up, but the Python between numpy calls holds
the GIL). They start on the first call that has work for them and stop at exit (`close`); a
worker that fails hands its batches back and the call finishes in this process.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._encoder_worker import read_frame, write_frame
from .sentence_encoder import SentenceEncoder, blas_limit, encode_threads

__all__ = ["EncoderPool", "PoolKind", "pool_workers", "worker_command"]

log = logging.getLogger("memos.encoder_pool")

PoolKind = Literal["process", "thread"]


def pool_workers() -> int:
    """Workers for the local encoder's pool: `MEMOS_ENCODER_WORKERS` if set, else the cores other
    processes leave free now (`free_cores`), one at least; 1 means encode in the calling process."""
    if configured := os.environ.get("MEMOS_ENCODER_WORKERS"):
        return max(1, int(configured))
    return encode_threads()


def worker_command() -> str:
    """The `python -c` program of a worker: this very memos package's `_encoder_worker`.

    `python -m memos._encoder_worker` would look in the working directory first, and a `memos/`
    folder there (a checkout of another version) would be imported instead, or mixed with this
    one. The worker puts the folder holding this package first on its path and drops the working
    directory, so it runs the parent's code wherever it is started."""
    root = str(Path(__file__).resolve().parent.parent)
    return ("import sys; sys.path[:] = [" + repr(root) + "] + [p for p in sys.path if p not in ('', '.')]; "
            "import json, memos._encoder_worker as worker; worker.main(json.loads(sys.argv[1]))")


class _WorkerFailed(RuntimeError):
    """A pool worker ended or failed on a batch; the call is encoded in this process instead."""


class EncoderPool:
    """`encode(texts)` as `SentenceEncoder.encode`, spread over `workers` workers.

    `encoder` is the caller's own loaded encoder: it tokenizes, and it encodes small calls, every
    call when `workers` is 1 and every call after the pool was closed. Process workers load
    theirs from `model_dir` (with `random_seed`: the same random weights, for benchmarks)."""

    def __init__(self, encoder: SentenceEncoder, model_dir: str | Path, workers: int, *, kind: PoolKind = "process",
                 threads: int = 1, random_seed: int | None = None) -> None:
        if kind not in ("process", "thread"):
            raise ValueError(f"pool kind must be 'process' or 'thread', not {kind!r}")
        self.encoder = encoder
        self.model_dir = Path(model_dir)
        self.workers = max(1, int(workers))
        self.kind: PoolKind = kind
        self.threads = max(1, int(threads))
        """BLAS threads in each worker (one: the workers are the parallelism)."""
        self.random_seed = random_seed
        self._queue: queue.SimpleQueue[tuple[list[list[int]], Future[np.ndarray]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._closed = False

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 vector per text, in input order (the same as one process's)."""
        if self.workers <= 1 or len(texts) < 2 or self._closed:
            return self.encoder.encode(texts)
        enc = self.encoder
        ids = enc.tokenize(texts)
        batches = enc.batches(ids)
        if len(batches) < 2 or not self._start():
            return enc.encode(texts)
        out = np.empty((len(texts), enc.dim), dtype=np.float32)
        submitted: list[tuple[list[int], Future[np.ndarray]]] = []
        for batch in reversed(batches):  # longest first
            future: Future[np.ndarray] = Future()
            self._queue.put(([ids[i] for i in batch], future))
            submitted.append((batch, future))
        try:
            for batch, future in submitted:
                out[batch] = future.result()
        except _WorkerFailed as exc:
            log.warning("the encoder pool failed (%s); encoding in this process", exc)
            for _, future in submitted:
                future.cancel()
            self.close()
            return enc.encode(texts)
        return out

    def close(self) -> None:
        """Stop the workers (idempotent); later calls encode in this process."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
            procs, self._procs = self._procs, []
        for _ in threads:
            self._queue.put(None)
        for proc in procs:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()  # the worker's read ends: it exits
                except OSError:  # it had ended already (a broken pipe)
                    pass
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for thread in threads:
            thread.join(timeout=5)

    def _start(self) -> bool:
        """Start the workers once; False when the pool is closed."""
        with self._lock:
            if self._closed:
                return False
            if not self._threads:
                targets: list[tuple[Callable[..., None], tuple[Any, ...]]]
                if self.kind == "process":
                    self._procs = [self._spawn() for _ in range(self.workers)]
                    targets = [(self._serve_process, (p,)) for p in self._procs]
                else:
                    targets = [(self._serve_thread, ())] * self.workers
                for target, args in targets:
                    thread = threading.Thread(target=target, args=args, name="memos-encoder", daemon=True)
                    thread.start()
                    self._threads.append(thread)
                atexit.register(self.close)
            return True

    def _spawn(self) -> subprocess.Popen[bytes]:
        config = {"model_dir": str(self.model_dir), "batch_size": self.encoder.batch_size, "threads": self.threads,
                  "batch_tokens": self.encoder.batch_tokens, "random_seed": self.random_seed}
        blas = {name: str(self.threads) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        env = {**os.environ, **blas, "TOKENIZERS_PARALLELISM": "false"}
        return subprocess.Popen([sys.executable, "-c", worker_command(), json.dumps(config)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def _serve_process(self, proc: subprocess.Popen[bytes]) -> None:
        """Hand batches to one worker process, one at a time, and its vectors back."""
        assert proc.stdin is not None and proc.stdout is not None
        while (item := self._queue.get()) is not None:
            batch, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                write_frame(proc.stdin, batch)
                reply = read_frame(proc.stdout)
            except (OSError, ValueError) as exc:  # a closed or broken pipe
                reply = ("error", f"{type(exc).__name__}: {exc}")
            if reply is None or reply[0] != "ok":
                future.set_exception(_WorkerFailed(reply[1] if reply else f"worker {proc.pid} ended (exit {proc.poll()})"))
                return  # this worker is done; the caller falls back and closes the pool
            future.set_result(reply[1])

    def _serve_thread(self) -> None:
        """Encode batches in this thread, one BLAS thread (numpy releases the GIL in its loops)."""
        work = self.encoder.work(self.encoder.batch_tokens)
        with blas_limit(self.threads):
            while (item := self._queue.get()) is not None:
                batch, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(self.encoder.encode_ids(batch, work))
                except Exception as exc:  # the caller sees it and encodes the call itself
                    future.set_exception(_WorkerFailed(f"{type(exc).__name__}: {exc}"))
