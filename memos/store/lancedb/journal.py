"""The turn journal: a chat turn is durable once it is appended here, before LanceDB has it.

A LanceDB commit is a data file, a transaction file and a manifest listing every fragment, and
enough of them bring an optimize that rewrites the table: too dear for every chat turn. So a
turn's rows are appended to a journal segment, a plain file in the store's
directory, and `memos.store.lancedb.write_behind` writes them to their tables in batches a moment later. A
write returns once the bytes are in the operating system's hands: the same durability LanceDB's
own commits have here (they make no `fsync` either), so a crash of the process loses nothing
acknowledged.

Each open store of a process appends to its own segment (`.memos-journal/<token>.seg`), holding an
exclusive `flock` on it for as long as the segment is live: the lock says "its writer is alive".
When a batch is written to the tables, the segments that held it are deleted. A segment whose
lock anyone can take belongs to a process that stopped before writing it; the next process to
open the store writes what it holds (`memos.store.lancedb.opening.open_storage`), skipping the rows already there, so a
segment deleted late or replayed twice does no harm. A segment is created under a temporary
name, locked, then renamed into place, so no other process ever sees it unlocked while its
writer lives.

An entry is one or more frames, written with one `write` call: a frame is its length and CRC-32
(8 bytes) and an Arrow IPC stream of rows, whose schema names the table they belong to. A torn
last frame (a crash inside the write, never acknowledged) is found by its length or checksum
and ignored. Object-storage stores (s3://, ...) have no directory to journal in: their turns
are committed at once, as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

__all__ = ["JOURNAL_DIR", "Journal", "Orphan", "Segment", "frame", "live_ids", "orphans", "own_prefix", "read_frames"]

log = logging.getLogger("memos.store.lancedb.storage")

JOURNAL_DIR = ".memos-journal"
"""The folder of a local store that holds the journal segments."""
_SUFFIX = ".seg"
_HEADER = struct.Struct("<II")  # payload length, CRC-32 of the payload
_TABLE_KEY = b"memos.table"
_OWN: tuple[int, str] = (0, "")


def own_prefix() -> str:
    """What the names of this process's segments start with: a token of its own, drawn anew in a
    forked child, so `live_ids(..., others=True)` can tell another process's segments from its own."""
    global _OWN
    if _OWN[0] != os.getpid():
        _OWN = (os.getpid(), uuid.uuid4().hex[:12] + "-")
    return _OWN[1]


@dataclass(eq=False)
class Segment:
    """One live segment file: its path and the descriptor whose `flock` marks its writer alive."""

    path: Path
    fd: int
    size: int = 0
    """Bytes of whole entries in it."""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)  # closing releases the lock


