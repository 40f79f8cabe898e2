"""The server's per-session locks: one holder per key at a time, and nothing kept once unused."""

import asyncio

from memos.keyed_locks import KeyedLocks


def test_one_holder_per_key_and_no_lock_kept_after_use():
    async def main() -> None:
        locks: KeyedLocks[str] = KeyedLocks()
        inside: dict[str, int] = {"a": 0, "b": 0}
        most: dict[str, int] = {"a": 0, "b": 0}
        order: list[str] = []

        async def turn(key: str, n: int) -> None:
            async with locks.hold(key):
                inside[key] += 1
                most[key] = max(most[key], inside[key])
                order.append(f"{key}{n}")
                await asyncio.sleep(0.01)
                inside[key] -= 1

        await asyncio.gather(*(turn("a", n) for n in range(5)), *(turn("b", n) for n in range(5)))
        assert most == {"a": 1, "b": 1}  # one holder of a key at a time
        assert order.index("b0") < order.index("a1")  # another key did not wait for the first
        assert len(locks) == 0  # nothing left behind for the keys that were used

        for n in range(1000):  # a server meeting many sessions keeps none of them
            async with locks.hold(f"session-{n}"):
                pass
        assert len(locks) == 0

        async def failing() -> None:
            async with locks.hold("a"):
                raise RuntimeError("a failed turn")

        try:
            await failing()
        except RuntimeError:
            pass
        assert len(locks) == 0  # released on an error too
        async with locks.hold("a"):  # and the key is usable again
            pass

    asyncio.run(main())


def test_the_servers_session_locks_are_dropped_after_the_request(tmp_path):
    from memos.serve.deps import ServeConfig, ServerState
    from memos.store.scope import Scope

    state = ServerState(ServeConfig(uri=tmp_path / "db"))

    async def main() -> None:
        for n in range(50):
            async with state.session_lock(Scope("alice", session_id=f"s{n}")):
                assert len(state._sessions) == 1
        assert len(state._sessions) == 0

    asyncio.run(main())
