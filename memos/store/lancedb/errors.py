"""LanceDB's failures as memos sees them: commit conflicts to retry, purged versions to re-read,
and storage failures a user can act on (`StoreFullError`, `StoreUnavailableError`)."""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from memos.exceptions import StoreFullError, StoreUnavailableError

__all__ = ["Retries", "brief", "is_conflict", "is_gone", "journal_error", "retry_conflicts", "retrying", "storage_error"]

T = TypeVar("T")
log = logging.getLogger("memos.store.lancedb.errors")
_RUST_LOCATION = re.compile(r",?\s*/\S+\.rs:\d+(?::\d+)?")


def is_conflict(exc: BaseException) -> bool:
    """Whether a LanceDB error is a commit conflict with another writer (retrying can succeed)."""
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text or "concurrent" in text


def is_gone(exc: BaseException) -> bool:
    """A data, index or manifest file of the version a handle was on has been removed by a purge
    (or a compaction's cleanup): reading the latest version again succeeds."""
    text = str(exc).lower()
    return "not found" in text and (".lance" in text or ".idx" in text or "_versions" in text or "object at location" in text
                                    or "_indices" in text or ".manifest" in text)


def brief(exc: BaseException) -> str:
    """An error's first line without the Rust source locations LanceDB appends."""
    return _RUST_LOCATION.sub("", str(exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def storage_error(exc: BaseException, uri: str) -> BaseException:
    """A LanceDB/OS failure as the memos error a user can act on (the original is its cause);
    anything else comes back unchanged."""
    text = brief(exc)
    low = text.lower()
    if "no space left" in low or "disk quota" in low or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        return StoreFullError(f"the disk holding the memos store {uri} is full; free some space and retry "
                              "(what was acknowledged before is kept)")
    if "permission denied" in low or "read-only file system" in low or isinstance(exc, PermissionError):
        return StoreUnavailableError(f"memos cannot write the store {uri}: permission denied or read-only; "
                                     "check the owner and mode of the directory")
    if is_gone(exc) or isinstance(exc, FileNotFoundError):
        return StoreUnavailableError(f"a file of the memos store {uri} is missing ({text[:200]}); it was removed outside "
                                     "memos or by a cleanup that ignored other processes; restore the directory from a backup "
                                     "or export what still reads")
    return exc


async def retry_conflicts(op: Callable[[], Awaitable[T]], attempts: int = 12) -> T:
    """Run a LanceDB write, retrying commit conflicts with another writer (jittered backoff)."""
    for attempt in range(attempts):
        try:
            return await op()
        except Exception as exc:  # LanceDB raises plain RuntimeError/OSError for conflicts
            if not is_conflict(exc) or attempt == attempts - 1:
                raise
            await asyncio.sleep(min(1.0, 0.01 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def journal_error(exc: OSError, uri: str) -> BaseException:
    """The memos error for a journal append that failed (nothing was queued)."""
    error = storage_error(exc, uri)
    return error if error is not exc else StoreUnavailableError(f"memos cannot write the journal of the store {uri}: {exc}")


@dataclass
class Retries:
    """The LanceDB calls of one open store that were tried again since it opened: commits that met
    another writer's (LanceDB merges concurrent appends itself; these are what it gave back) and
    reads of a version a purge had removed, and the seconds slept before trying again. What
    several processes writing one store (`memos serve --workers N`) cost each other."""

    conflicts: int = 0
    purged: int = 0
    slept_s: float = 0.0
    journal_waits: int = 0
    """Reads that waited for rows another process had journaled (`memos.store.lancedb.others`)."""
    journal_wait_s: float = 0.0


async def retrying(table: Any, op: Callable[[], Awaitable[T]], attempts: int, uri: str, tally: Retries | None = None) -> T:
    """Run one LanceDB call on `table`: commit conflicts are retried with jittered backoff, a handle
    whose version a purge removed moves to the latest, and storage failures become memos errors;
    each try again is counted in `tally`."""
    tally = tally if tally is not None else Retries()
    for attempt in range(attempts):
        try:
            return await op()
        except (OSError, RuntimeError, ValueError) as exc:  # LanceDB raises these for every storage failure
            gone, conflict = is_gone(exc), is_conflict(exc)
            if not (gone or conflict) or attempt == attempts - 1:
                error = storage_error(exc, uri)
                if error is exc:
                    raise
                raise error from exc
            if gone:
                log.debug("a version under %s was purged; reading the latest (%s)", uri, exc)
                try:
                    await table.checkout_latest()
                except (OSError, RuntimeError, ValueError) as latest:  # the table itself is gone (its directory removed)
                    error = storage_error(latest, uri)
                    raise (error if error is not latest else storage_error(exc, uri)) from latest
            tally.purged += gone
            tally.conflicts += conflict and not gone
            pause = min(1.0, 0.01 * 2**attempt) * (0.5 + random.random())
            tally.slept_s += pause
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")