@dataclass
class Journal:
    """The journal of one open local store (`root`: the store's directory)."""

    root: Path
    _current: Segment | None = None
    _closed: list[Segment] = field(default_factory=list)  # closed to new entries after a failed write
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def folder(self) -> Path:
        return self.root / JOURNAL_DIR

    def append(self, tables: Sequence[tuple[str, pa.Table]]) -> None:
        """Append one entry (rows of one or more tables) in one write; durable on return (as far
        as the operating system's page cache, like a LanceDB commit). An `OSError` (a full disk)
        leaves the segment as it was before the entry."""
        data = b"".join(frame(name, rows) for name, rows in tables)
        with self._lock:
            segment = self._current or self._open()
            self._current = segment
            try:
                written = os.write(segment.fd, data)
                if written != len(data):
                    raise OSError(errno.ENOSPC, f"journal {segment.path}: wrote {written} of {len(data)} bytes")
            except OSError:
                try:
                    os.ftruncate(segment.fd, segment.size)  # no torn entry ahead of the next one
                except OSError:
                    self._closed.append(segment)  # the next entry starts another segment
                    self._current = None
                raise
            segment.size += len(data)

    def seal(self) -> list[Segment]:
        """The segments appended to so far, closed to new entries (they start another)."""
        with self._lock:
            sealed = [*self._closed, *([self._current] if self._current else [])]
            self._closed, self._current = [], None
            return sealed

    @staticmethod
    def retire(segments: Sequence[Segment]) -> None:
        """Delete segments whose rows are all in their tables now."""
        for segment in segments:
            with contextlib.suppress(FileNotFoundError):
                segment.path.unlink()
            segment.close()

    def _open(self) -> Segment:
        self.folder.mkdir(parents=True, exist_ok=True)
        token = own_prefix() + uuid.uuid4().hex
        temporary = self.folder / f"{token}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file no one else knows: never blocks
            path = self.folder / f"{token}{_SUFFIX}"
            os.rename(temporary, path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        return Segment(path, fd)


def frame(name: str, rows: pa.Table) -> bytes:
    """One frame: the rows of table `name` as an Arrow IPC stream, behind its length and CRC-32."""
    schema = rows.schema.with_metadata({**(rows.schema.metadata or {}), _TABLE_KEY: name.encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(rows.replace_schema_metadata(schema.metadata))
    payload = sink.getvalue().to_pybytes()
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def read_frames(data: bytes) -> Iterator[tuple[str, pa.Table]]:
    """The frames of a segment's bytes, in order, up to the first torn or damaged one."""
    at = 0
    while at + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, at)
        payload = data[at + _HEADER.size : at + _HEADER.size + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            log.warning("journal: a damaged or torn entry at byte %d ignored (never acknowledged)", at)
            return
        rows = pa.ipc.open_stream(payload).read_all()
        metadata = dict(rows.schema.metadata or {})
        name = metadata.pop(_TABLE_KEY, b"").decode()
        yield name, rows.replace_schema_metadata(metadata or None)
        at += _HEADER.size + length


def live_ids(root: Path, *, stopped: bool = False, others: bool = False) -> dict[str, set[str]]:
    """The ids of the rows (of state entries: their keys), by table, that the live segments under `root` hold (their writers,
    this process included, have yet to write them to their tables, or are writing them); a
    stopped writer's segment is left to `orphans`, unless `stopped`: then its ids count too
    (every segment whose rows a replay may still write). `others`: other processes' segments only."""
    folder = root / JOURNAL_DIR
    found: dict[str, set[str]] = {}
    mine = own_prefix() if others else None
    for path in sorted(folder.glob(f"*{_SUFFIX}")) if folder.is_dir() else []:
        if mine is not None and path.name.startswith(mine):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # retired meanwhile: its rows are in their tables
            continue
        try:
            if not stopped:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    continue  # no writer holds it: a stopped process's, replayed at an open
                except BlockingIOError:  # its writer is alive
                    pass
            elif os.fstat(fd).st_nlink == 0:  # retired or replayed since it was listed
                continue
            with open(fd, "rb", closefd=False) as f:
                data = f.read()
        finally:
            os.close(fd)
        for name, rows in read_frames(data):
            column = "id" if "id" in rows.column_names else "key" if "key" in rows.column_names else None  # (state entries: keys)
            if column is not None:
                found.setdefault(name, set()).update(rows.column(column).to_pylist())
    return found


@dataclass(eq=False)
class Orphan:
    """A segment whose writer stopped before writing it to the tables (`orphans`)."""

    path: Path
    data: bytes
    done: bool = True
    """Delete it when the replay ends (False: keep it for a later open, e.g. rows of a memory
    type this process did not register)."""


STALE_TEMPORARY = 60.0
"""Seconds after which a segment file never renamed into place (its writer stopped between the
two steps, before writing anything) is removed."""


@contextlib.contextmanager
def orphans(root: Path) -> Iterator[list[Orphan]]:
    """The segments under `root` whose writers have stopped, locked against every other process
    for the block; those still marked `done` are deleted when the block ends without an error."""
    folder = root / JOURNAL_DIR
    held: list[tuple[Orphan, int]] = []
    try:
        for path in sorted(folder.glob(f"*{_SUFFIX}")) if folder.is_dir() else []:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # retired meanwhile
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its writer is alive
                os.close(fd)
                continue
            if os.fstat(fd).st_nlink == 0:  # replayed and deleted by another open since it was listed
                os.close(fd)
                continue
            with open(fd, "rb", closefd=False) as f:
                held.append((Orphan(path, f.read()), fd))
        found = [orphan for orphan, _ in held]
        yield found
        for orphan in found:
            if orphan.done:
                with contextlib.suppress(FileNotFoundError):
                    orphan.path.unlink()
        for temporary in folder.glob("*.tmp") if folder.is_dir() else []:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - temporary.stat().st_mtime > STALE_TEMPORARY:
                    temporary.unlink()
    finally:
        for _, fd in held:
            os.close(fd)
