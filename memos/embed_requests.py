"""How a remote embedder is called: batches of the provider's size, a bounded number in flight,
retries with backoff on rate limits and server errors.

An ingest hands the embedder thousands of texts; one request at a time leaves a fast server idle
between round trips, and an unbounded burst meets the provider's rate limit. Batches go out at
most `max_in_flight` at a time (`InFlight`: across every call of one embedder, so that
concurrent ingests and an ingest's embed-ahead share the bound); a batch answered 429, 408 or 5xx (or not at all: a dropped
connection) is tried again after the server's `Retry-After` (or `retry-after-ms`) when it sent
one, else after an exponential backoff with jitter. After the last try the call fails with
`EmbedderUnavailableError`, and since the caller stores nothing before every vector of its call
is back, nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from .exceptions import EmbedderUnavailableError

__all__ = ["InFlight", "RequestPolicy", "embed_in_batches", "retry_after", "transient"]

Batch = Callable[[list[str]], Awaitable[Sequence[Sequence[float]]]]


@dataclass(frozen=True)
class RequestPolicy:
    """How many requests go out at once and how failed ones are tried again."""

    max_in_flight: int = 8
    """Requests awaiting their answer at once (a server's concurrency; a rate limit's burst)."""
    retries: int = 6
    """Tries after the first, for a batch answered 429 / 408 / 5xx or not answered."""
    backoff_s: float = 0.25
    """The first wait without a `Retry-After`; it doubles each try (with jitter), up to `max_wait_s`."""
    max_wait_s: float = 30.0
    """The longest wait between two tries, `Retry-After` included."""


class InFlight:
    """One embedder's bound on requests in flight, shared by all its calls: a semaphore of
    `max_in_flight` per event loop (an asyncio semaphore belongs to the loop it first ran on)."""

    def __init__(self, policy: RequestPolicy) -> None:
        self.size = max(1, policy.max_in_flight)
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()

    def gate(self) -> asyncio.Semaphore:
        """The running loop's semaphore."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.size)
        return gate


async def embed_in_batches(call: Batch, texts: Sequence[str], batch_size: int, policy: RequestPolicy, *, name: str,
                           sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                           in_flight: InFlight | None = None) -> list[list[float]]:
    """The vectors of `texts` in order: `call` on batches of `batch_size`, as `policy` says
    (`in_flight`: a bound shared with other calls; else this call's own)."""
    batches = [list(texts[start : start + batch_size]) for start in range(0, len(texts), batch_size)]
    results: list[list[list[float]]] = [[] for _ in batches]
    gate = (in_flight or InFlight(policy)).gate()

    async def one(index: int) -> None:
        async with gate:
            results[index] = await _with_retries(call, batches[index], policy, name, sleep)

    tasks = [asyncio.ensure_future(one(i)) for i in range(len(batches))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return [vector for batch in results for vector in batch]


async def _with_retries(call: Batch, batch: list[str], policy: RequestPolicy, name: str,
                        sleep: Callable[[float], Awaitable[Any]]) -> list[list[float]]:
    for attempt in range(policy.retries + 1):
        try:
            vectors = [v if type(v) is list else list(v) for v in await call(batch)]  # no copy of a list
        except Exception as exc:  # the provider's own error type; only transient ones are tried again
            if not transient(exc):
                raise
            if attempt == policy.retries:
                raise EmbedderUnavailableError(
                    f"embedder {name} failed a batch of {len(batch)} texts {attempt + 1} times; the last: "
                    f"{type(exc).__name__}: {exc}. Nothing of this call was stored; try again later, or lower "
                    "the embedder's max_in_flight / batch_size") from exc
            wait = retry_after(exc)
            if wait is None:
                wait = policy.backoff_s * 2 ** attempt * random.uniform(0.5, 1.0)
            await sleep(min(max(wait, 0.0), policy.max_wait_s))
            continue
        if len(vectors) != len(batch):
            raise EmbedderUnavailableError(f"embedder {name} returned {len(vectors)} vectors for {len(batch)} texts")
        return vectors
    raise AssertionError("unreachable")  # the loop returns or raises


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def transient(exc: BaseException) -> bool:
    """True for a failure worth another try: HTTP 408 / 425 / 429 / 5xx, or no answer at all."""
    status = _status(exc)
    if status is not None:
        return status in (408, 425, 429) or status >= 500
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    # pydantic-ai's and httpx's connection errors, by name: memos does not import either here
    return any(cls.__name__ in ("ModelConnectionError", "TransportError", "APIConnectionError") for cls in type(exc).__mro__)


def _headers(exc: BaseException) -> Mapping[str, str]:
    headers = getattr(exc, "headers", None)  # pydantic-ai's ModelHTTPError (keys lowercased)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)  # httpx / openai errors
    return {str(k).lower(): str(v) for k, v in dict(headers or {}).items()}


def retry_after(exc: BaseException, now: datetime | None = None) -> float | None:
    """The wait in seconds the server asked for in `exc`'s response, if it asked:
    `retry-after-ms`, or `Retry-After` as seconds or as an HTTP date."""
    headers = _headers(exc)
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            return (parsedate_to_datetime(value) - (now or datetime.now(UTC))).total_seconds()
    except (TypeError, ValueError):  # a header that is neither: back off as without one
        return None
