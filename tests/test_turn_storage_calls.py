"""How many storage calls one chat turn makes (record the message, compile the context, record
the reply), counted by wrapping the `Storage` object's public methods.

A call made inside another counted call is not counted again. A "round trip" is a stretch of
time with at least one call in flight: calls issued together (`asyncio.gather`) share one, calls
awaited one after another take one each.

Figures for the turn below (a store with records in every store, no tool call, no manager):

| | storage calls | round trips |
|---|---|---|
| before (main at 7de71c6) | 38 | 21 |
| after one read per compile (six stores) | 36 | 12 |
| with the entity graph's two stores | 40 | 10 |
| one plan, reads remembered at table versions (six stores) | 28 | 11 |
| the same, with the entity graph's two stores | 30 | 11 |
| retrieval skips its emptiness checks for tables already seen (six stores) | 23 | 10 |
| the same, with the entity graph's two stores | 24 | 10 |
| one shared search table for the stores but the vault (`memos.store.lancedb.search_index`; six stores) | 20 | 10 |
| the shared table carries each record whole, and the vault's captions: no read by id, no vault query | 13 | 9 |
| a recorded turn's session state is written beside the turn's own commits, not after them | 13 | 7 (6 when they overlap) |
| the user's turn is committed while the context is compiled (`MemorySession.step`); the state names the next turns' ids, so recording them writes none | 11 | 7 (5-6 when they overlap) |
| a turn's history and shared-table rows are written behind it, in batches (`memos.store.lancedb.write_behind`) | 7 | 4 |
| the turn itself and the session's state are journaled and written with them (`memos.store.lancedb.journal`) | 5 | 3 |
| a search's full-text query starts while its query is embedded (`memos.retrieval.search`): it no longer shares the vector query's round trip, it runs beside the embedding | 5 | 4 |

What changed last: a step begins with one `versions` call (every table's latest version,
`Storage.versions`); what was read before and has not changed since is not read again
(`memos.store.read_cache`): the store counts (were six, eight with the graph), the core blocks, the
reflection state and the in-context turns (were read again at each recorded turn). This
process's own adds carry a remembered read forward (a count grows by the rows it counts), so
the turn just recorded does not make the compile read again. The compile plans the whole
context once (`memos.context.window.plan_step`) and renders once. Left: two version checks,
two appends and two history rows, two state writes, and retrieval's own calls (five vector +
five full-text searches, five winner reads, the entity graph's emptiness check; `memos.retrieval.search`).
Since then a top-k search of the default stores is the shared table's two queries alone: its rows
carry each record whole (no read of the winners by id) and the vault's captions (no vault query).
Retrieval asks storage only about tables whose emptiness it does not know yet
(`Storage.known_rows`: a table once seen with rows, or seen empty within `READ_CONSISTENCY`).
Last, the user's turn commits while the context is compiled, and the session state is written
every few turns, not at each one: it names the ids of the next turns (`memos.context.session.PLANNED_TURNS`).
Then a turn's history row and shared-table row are queued and written a moment later, several
turns' together (`memos.store.lancedb.write_behind`): a turn is one append to its store (and a state write
every few turns). Last, the turn's own row and the session's state are appended to the store's
journal (`memos.store.lancedb.journal`: durable, no LanceDB commit) and written with that batch: a turn's
storage calls are the step's version checks and retrieval's queries.
"""

from __future__ import annotations

import asyncio
import functools

from memos.memtypes import Episode, Fact, Procedure, Resource, VaultItem
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from memos import Scope
from memos.store.lancedb.storage import Storage

CALLS_AT_MOST = 5
ROUND_TRIPS_AT_MOST = 4


class StorageCounter:
    """Wraps every public coroutine method of one `Storage` object and counts the outermost calls."""

    def __init__(self, storage: Storage) -> None:
        self.loop = asyncio.get_running_loop()  # the turn's own path; queued rows are written on memos' background loop
        self.calls: list[str] = []
        self.timeline: list[tuple[int, str]] = []
        self.round_trips = 0
        self.in_flight = 0
        self._depth: dict[int, int] = {}
        for name in dir(Storage):
            if name.startswith("_") or not asyncio.iscoroutinefunction(getattr(Storage, name, None)):
                continue
            setattr(storage, name, self._wrap(name, getattr(storage, name)))

    def _wrap(self, name, method):
        @functools.wraps(method)
        async def counted(*args, **kwargs):
            if asyncio.get_running_loop() is not self.loop:  # a write-behind batch, off the turn's path
                return await method(*args, **kwargs)
            task = id(asyncio.current_task())
            outer = self._depth.get(task, 0) == 0
            if outer:
                if self.in_flight == 0:
                    self.round_trips += 1
                self.calls.append(name)
                self.timeline.append((self.round_trips, name))
                self.in_flight += 1
            self._depth[task] = self._depth.get(task, 0) + 1
            try:
                if outer:
                    await asyncio.sleep(0)  # calls issued together are all in flight before any ends, even a cached one
                return await method(*args, **kwargs)
            finally:
                self._depth[task] -= 1
                if outer:
                    self.in_flight -= 1

        return counted


async def test_one_chat_turn_makes_few_storage_calls(mem):
    scope = Scope("alice", "bot", "s1")
    await mem.add(scope, [Fact(subject="Alice", summary="Alice drinks green tea"), Procedure(summary="brew tea", steps=["boil"]),
                          Resource(title="tea.pdf", content="green tea guide"), Episode(actor="alice", summary="tea party"),
                          VaultItem(caption="tea shop card", secret="1234")])
    agent = mem.agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("Green tea, I remember.")])), scope)
    await agent.chat("Hello there")  # opens the session, seeds core blocks
    await mem.storage.settle()  # what that turn queued is written before the count starts
    counter = StorageCounter(mem.storage)
    await agent.chat("What tea do I like?")
    assert "Green tea" in agent.last.reply
    print(f"{len(counter.calls)} calls, {counter.round_trips} round trips: {counter.timeline}")
    assert len(counter.calls) <= CALLS_AT_MOST, counter.calls
    assert counter.round_trips <= ROUND_TRIPS_AT_MOST, counter.round_trips
    # the rows written behind the turns land: the exchange's history and shared rows
    await mem.storage.settle()
    turns = [t.id for t in (await agent.session()).context[-2:]]
    for turn in turns:
        assert [e.op for e in await mem.history(scope, turn)] == ["add"]
    assert {h.id for h in await mem.search("What tea do I like? Green tea, I remember.", scope, k=20)} >= set(turns)
