"""Small notices one process of a local store posts and its other processes read: the web view's
change events across the workers of `memos serve --workers N`.

A write through one worker publishes an event to the streams open in that worker
(`memos.serve.events`); a view connected to another worker saw it only on its next refresh. Now each
process also appends its notices, one JSON line each, to a file of its own under `.memos-notices/`
beside the tables, and a process with a stream open reads what the others appended since it last
looked (`Notices.read`, a `stat` per file while nothing changed), whole lines only: a line still
being written is read the next time. Notices say what changed (kinds, ids), never what a record
holds; who they concern goes in as a `pseudonym` (a hash keyed by a random salt of the store's,
in `.memos-notices/salt`), so no notice names a user, not even one forgotten since. They are kept
minutes, not for ever: a file past `ROTATE_BYTES` or `ROTATE_SECONDS`
old is continued under a new name and the old one removed `KEEP_SECONDS` later (a reader that is
behind still finishes it); a file not written for `STALE_SECONDS` (its process gone, or quiet) is
removed by whichever reader finds it or by a process that starts a file (a quiet process whose file
went that way starts a new one at its next post); a process that closes removes its own. An object-storage store has no directory:
it posts nothing and reads nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

__all__ = ["KEEP_SECONDS", "NOTICES_DIR", "Notices", "QUIET_SECONDS", "ROTATE_BYTES", "ROTATE_SECONDS", "STALE_SECONDS"]

NOTICES_DIR = ".memos-notices"
ROTATE_BYTES = 1 << 20
ROTATE_SECONDS = 300.0
KEEP_SECONDS = 60.0
STALE_SECONDS = 600.0
QUIET_SECONDS = 1.0
"""A post after this long without one first checks that its file is still there (removed as stale)."""


class Notices:
    """The notices of the store at `root` (None: object storage, where there are none), in the
    folder `folder` beside its tables (another kind of notice, another folder)."""

    def __init__(self, root: Path | None, folder: str = NOTICES_DIR) -> None:
        self.folder = None if root is None else root / folder
        self._prefix = f"{os.getpid()}-{secrets.token_hex(4)}-"
        self._part = 0
        self._fd: int | None = None
        self._size = 0
        self._opened = 0.0
        self._retired: list[tuple[float, Path]] = []  # own full files, removed KEEP_SECONDS after
        self._offsets: dict[str, int] | None = None  # other processes' files: bytes read (None: not reading)
        self._salt: bytes | None = None
        self._pseudonyms: dict[str, str] = {}
        self._posted = 0.0  # when this process last posted (monotonic)

    def pseudonym(self, value: str) -> str:
        """`value` (a user id) as every process of the store writes it in a notice: a keyed hash."""
        if (known := self._pseudonyms.get(value)) is not None:
            return known
        if self._salt is None:
            self._salt = _salt(self.folder) if self.folder is not None else b""
        if len(self._pseudonyms) >= 4096:
            self._pseudonyms.clear()
        made = self._pseudonyms[value] = hmac.new(self._salt, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:32]
        return made

    def post(self, notice: dict[str, Any]) -> None:
        """Append one notice (JSON-serialisable) for the store's other processes."""
        if self.folder is None:
            return
        line = (json.dumps(notice, default=str, ensure_ascii=False) + "\n").encode()
        now = time.monotonic()
        if self._fd is not None and (self._size + len(line) > ROTATE_BYTES or now - self._opened > ROTATE_SECONDS
                                     or (now - self._posted > QUIET_SECONDS and os.fstat(self._fd).st_nlink == 0)):
            self._retired.append((now, self._own()))
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self.folder.mkdir(exist_ok=True)
            self._sizes()  # the files of processes long gone are removed (a store no process reads from leaves none behind)
            self._part += 1
            self._fd = os.open(self._own(), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            self._size, self._opened = 0, now
        os.write(self._fd, line)  # one write of the whole line (O_APPEND): lines of one file never interleave
        self._size, self._posted = self._size + len(line), now
        while self._retired and now - self._retired[0][0] >= KEEP_SECONDS:
            with contextlib.suppress(FileNotFoundError):
                self._retired.pop(0)[1].unlink()

    def _own(self) -> Path:
        assert self.folder is not None
        return self.folder / f"{self._prefix}{self._part}.jsonl"

    def close(self) -> None:
        """Remove this process's files (it posts no more)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._retired.append((0.0, self._own()))
        for _, path in self._retired:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._retired.clear()

    def skip(self) -> None:
        """Start reading at the present: `read` returns only what is posted from now on."""
        self._offsets = {} if self.folder is None else self._sizes()

    def stop(self) -> None:
        """No longer read (the next `read` starts at the present)."""
        self._offsets = None

    def read(self) -> list[dict[str, Any]]:
        """The other processes' notices posted since the last `read` (or `skip`), file by file in
        the order each was posted; the first call starts at the present and returns none."""
        if self._offsets is None:
            self.skip()
            return []
        if self.folder is None:
            return []
        found: list[dict[str, Any]] = []
        sizes = self._sizes()
        for name, size in sorted(sizes.items(), key=lambda item: _order(item[0])):
            at = self._offsets.get(name, 0)  # a file new since the last read: from its start
            if size <= at:
                continue
            with contextlib.suppress(FileNotFoundError), open(self.folder / name, "rb") as file:
                file.seek(at)
                chunk = file.read(size - at)
                whole = chunk.rfind(b"\n") + 1  # a line being written waits for the next read
                for line in chunk[:whole].splitlines():
                    with contextlib.suppress(ValueError):
                        found.append(json.loads(line))
                self._offsets[name] = at + whole
        self._offsets = {name: at for name, at in self._offsets.items() if name in sizes}
        return found

    def _sizes(self) -> dict[str, int]:
        """Other processes' notice files and their sizes; stale ones removed on the way."""
        assert self.folder is not None
        sizes: dict[str, int] = {}
        now = time.time()
        with contextlib.suppress(FileNotFoundError), os.scandir(self.folder) as entries:
            for entry in entries:
                if not entry.name.endswith(".jsonl") or entry.name.startswith(self._prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    stat = entry.stat()
                    if now - stat.st_mtime > STALE_SECONDS:
                        os.unlink(entry.path)
                        continue
                    sizes[entry.name] = stat.st_size
        return sizes


def _salt(folder: Path) -> bytes:
    """The store's salt for pseudonyms: made by the first process that needs it, read by the others."""
    folder.mkdir(exist_ok=True)
    path = folder / "salt"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        for _ in range(100):  # its maker may be writing it
            if len(salt := path.read_bytes()) == 32:
                return salt
            time.sleep(0.001)
        raise OSError(f"{path} does not hold a salt of 32 bytes") from None
    salt = secrets.token_bytes(32)
    try:
        os.write(fd, salt)
    finally:
        os.close(fd)
    return salt


def _order(name: str) -> tuple[str, int]:
    """A process's files in the order it wrote them (`<pid>-<random>-<part>.jsonl`)."""
    stem, _, part = name.removesuffix(".jsonl").rpartition("-")
    return stem, int(part) if part.isdigit() else 0
