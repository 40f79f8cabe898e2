"""`memos bench embedder --remote-stub`: a remote embedder through memos' own request path.

    memos bench embedder --remote-stub [--latency-ms 20] [--batch 64] [--rate-429 0.1] [--in-flight 8]
                         [--retry-after 1] [--dim 384] [--dataset locomo.json] [--no-ingest]

Starts the loopback OpenAI-compatible stub (`memos.bench.openai_stub`) in a process of its own
on 127.0.0.1, then (1) embeds the dataset's texts with a `TextEmbedder` on pydantic-ai's OpenAI
embedding model, as a user's "openai-compatible server" embedder is, all in one call (or in
calls of `--call` texts: ingest hands over 1,024), and (2) ingests the dataset's conversations
with `MemoryOS.ingest` into a LanceDB store in a temp dir. Each phase reports texts (turns) per
second, requests, 429s and retries the server saw, the CPU seconds the client and the stub
used, and `lost`: texts without their own vector at the end (the stub's vector is a hash of the
text, so a vector that came back for another text counts as lost too).
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memos.bench.openai_stub import stub_vector
from memos.embed_requests import RequestPolicy
from memos.embeddings import TextEmbedder

__all__ = ["StubSettings", "run_remote_bench", "stub_embedder", "stub_process", "stub_stats"]


@dataclass(frozen=True)
class StubSettings:
    """How the stub answers: after `latency_ms`, a fraction `rate_429` refused with 429 and
    `Retry-After: retry_after` seconds (and `retry-after-ms` when set), vectors of `dim` numbers,
    in base64 when asked (`floats_only`: as a list of floats always, as some servers answer)."""

    latency_ms: float = 20.0
    rate_429: float = 0.1
    retry_after: float = 1.0
    retry_after_ms: int | None = None
    dim: int = 384
    floats_only: bool = False

    def argv(self) -> list[str]:
        argv = ["--latency-ms", str(self.latency_ms), "--rate-429", str(self.rate_429),
                "--retry-after", str(self.retry_after), "--dim", str(self.dim)]
        argv += ["--retry-after-ms", str(self.retry_after_ms)] if self.retry_after_ms is not None else []
        return argv + (["--floats-only"] if self.floats_only else [])


@contextmanager
def stub_process(settings: StubSettings) -> Iterator[str]:
    """The stub serving in a child process (not a thread of this one: the client's and the
    server's Python would share one GIL); yields its base URL and stops it after."""
    root = str(Path(__file__).resolve().parent.parent.parent)
    code = f"import sys; sys.path.insert(0, {root!r}); from memos.bench.openai_stub import main; main(sys.argv[1:])"
    proc = subprocess.Popen([sys.executable, "-c", code, *settings.argv()], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the stub did not start (exit {proc.poll()}): {url!r}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def stub_stats(url: str) -> dict[str, Any]:
    """The stub's counters (`GET /stats`), and this process's CPU seconds (`client_cpu_s`)."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as reply:
        stats: dict[str, Any] = json.loads(reply.read())
    return {**stats, "client_cpu_s": time.process_time()}


def stub_embedder(url: str, dim: int, *, batch: int = 64, policy: RequestPolicy | None = None) -> TextEmbedder:
    """A `TextEmbedder` on an OpenAI-compatible server at `url`, as memos builds one for a
    provider's model (pydantic-ai's OpenAI embedding model), with the client's own retries off
    so that memos' retries (`memos.embed_requests`) are the ones measured."""
    from openai import AsyncOpenAI
    from pydantic_ai.embeddings import Embedder
    from pydantic_ai.embeddings.openai import OpenAIEmbeddingModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=url, api_key="stub", max_retries=0)
    model = OpenAIEmbeddingModel("stub-embed", provider=OpenAIProvider(openai_client=client))
    return TextEmbedder("openai:stub-embed", dim, Embedder(model), batch_size=batch, requests=policy or RequestPolicy())


def _lost(texts: Sequence[str], vectors: Sequence[Sequence[float] | None], dim: int) -> int:
    """Texts without their own vector: none came back, or another text's."""
    missing = max(0, len(texts) - len(vectors))
    wrong = sum(1 for text, v in zip(texts, vectors, strict=False)
                if v is None or not all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(v, stub_vector(text, dim), strict=True)))
    return missing + wrong


def _counts(url: str, before: dict[str, Any], batches: int) -> dict[str, Any]:
    """What the server saw since `before`, and the CPU seconds the client and the stub used."""
    after = stub_stats(url)
    requests = after["requests"] - before["requests"]
    return {"requests": requests, "batches": batches, "http_429": after["rejected"] - before["rejected"],
            "retries": requests - batches, "max_in_flight_seen": after["max_in_flight"],
            "client_cpu_s": round(after["client_cpu_s"] - before["client_cpu_s"], 3),
            "stub_cpu_s": round(after["cpu_s"] - before["cpu_s"], 3)}


