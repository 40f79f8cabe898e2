"""One helper that turns the async core into `*_sync` methods.

memos is written once, async. Synchronous callers (scripts, notebooks, the CLI) get a
`name_sync` twin of every public coroutine method: one line in the class body
(`add_sync = sync_twin(add)`), typed like the coroutine, never a hand-copied body;
`check_sync_twins` fails a class that lacks one.
Coroutines run on one private event loop in a daemon thread, so a sync call also works
from inside a running loop (Jupyter) and LanceDB's async handles always see the same loop.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = [
    "BEST_EFFORT_GRACE",
    "EXIT_SETTLE",
    "background_loop",
    "best_effort",
    "check_sync_twins",
    "run_sync",
    "sync_classmethod_twin",
    "sync_twin",
]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_lock = threading.Lock()
log = logging.getLogger("memos")
_best_effort: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

EXIT_SETTLE = 0.1
"""Seconds exit waits once memos' loop has stopped, before the interpreter finalizes. A LanceDB
call resolves its Python future from one of LanceDB's own threads, which holds a Python thread
state for a moment after the result is delivered; the interpreter finalizing in that moment
aborts the process ("PyGILState_Release: thread state ... must be current when releasing", exit
134). Rows a chat wrote at exit (`memos.store.lancedb.write_behind`) made it likely: 9 of 170 runs of a
`chat_sync` script that ends at once, on two loaded cores; 0 of 80 with this wait."""

BEST_EFFORT_GRACE = 2.0
"""Seconds exit waits for best-effort background work (a table's automatic compaction) before
cancelling it. Such work redoes itself later; a compaction that LanceDB kept retrying against
other processes' commits made every writer of a busy store hang for the whole 60 s exit wait."""


def best_effort(task: asyncio.Task[T]) -> asyncio.Task[T]:
    """Mark a task as work that exit need not finish: the next writer or the maintenance job
    does it again (`Storage._committed`'s compactions). Exit waits `BEST_EFFORT_GRACE` for it,
    then cancels it, where other unfinished work gets up to 60 s."""
    _best_effort.add(task)
    return task


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="memos-sync-loop", daemon=True)
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def background_loop() -> asyncio.AbstractEventLoop | None:
    """The memos background loop's thread (started if needed), where work that must not wait on
    any caller's event loop runs; None while the process exits (that loop is being stopped)."""
    return None if _exiting else _background_loop()


_exiting = False


def exiting() -> bool:
    """Whether the interpreter is exiting and memos' loop is finishing its work: no new
    best-effort work (a background compaction) should start then."""
    return _exiting


async def _finish_pending(timeout: float, grace: float = BEST_EFFORT_GRACE) -> int:
    """Let the loop's unfinished tasks end (up to `timeout` s; `best_effort` ones up to `grace`
    s); cancel the rest; return how many cancelled tasks were not best-effort. Tasks that those
    tasks start meanwhile (rows written behind a turn: `memos.store.lancedb.write_behind`) are waited for too."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    late: set[asyncio.Task[Any]] = set()
    while required := [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()
                       and t not in _best_effort and t not in late]:
        _, waiting = await asyncio.wait(required, timeout=max(0.0, deadline - loop.time()))
        late |= waiting
        if loop.time() >= deadline:
            break
    optional = {t for t in asyncio.all_tasks() if t in _best_effort}
    still = [t for t in optional if not t.done()]
    if still:
        _, skipped = await asyncio.wait(still, timeout=grace)
        if skipped:
            log.info("memos: %d background compaction(s) left to the next writer or the maintenance job at exit", len(skipped))
        late |= skipped
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    return len(late - optional)


@atexit.register
def _stop_background_loop() -> None:
    """At interpreter exit, finish the private loop's work and stop it before its thread dies.

    A task left running there (a background memory-manager run nobody flushed) may be inside
    native code in a worker thread (torch computing an embedding) when the interpreter
    finalizes, which aborts the process ("terminate called without an active exception",
    exit 134). So exit waits for such tasks (at most 60 s), then cancels what is left."""
    global _exiting
    loop, thread = _loop, _thread
    if loop is None or loop.is_closed() or not loop.is_running():
        return
    _exiting = True
    try:
        late = asyncio.run_coroutine_threadsafe(_finish_pending(60.0), loop).result(timeout=90)
    except TimeoutError:
        late = -1
    if late:
        log.warning("memos: background work still running at exit was cancelled "
                    "(call `flush()` / `flush_sync()` on an agent before exiting to keep it)")
    loop.call_soon_threadsafe(loop.stop)
    if thread is not None:
        thread.join(timeout=10)
    time.sleep(EXIT_SETTLE)  # LanceDB's threads let go of Python before it finalizes


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous code and return its result.

    Called from a coroutine that itself runs on memos' loop it could only wait for itself
    forever; it raises `MemoryOSError` at once instead, naming the fix (await the async form).
    """
    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never awaited: close it so Python does not warn about it
        from .exceptions import MemoryOSError

        raise MemoryOSError("a *_sync method (or run_sync) was called from code already running on memos' "
                            "own event loop, where it would wait for itself forever; await the async method instead")
    future = asyncio.run_coroutine_threadsafe(_as_coroutine(awaitable), loop)
    result = future.result()
    if isinstance(result, _Escaped):
        raise result.exc
    return result


class _Escaped:
    """A SystemExit / KeyboardInterrupt raised inside a coroutine run by `run_sync`, carried to the caller."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def _as_coroutine(awaitable: Awaitable[T]) -> T | _Escaped:
    # asyncio lets SystemExit escape a task and kill the loop's thread, leaving the caller waiting
    # forever (rich raises SystemExit when stdout is a closed pipe: `memos demo | head` hung).
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        return _Escaped(exc)


def sync_twin(fn: Callable[P, Awaitable[T]]) -> Callable[P, T]:
    """The `*_sync` twin of a coroutine function: `add_sync = sync_twin(add)` in a class body
    gives a method with `add`'s parameters that returns what `add` awaits (`run_sync`)."""

    @functools.wraps(fn)
    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(fn(*args, **kwargs))

    twin.__doc__ = f"Synchronous form of `{fn.__name__}`.\n\n{fn.__doc__ or ''}"
    twin.__name__ = twin.__qualname__ = f"{fn.__name__}_sync"
    return twin


def sync_classmethod_twin(fn: Callable[Concatenate[type[S], P], Awaitable[T]]) -> classmethod[S, P, T]:
    """`sync_twin` of an async classmethod: `open_sync = sync_classmethod_twin(open)`."""
    func: Any = fn.__func__ if isinstance(fn, classmethod) else fn  # in a class body `open` is the classmethod
    return classmethod(sync_twin(func))


def check_sync_twins(cls: type[T]) -> type[T]:
    """Class decorator: every public `async def name` (incl. classmethods) has its `name_sync`
    twin, written with `sync_twin` in the class body so type checkers see it; checked when the
    class is defined."""
    missing = [name for name, attr in vars(cls).items() if not name.startswith("_") and f"{name}_sync" not in vars(cls)
               and inspect.iscoroutinefunction(attr.__func__ if isinstance(attr, classmethod) else attr)]
    if missing:
        raise TypeError(f"{cls.__name__} lacks the sync twins of {missing}: add `name_sync = sync_twin(name)` to its body")
    return cls
