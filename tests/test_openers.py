"""This process's hold of a store (`memos.store.lancedb.openers`): taken by every open, let go when
the last open of the store is collected, even when the collector runs inside an open."""

from __future__ import annotations

import fcntl
import gc
import os
import threading
from pathlib import Path

from memos.store.lancedb.openers import OPEN_FILE, Openers


class _Cycle:
    """An open kept by a reference cycle: only the cyclic collector frees it, whenever it runs."""

    def __init__(self, root: Path) -> None:
        self.me = self
        self.openers = Openers(root)


class _CollectingPath(type(Path())):  # type: ignore[misc]  # (PosixPath: a subclass to hook its hashing)
    """A store path whose hashing runs the collector: as an open's did, once, inside `Openers()`."""

    def __hash__(self) -> int:
        gc.collect()
        return super().__hash__()


def _free(root: Path) -> bool:
    """Whether no open holds the store (this process's included: this is another descriptor)."""
    fd = os.open(root / OPEN_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_an_open_collected_inside_another_open_never_deadlocks_and_the_last_lets_the_store_go(tmp_path):
    _Cycle(tmp_path)  # garbage at once, freed by the next collection
    opened: list[Openers] = []
    thread = threading.Thread(target=lambda: opened.append(Openers(_CollectingPath(tmp_path))), daemon=True)
    thread.start()
    thread.join(10)
    assert opened, "an open waited for ever on the collected one's release"
    gc.collect()
    assert not _free(tmp_path)  # one open is live
    opened.clear()
    gc.collect()
    assert _free(tmp_path)
