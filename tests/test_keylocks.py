"""Locks by key across the processes of a local store (`memos.store.lancedb.keylocks`)."""

from __future__ import annotations

import asyncio

import pytest

from memos.store.lancedb.keylocks import KeyLocks


async def test_a_key_has_one_holder_among_every_open_of_the_store_and_others_run_freely(tmp_path):
    here, there = KeyLocks(tmp_path), KeyLocks(tmp_path)  # two processes' views (a flock is per open file)
    order: list[str] = []

    async def hold(locks: KeyLocks, key: str, name: str, pause: float) -> None:
        async with locks.hold(key):
            order.append(f"{name} in")
            await asyncio.sleep(pause)
            order.append(f"{name} out")

    await asyncio.gather(hold(here, "s1", "a", 0.2), hold(there, "s1", "b", 0.0), hold(there, "s2", "c", 0.0))
    assert order.index("a out") < order.index("b in") or order.index("b out") < order.index("a in")  # never both
    assert order.index("c in") < order.index("a out") or order.index("c in") < order.index("b out")  # another key did not wait
    assert not list(tmp_path.glob(".memos-locks/*"))  # each holder removed its key's file as it let go


async def test_locks_of_different_keys_nest_in_one_task(tmp_path):
    """A core-block edit holds its label's lock while the supersede under it takes the record's.
    When keys shared files by hashing (1,024 of them), two such keys in one file waited for each
    other for ever; these two did."""
    import zlib

    first = "core\x1fu\x1fhuman"
    second = next(f"supersede\x1f{n:032x}" for n in range(100_000)
                  if zlib.crc32(f"supersede\x1f{n:032x}".encode()) % 1024 == zlib.crc32(first.encode()) % 1024)
    locks = KeyLocks(tmp_path)

    async def nested() -> str:
        async with locks.hold(first), KeyLocks(tmp_path).hold(second):
            return "held"

    assert await asyncio.wait_for(nested(), 5) == "held"


async def test_a_holder_cancelled_while_it_waits_leaves_the_lock_to_the_others(tmp_path):
    locks = KeyLocks(tmp_path)
    async with locks.hold("s1"):
        waiter = asyncio.create_task(_enter(KeyLocks(tmp_path), "s1"))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert await asyncio.wait_for(_enter(KeyLocks(tmp_path), "s1"), 5) == "held"


async def test_without_a_directory_the_lock_is_this_process_own():
    locks = KeyLocks(None)
    inside = 0
    peak = 0

    async def one() -> None:
        nonlocal inside, peak
        async with locks.hold("s1"):
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(one() for _ in range(5)))
    assert peak == 1


async def _enter(locks: KeyLocks, key: str) -> str:
    async with locks.hold(key):
        return "held"


async def test_any_string_is_a_key_a_lone_surrogate_too(tmp_path):
    """Keys carry what callers and models send (a core block's label): a string that is no valid
    UTF-8 still locks, and the caller's own validation decides what it means."""
    async with KeyLocks(tmp_path).hold("core\x1fu\x1f\ud800"):
        pass
