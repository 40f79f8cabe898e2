"""Live updates: what changed in a scope, pushed to the web view as server-sent events.

Every write the API makes publishes one small event (what, which store, which record ids);
each open `/v1/events` stream receives the events of its key's scope only. The bus is in
process: with several server processes on one store, a view sees at once the writes made
through its own process and the others' on its next refresh (the view also refreshes itself
every few seconds while its tab is open). A stream lives only as long as its key: it re-checks
the key before each event and every few seconds, and ends with a `revoked` event once it is gone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memos.store.scope import Scope

__all__ = ["EventBus", "sse_lines"]

QUEUE_SIZE = 256
HEARTBEAT_SECONDS = 15.0


@dataclass
class EventBus:
    """Fan-out of change events to the streams open in this process."""

    _queues: dict[asyncio.Queue[dict[str, Any]], Scope] = field(default_factory=dict)

    def publish(self, scope: Scope, kind: str, **data: Any) -> None:
        """Tell every stream that can see `scope`'s records about a change (a full queue drops it)."""
        event = {"kind": kind, "at": datetime.now(UTC).isoformat(), "user_id": scope.user_id,
                 "agent_id": scope.agent_id, **data}
        for queue, watching in list(self._queues.items()):
            if watching.user_id == scope.user_id and (watching.agent_id is None or watching.agent_id == (scope.agent_id or "")):
                try:
                    queue.put_nowait(event)
                except asyncio.QueueFull:
                    pass  # a stalled viewer misses events; it refreshes on the next one it gets

    async def stream(self, scope: Scope, *, alive: Callable[[], Awaitable[bool]] | None = None,
                     check_every: float = HEARTBEAT_SECONDS) -> AsyncIterator[dict[str, Any] | None]:
        """Events for `scope` as they come; None on a quiet interval (a heartbeat).

        `alive` (the caller's key check) is asked before each event and at least every
        `check_every` seconds; once it says no, a last `revoked` event ends the stream, so no
        event written after a revocation reaches a stream its process knows to be revoked."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._queues[queue] = scope
        wait = min(check_every, HEARTBEAT_SECONDS) if alive is not None else HEARTBEAT_SECONDS
        quiet = 0.0
        try:
            while True:
                try:
                    event: dict[str, Any] | None = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    event = None
                if alive is not None and not await alive():
                    yield {"kind": "revoked", "at": datetime.now(UTC).isoformat(),
                           "message": "this API key was revoked; the stream ends"}
                    return
                if event is not None:
                    quiet = 0.0
                    yield event
                    continue
                quiet += wait
                if quiet >= HEARTBEAT_SECONDS:
                    quiet = 0.0
                    yield None
        finally:
            self._queues.pop(queue, None)

    @property
    def listeners(self) -> int:
        return len(self._queues)


async def sse_lines(events: AsyncIterator[dict[str, Any] | None]) -> AsyncIterator[str]:
    """Server-sent-event framing: `event:`/`data:` lines, a comment line as heartbeat."""
    yield ": connected\n\n"
    async for event in events:
        if event is None:
            yield ": heartbeat\n\n"
        else:
            yield f"event: {event['kind']}\ndata: {json.dumps(event, default=str)}\n\n"
