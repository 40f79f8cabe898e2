"""Remote embedders are called in provider-sized batches, several at once, and retried on rate
limits and server errors, against a loopback OpenAI-compatible stub (tests/openai_stub.py)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from openai_stub import STUB_DIM, serve_stub, stub_vector  # noqa: E402

from memos import MemoryOS, Scope  # noqa: E402
from memos.embed_requests import RequestPolicy, retry_after, transient  # noqa: E402
from memos.embeddings import TextEmbedder  # noqa: E402
from memos.exceptions import EmbedderUnavailableError  # noqa: E402

ALICE = Scope("alice")


@pytest.fixture(autouse=True)
def _loopback_requests(monkeypatch):
    """Requests to the loopback stub are allowed (no network is reached)."""
    import pydantic_ai.models

    monkeypatch.setattr(pydantic_ai.models, "ALLOW_MODEL_REQUESTS", True)


def _embedder(url: str, *, batch_size: int = 64, policy: RequestPolicy | None = None) -> TextEmbedder:
    from openai import AsyncOpenAI
    from pydantic_ai.embeddings import Embedder
    from pydantic_ai.embeddings.openai import OpenAIEmbeddingModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=url, api_key="stub", max_retries=0)  # memos' retries alone are measured
    model = OpenAIEmbeddingModel("stub-embed", provider=OpenAIProvider(openai_client=client))
    options = {"requests": policy} if policy is not None else {}  # the default policy unless a test sets one
    return TextEmbedder("openai:stub-embed", STUB_DIM, Embedder(model), batch_size=batch_size, **options)


async def test_batches_go_out_several_at_once_and_429s_are_retried_after_retry_after():
    texts = [f"turn number {i}" for i in range(1280)]
    with serve_stub() as stub:
        stub.setup_embeddings(latency_s=0.02, reject_every=10, retry_after_ms=30)
        vectors = await _embedder(stub.url).embed_documents(texts)
    assert [pytest.approx(v) for v in vectors] == [stub_vector(t) for t in texts]  # every text, in order
    assert max(stub.batch_sizes) == 64 and sum(stub.batch_sizes) == len(texts)  # none lost, none twice
    assert stub.rejected >= 2
    assert 2 <= stub.max_in_flight <= 8


async def test_a_batch_that_keeps_failing_is_a_memos_error_and_nothing_is_stored(tmp_path):
    with serve_stub() as stub:
        embedder = _embedder(stub.url, batch_size=4, policy=RequestPolicy(retries=2, backoff_s=0.01))
        mem = await MemoryOS.open(tmp_path / "db", embedder=embedder)
        stub.setup_embeddings(fail_after=0)  # every request from now on: 503
        with pytest.raises(EmbedderUnavailableError, match="failed a batch of [24] texts 3 times.*503"):  # batches of 4, 4 and 2 in flight: whichever gives up last is named
            await mem.ingest(ALICE, [{"speaker": "alice", "text": f"turn {i}"} for i in range(10)])
        assert 3 <= stub.calls <= 9  # three batches in flight, each tried three times at most
    assert (await mem.counts(ALICE)).get("episodic", 0) == 0


async def test_ingest_acknowledges_only_what_it_stored(tmp_path, monkeypatch):
    """A failure in the third batch: the two stored batches were reported, nothing after them."""
    import memos.services

    monkeypatch.setattr(memos.services, "INGEST_CHUNK", 4)
    with serve_stub() as stub:
        # one request at a time: the first two batches' requests are the first two the server answers
        embedder = _embedder(stub.url, batch_size=4, policy=RequestPolicy(retries=1, backoff_s=0.01, max_in_flight=1))
        mem = await MemoryOS.open(tmp_path / "db", embedder=embedder)
        stub.setup_embeddings(fail_after=2)  # the first two batches embed, then 503s
        reported: list[int] = []
        with pytest.raises(EmbedderUnavailableError):
            await mem.ingest(ALICE, [{"speaker": "alice", "text": f"turn {i}"} for i in range(12)], progress=reported.append)
    stored = await mem.list(ALICE, "episodic", limit=None)
    assert reported == [4, 4] and len(stored) == 8


async def test_batches_embedded_ahead_are_acknowledged_only_once_stored(tmp_path, monkeypatch):
    """A remote embedder embeds several batches ahead of the one being written; a failure in a
    later batch still reports exactly the stored batches, in order."""
    import memos.services

    monkeypatch.setattr(memos.services, "INGEST_CHUNK", 4)
    with serve_stub() as stub:
        embedder = _embedder(stub.url, batch_size=4, policy=RequestPolicy(retries=1, backoff_s=0.01))
        mem = await MemoryOS.open(tmp_path / "db", embedder=embedder)
        stub.setup_embeddings(latency_s=0.01, fail_after=memos.services.EMBED_AHEAD + 1)  # the first batches' requests only
        reported: list[int] = []
        with pytest.raises(EmbedderUnavailableError):
            await mem.ingest(ALICE, [{"speaker": "alice", "text": f"turn {i}"} for i in range(40)], progress=reported.append)
    stored = sorted(int(r.text.split()[2]) for r in await mem.list(ALICE, "episodic", limit=None))
    assert reported == [4] * (memos.services.EMBED_AHEAD + 1) and stored == list(range(4 * len(reported)))


async def test_concurrent_calls_share_the_embedders_in_flight_bound():
    """Two ingests at once (or an ingest's batches embedded ahead) stay within one `max_in_flight`."""
    import asyncio

    texts = [f"turn number {i}" for i in range(640)]
    with serve_stub() as stub:
        stub.setup_embeddings(latency_s=0.03)
        embedder = _embedder(stub.url, batch_size=16, policy=RequestPolicy(max_in_flight=4))
        first, second = await asyncio.gather(embedder.embed_documents(texts), embedder.embed_documents(texts[::-1]))
    assert first == second[::-1] and [pytest.approx(v) for v in first] == [stub_vector(t) for t in texts]
    assert stub.max_in_flight == 4


async def test_ingest_through_a_rate_limited_server_loses_nothing(tmp_path):
    texts = [f"alice: turn {i} about bees" for i in range(300)]
    with serve_stub() as stub:
        mem = await MemoryOS.open(tmp_path / "db", embedder=_embedder(stub.url, batch_size=16))
        stub.setup_embeddings(latency_s=0.005, reject_every=10, retry_after_ms=20)
        await mem.ingest(ALICE, [{"speaker": "alice", "text": f"turn {i} about bees"} for i in range(300)])
        assert stub.rejected >= 2
    vectors = await mem.stored_vectors(ALICE, "episodic")
    stored = {r.id: r.index_text() for r in await mem.list(ALICE, "episodic", limit=None)}
    assert sorted(stored.values()) == sorted(texts)
    assert all(vectors[i] == pytest.approx(stub_vector(text)) for i, text in stored.items())


class _HTTPError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code, self.headers = status, headers or {}


def test_what_is_retried_and_how_long_to_wait():
    assert transient(_HTTPError(429)) and transient(_HTTPError(503)) and transient(_HTTPError(408))
    assert not transient(_HTTPError(400)) and not transient(_HTTPError(401)) and not transient(ValueError("bad"))
    assert transient(ConnectionResetError()) and transient(TimeoutError())
    assert retry_after(_HTTPError(429, {"retry-after": "2"})) == 2.0
    assert retry_after(_HTTPError(429, {"retry-after": "1", "retry-after-ms": "250"})) == 0.25
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after(_HTTPError(429, {"retry-after": format_datetime(now + timedelta(seconds=5), usegmt=True)}), now) == 5.0
    assert retry_after(_HTTPError(429, {"retry-after": "soon"})) is None
    assert retry_after(_HTTPError(429)) is None


async def test_the_wait_is_the_servers_retry_after():
    from memos.embed_requests import embed_in_batches

    waits: list[float] = []
    calls = 0

    async def call(batch: list[str]) -> list[list[float]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise _HTTPError(429, {"retry-after": "7"})
        return [[1.0] for _ in batch]

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    got = await embed_in_batches(call, ["a", "b"], 2, RequestPolicy(), name="x", sleep=sleep)
    assert got == [[1.0], [1.0]] and waits == [7.0]
    start = time.monotonic()
    with pytest.raises(ValueError):  # a client error is not retried
        await embed_in_batches(lambda b: (_ for _ in ()).throw(ValueError("bad input")), ["a"], 2, RequestPolicy(), name="x")  # type: ignore[arg-type, return-value]
    assert time.monotonic() - start < 1