async def _embed_phase(embedder: TextEmbedder, url: str, texts: list[str], call: int) -> dict[str, Any]:
    call = call or len(texts)
    before = stub_stats(url)
    vectors: list[list[float]] = []
    start = time.perf_counter()
    for i in range(0, len(texts), call):
        vectors += await embedder.embed_documents(texts[i : i + call])
    seconds = time.perf_counter() - start
    batches = sum(math.ceil(len(texts[i : i + call]) / embedder.batch_size) for i in range(0, len(texts), call))
    return {"texts": len(texts), "seconds": round(seconds, 3), "texts_per_s": round(len(texts) / seconds, 1),
            **_counts(url, before, batches), "lost": _lost(texts, vectors, embedder.dim)}


def _conversations(texts: Sequence[str], dataset: Path | None, limit: int | None) -> list[tuple[str, list[Any]]]:
    """(scope name, messages) per conversation: a LOCOMO file's samples, else one of `texts`."""
    if dataset is not None and dataset.suffix == ".json" and '"conversation"' in dataset.read_text(encoding="utf-8")[:100_000]:
        from memos.bench.locomo import load_locomo

        out, left = [], limit
        for conv in load_locomo(dataset, categories=()):
            messages = conv.messages[:left] if left is not None else conv.messages
            if messages:
                out.append((conv.sample_id, list(messages)))
            if left is not None and (left := left - len(messages)) <= 0:
                break
        return out
    return [("bench", [{"actor": "user", "text": t} for t in texts])]


async def _ingest_phase(embedder: TextEmbedder, url: str, conversations: list[tuple[str, list[Any]]],
                        db: Path) -> dict[str, Any]:
    from memos.memory import MemoryOS
    from memos.store.scope import Scope

    mem = await MemoryOS.open(db, embedder=embedder)
    before = stub_stats(url)
    start = time.perf_counter()
    for name, messages in conversations:
        await mem.ingest(Scope(name), messages)
    seconds = time.perf_counter() - start
    counts = _counts(url, before, 0)
    turns = sum(len(m) for _, m in conversations)
    lost = 0
    for name, messages in conversations:  # every turn stored, each with its own text's vector
        stored = await mem.list(Scope(name), "episodic", limit=None)
        vectors = await mem.stored_vectors(Scope(name), "episodic")
        lost += len(messages) - len(stored)
        lost += _lost([r.index_text() for r in stored], [vectors.get(r.id) for r in stored], embedder.dim)
    counts.pop("batches")
    counts.pop("retries")  # ingest's batches are its own affair: the server's counts only
    return {"turns": turns, "seconds": round(seconds, 3), "turns_per_s": round(turns / seconds, 1), **counts, "lost": lost}


def run_remote_bench(texts: Sequence[str], dataset: Path | None = None, *, limit: int | None = None,
                     stub: StubSettings = StubSettings(),
                     batch: int = 64, in_flight: int | None = None, call: int = 0, ingest: bool = True) -> dict[str, Any]:
    """The report of both phases (see the module docstring) on `texts` (`memos.bench.embedder.dataset_texts`
    of `dataset`, `limit`; a LOCOMO `dataset` is ingested by conversation); `call`: texts an
    `embed_documents` call (0: all in one, the embedder batching them)."""
    policy = RequestPolicy() if in_flight is None else RequestPolicy(max_in_flight=in_flight)
    texts = list(texts)
    import pydantic_ai.models

    report: dict[str, Any] = {"stub": {**vars(stub), "batch": batch}, "in_flight": policy.max_in_flight,
                              "retries_allowed": policy.retries, "call": call or "all", "dataset": str(dataset) if dataset else "synthetic"}
    with stub_process(stub) as url:

        async def phases() -> None:
            embedder = stub_embedder(url, stub.dim, batch=batch, policy=policy)
            await embedder.embed_documents(["warm-up"])  # the client built, a connection open
            report["embed"] = await _embed_phase(embedder, url, texts, call)
            if ingest:
                with tempfile.TemporaryDirectory(prefix="memos-remote-bench-") as tmp:
                    report["ingest"] = await _ingest_phase(embedder, url, _conversations(texts, dataset, limit), Path(tmp) / "db")

        allowed = pydantic_ai.models.ALLOW_MODEL_REQUESTS
        pydantic_ai.models.ALLOW_MODEL_REQUESTS = True  # the stub is on loopback: no network is reached
        try:
            asyncio.run(phases())
        finally:
            pydantic_ai.models.ALLOW_MODEL_REQUESTS = allowed
    return report
