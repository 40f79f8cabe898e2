"""Live updates: what changed in a scope, pushed to the web view as server-sent events.

Every write the API makes publishes one small event (what, which store, which record ids);
each open `/v1/events` stream receives the events of its key's scope only. The bus is in
process: with several server processes on one store, a view sees at once the writes made
through its own process and the others' on its next refresh (the view also refreshes itself
every few seconds while its tab is open).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
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

    async def stream(self, scope: Scope) -> AsyncIterator[dict[str, Any] | None]:
        """Events for `scope` as they come; None on a quiet interval (a heartbeat)."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._queues[queue] = scope
        try:
            while True:
                try:
                    yield await asyncio.wait_for(queue.get(), HEARTBEAT_SECONDS)
                except TimeoutError:
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
