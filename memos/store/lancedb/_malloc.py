"""Memory settings for long-running memos processes: glibc's allocator (no-ops elsewhere) and
Python's cyclic collector.

LanceDB's and torch's worker threads each get a glibc malloc arena by default (up to 8 per
core), and freed memory stays in them. A process that embeds, writes and compacts for hours
(a worker, an agent, `memos bench scale`) then holds hundreds of MB it no longer uses. The
`memos` command limits arenas at start (`limit_malloc_arenas`); library users get the same
with the environment variable `MALLOC_ARENA_MAX=2`. `release_free_memory` hands freed heap
back to the OS after a heavy phase (compaction, index builds). `freeze_startup_objects` keeps
what a chat process holds once started out of the collector's full passes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys

__all__ = ["freeze_startup_objects", "limit_malloc_arenas", "release_free_memory"]

_M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None  # glibc only


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc malloc arenas (call before threads start); honours an explicit MALLOC_ARENA_MAX."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def release_free_memory() -> bool:
    """Return freed heap pages to the operating system (glibc `malloc_trim`)."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def freeze_startup_objects() -> None:
    """Leave the objects a long-running process holds once started (modules, the store's handles
    and caches) out of Python's cyclic collector (`gc.freeze`): each full collection walked ~80k of
    them, 30-45 ms on two cores, a pause in whichever chat step met it (README, issue 18). Garbage
    is collected first; what is created afterwards is collected as usual. For processes memos
    runs (`memos chat`, `memos bench turn`); an application may call `gc.freeze()` alike."""
    gc.collect()
    gc.freeze()
