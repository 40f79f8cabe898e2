"""Live updates: what changed in a scope, pushed to the web view as server-sent events.

Every write the API makes publishes one small event (what, which store, which record ids);
each open `/v1/events` stream receives the events of its key's scope only. With several server
processes on one local store (`--workers N`), each also posts its events for the others
(`memos.store.lancedb.notices`) and, while it has a stream open, reads theirs every `POLL_SECONDS`:
a view sees the writes made through any worker, not only its own (on object storage, only its own
worker's, and the others' on its next refresh: the view also refreshes itself every few seconds).
A stream lives only as long as its key: it re-checks the key before each event and every few
seconds, and ends with a `revoked` event once it is gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memos.store.protocol import NoticeBoard
from memos.store.scope import Scope

__all__ = ["EventBus", "sse_lines"]

log = logging.getLogger(__name__)

QUEUE_SIZE = 256
HEARTBEAT_SECONDS = 15.0
POLL_SECONDS = 0.2
"""How often a process with a stream open reads the events the store's other processes posted."""


@dataclass
class EventBus:
    """Fan-out of change events to the streams open in this process: its own events, and those the
    store's other processes post (`attach`)."""

    _queues: dict[asyncio.Queue[dict[str, Any]], Scope] = field(default_factory=dict)
    _notices: NoticeBoard | None = None
    _polling: asyncio.Task[None] | None = None

    def attach(self, notices: NoticeBoard) -> None:
        """Post this process's events for the store's other processes, and read theirs while a stream is open."""
        self._notices = notices

    def publish(self, scope: Scope, kind: str, **data: Any) -> None:
        """Tell every stream that can see `scope`'s records about a change (a full queue drops it),
        in this process and in the store's others."""
        event = {"kind": kind, "at": datetime.now(UTC).isoformat(), "user_id": scope.user_id,
                 "agent_id": scope.agent_id, **data}
        self._deliver(event)
        if self._notices is not None:
            try:  # the user as the store's pseudonym: no notice file names them
                self._notices.post({**event, "user_id": None, "who": self._notices.pseudonym(scope.user_id)})
            except OSError as exc:  # the write it tells of is done: the other workers' views see it on their refresh
                log.warning("could not post an event for the store's other processes: %s", exc)

    def _deliver(self, event: dict[str, Any], who: str | None = None) -> None:
        """Queue `event` for the streams that can see it: of its user (or the user `who` names, a
        pseudonym: another process's event) and, for a stream of one agent, of that agent."""
        for queue, watching in list(self._queues.items()):
            if who is None:
                if watching.user_id != event.get("user_id"):
                    continue
            elif self._notices is None or self._notices.pseudonym(watching.user_id) != who:
                continue
            if watching.agent_id is None or watching.agent_id == (event.get("agent_id") or ""):
                try:
                    queue.put_nowait(event if who is None else {**event, "user_id": watching.user_id})
                except asyncio.QueueFull:
                    pass  # a stalled viewer misses events; it refreshes on the next one it gets

    async def _poll(self, notices: NoticeBoard) -> None:
        """Deliver the other processes' events while streams are open here."""
        try:
            while self._queues:
                await asyncio.sleep(POLL_SECONDS)
                try:
                    posted = notices.read()
                except OSError as exc:  # this process's own events still flow
                    log.warning("could not read the events of the store's other processes: %s", exc)
                    posted = []
                for event in posted:
                    if isinstance(event, dict) and "kind" in event and isinstance(who := event.pop("who", None), str):
                        self._deliver(event, who)
        finally:
            notices.stop()
            self._polling = None

    def close(self) -> None:
        """This process posts no more (its server stops): its notices are removed."""
        if self._notices is not None:
            self._notices.close()
            self._notices = None

    def stream(self, scope: Scope, *, alive: Callable[[], Awaitable[bool]] | None = None,
               check_every: float = HEARTBEAT_SECONDS) -> AsyncIterator[dict[str, Any] | None]:
        """Events for `scope` as they come; None on a quiet interval (a heartbeat).

        `alive` (the caller's key check) is asked before each event and at least every
        `check_every` seconds; once it says no, a last `revoked` event ends the stream, so no
        event written after a revocation reaches a stream its process knows to be revoked."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._queues[queue] = scope  # now, not when the response starts reading: no event after this call is missed
        if self._notices is not None and self._polling is None:
            self._notices.skip()  # the others' events from now on
            self._polling = asyncio.create_task(self._poll(self._notices))
        events = self._events(queue, alive, check_every)
        weakref.finalize(events, self._queues.pop, queue, None)  # a stream never read (its client left at once) lets go too
        return events

    async def _events(self, queue: asyncio.Queue[dict[str, Any]], alive: Callable[[], Awaitable[bool]] | None,
                      check_every: float) -> AsyncIterator[dict[str, Any] | None]:
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
