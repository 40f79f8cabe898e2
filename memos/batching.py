"""Calls made at the same time, run as one: the coalescer behind group commit and batched queries.

A `Coalescer` takes items from many callers on one event loop and hands them to one function
as a list. There is no timer: the first item of an idle coalescer starts a batch at the loop's
next turn (every caller ready on that turn joins it); items that arrive while a batch runs wait
and form the next one. One caller alone pays nothing but that turn; many callers share one
embedding call or one commit per table (`memos.group_commit`, `TextEmbedder.embed_query`).

The queue is bounded (`QueueLimits.max_pending`: items waiting plus those in the running
batch). Past it a caller waits for room (`when_full="wait"`, the Python API's default) or gets
`OverloadedError` at once with a `retry_after` (`"raise"`: what `memos serve` uses to answer 503
with a Retry-After header); either way nothing of a refused call was taken. `Admission` is the
same bound for work that is not batched (a search's own reads).
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from .exceptions import ConfigError, OverloadedError

__all__ = ["Admission", "Coalescer", "Outcome", "QueueLimits"]

I = TypeVar("I")  # noqa: E741 - an item
O = TypeVar("O")  # noqa: E741 - its outcome

Outcome: TypeAlias = O | BaseException
"""What a batch gives back for one item: its result, or the error that fails that caller only."""


@dataclass(frozen=True)
class QueueLimits:
    """How much work may wait on one open memory, and what a caller past that meets."""

    max_pending: int = 1024
    """Calls that may wait or run at once in each queue (adds; searches), one at least."""
    when_full: Literal["wait", "raise"] = "wait"
    """"wait": the caller waits for room; "raise": `OverloadedError` at once (an HTTP 503)."""
    max_batch: int = 256
    """Calls one batch takes at most (the rest form the next)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise ConfigError(f"max_pending must be a positive int, got {self.max_pending!r}")
        if not isinstance(self.max_batch, int) or self.max_batch < 1:
            raise ConfigError(f"max_batch must be a positive int, got {self.max_batch!r}")
        if self.when_full not in ("wait", "raise"):
            raise ConfigError(f"when_full must be 'wait' or 'raise', got {self.when_full!r}")


@dataclass(eq=False)
class _Gate:
    """The bound of one queue on one loop: how many are in, and who waits for room."""

    inside: int = 0
    room: asyncio.Condition = field(default_factory=asyncio.Condition)
    seconds: float = 0.05
    """How long the last batch (or admitted call) took: the basis of `retry_after`."""


class Admission:
    """A bounded count of calls in progress on each event loop (`QueueLimits`)."""

    def __init__(self, what: str, limits: Callable[[], QueueLimits]) -> None:
        self.what = what
        self.limits = limits
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gate] = weakref.WeakKeyDictionary()

    def gate(self) -> _Gate:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = _Gate()
        return gate

    async def enter(self, count: int = 1) -> _Gate:
        """Take `count` places, waiting for room or raising `OverloadedError` as `limits` says."""
        limits, gate = self.limits(), self.gate()
        if gate.inside + count > limits.max_pending and gate.inside > 0:
            if limits.when_full == "raise":
                raise OverloadedError(self.what, gate.inside, self.retry_after(gate, limits))
            async with gate.room:
                await gate.room.wait_for(lambda: gate.inside == 0 or gate.inside + count <= self.limits().max_pending)
        gate.inside += count
        return gate

    def inside(self) -> int:
        """Calls in progress now, on every loop."""
        return sum(gate.inside for gate in list(self._gates.values()))

    async def leave(self, gate: _Gate, count: int = 1) -> None:
        gate.inside -= count
        async with gate.room:
            gate.room.notify_all()

    def retry_after(self, gate: _Gate, limits: QueueLimits) -> float:
        """Seconds after which the calls ahead are likely done: the batches they make, at the
        last batch's pace (one second at least)."""
        return float(max(1, math.ceil(gate.seconds * math.ceil(gate.inside / limits.max_batch))))

    async def run(self, work: Awaitable[O]) -> O:
        """Await `work` inside the bound (the work is not started when the call is refused)."""
        try:
            gate = await self.enter()
        except BaseException:
            if asyncio.iscoroutine(work):
                work.close()
            raise
        started = time.monotonic()
        try:
            return await work
        finally:
            gate.seconds = time.monotonic() - started
            await self.leave(gate)


