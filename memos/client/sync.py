"""`Client`: `AsyncClient` for synchronous code, every call run on memos' private loop (`memos._sync`).

No second implementation: each method is the async one, run to completion by `blocking` (the
way `sync_twin` makes the facade's `*_sync` twins). Each method is there under both names,
`add` and `add_sync`, so code written against `MemoryOS.open_sync(...)` and its `*_sync` calls
runs unchanged once that one line opens a `Client` instead:

    memory = MemoryOS.open_sync("memory")   ->   memory = Client("http://host:8077", key=KEY)
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from memos._sync import run_sync
from memos.memtypes import MemoryRecord
from memos.store.scope import Scope

from .async_ import AsyncClient, RemoteCore

__all__ = ["Client", "Core", "blocking"]

P = ParamSpec("P")
T = TypeVar("T")
A = TypeVar("A")


def blocking(method: Callable[Concatenate[A, P], Awaitable[T]]) -> Callable[Concatenate[Any, P], T]:
    """The synchronous form of an async method of the object a wrapper holds as `remote`:
    `add = blocking(AsyncClient.add)` in `Client`'s body."""

    @functools.wraps(method)
    def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(method(self.remote, *args, **kwargs))

    return call


class Client:
    """The memory of a `memos serve` at `url`, through the API key `key`, with the facade's calls
    (synchronous; `AsyncClient` documents them). Close it, or use it as a context manager."""

    def __init__(self, url: str, *, key: str, types: Sequence[type[MemoryRecord]] = (), timeout: float = 60.0) -> None:
        self.remote = AsyncClient(url, key=key, types=types, timeout=timeout)
        """The async client every call runs on (its connections live on memos' private loop)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def core(self, scope: Scope) -> Core:
        """The core blocks of `scope`'s agent, as `CoreMemory(memory, scope)` in process."""
        return Core(self.remote.core(scope))

    close = blocking(AsyncClient.close)
    add = add_sync = blocking(AsyncClient.add)
    get = get_sync = blocking(AsyncClient.get)
    update = update_sync = blocking(AsyncClient.update)
    supersede = supersede_sync = blocking(AsyncClient.supersede)
    delete = delete_sync = blocking(AsyncClient.delete)
    history = history_sync = blocking(AsyncClient.history)
    search = search_sync = blocking(AsyncClient.search)
    ingest = ingest_sync = blocking(AsyncClient.ingest)
    export = export_sync = blocking(AsyncClient.export)
    forget = forget_sync = blocking(AsyncClient.forget)
    request = blocking(AsyncClient.request)


class Core:
    """The core blocks of one scope's agent, synchronous (`RemoteCore`'s calls)."""

    def __init__(self, remote: RemoteCore) -> None:
        self.remote = remote

    blocks = blocking(RemoteCore.blocks)
    get = blocking(RemoteCore.get)
    append = blocking(RemoteCore.append)
    replace = blocking(RemoteCore.replace)
    rethink = blocking(RemoteCore.rethink)