@dataclass(eq=False)
class _Queue(Generic[I, O]):
    waiting: list[tuple[I, asyncio.Future[O]]] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None


class Coalescer(Generic[I, O]):
    """`submit(item)` from many callers; `run(items)` once per batch (see the module docstring).

    `run` returns one `Outcome` per item, in order: an exception there fails that caller alone;
    an exception raised by `run` itself fails the whole batch."""

    def __init__(self, what: str, run: Callable[[list[I]], Awaitable[Sequence[Outcome[O]]]],
                 limits: Callable[[], QueueLimits] = QueueLimits, linger: Callable[[int, float], float] | None = None) -> None:
        self.run = run
        self.limits = limits
        self.linger = linger
        """Seconds the next batch waits for more callers, given the last batch's callers and
        duration (none by default: a batch starts once the one before it has ended)."""
        self.admission = Admission(what, limits)
        self.batches = 0
        """Batches run so far (all loops): fewer than the calls when calls were coalesced."""
        self.calls = 0
        """Calls submitted so far (all loops)."""
        self.busy_s = 0.0
        """Seconds its batches have run, summed (all loops)."""
        self.waited_s = 0.0
        """Seconds batches have waited for more callers (`linger`), summed (all loops)."""
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue[I, O]] = weakref.WeakKeyDictionary()

    async def submit(self, item: I) -> O:
        """Queue `item` for the next batch and wait for its outcome."""
        gate = await self.admission.enter()
        try:
            loop = asyncio.get_running_loop()
            queue = self._queues.get(loop)
            if queue is None:
                queue = self._queues[loop] = _Queue()
            future: asyncio.Future[O] = loop.create_future()
            future.add_done_callback(_retrieved)  # a cancelled caller's error is not logged as lost
            queue.waiting.append((item, future))
            self.calls += 1
            if queue.runner is None:
                queue.runner = loop.create_task(self._drain(queue, gate))
            return await asyncio.shield(future)  # a cancelled caller's item is still written whole, or not at all
        finally:
            await self.admission.leave(gate)

    async def _drain(self, queue: _Queue[I, O], gate: _Gate) -> None:
        await asyncio.sleep(0)  # the callers ready on this turn of the loop join the first batch
        try:
            last: tuple[int, float] | None = None
            while queue.waiting:
                if last is not None and self.linger is not None and (wait := self.linger(*last)) > 0:
                    self.waited_s += wait
                    await asyncio.sleep(wait)  # the callers that arrive meanwhile join this batch
                taken, queue.waiting = queue.waiting[: self.limits().max_batch], queue.waiting[self.limits().max_batch :]
                self.batches += 1
                started = time.monotonic()
                try:
                    outcomes: Sequence[Outcome[O]] = await self.run([item for item, _ in taken])
                except Exception as exc:  # the whole batch failed: every caller in it hears why
                    outcomes = [exc] * len(taken)
                except BaseException:  # the loop is ending: nobody waits for these any more
                    for _, future in taken:
                        future.cancel()
                    raise
                finally:
                    gate.seconds = time.monotonic() - started
                    self.busy_s += gate.seconds
                    last = (len(taken), gate.seconds)
                for (_, future), outcome in zip(taken, outcomes, strict=True):
                    if future.done():
                        continue
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            queue.runner = None
            for _, future in queue.waiting:  # left behind by a cancelled drain
                future.cancel()
            queue.waiting = []


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
