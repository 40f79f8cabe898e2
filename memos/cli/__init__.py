"""The `memos` command line (typer + rich).

Each group of commands lives in its own module and registers on `app`:
`store` (ingest, search, reindex, inspect), `bench`.
"""

from __future__ import annotations

import os

from memos.store.lancedb._malloc import limit_malloc_arenas  # noqa: E402

limit_malloc_arenas()  # before LanceDB or torch start threads (see memos.store.lancedb._malloc)

from ._app import app  # noqa: E402
from . import bench as _bench  # noqa: E402,F401
from . import demo as _demo  # noqa: E402,F401
from . import jobs as _jobs  # noqa: E402,F401
from . import inspect as _inspect  # noqa: E402,F401
from . import graph as _graph  # noqa: E402,F401
from . import mcp as _mcp  # noqa: E402,F401
from . import portability as _portability  # noqa: E402,F401
from . import serve as _serve  # noqa: E402,F401
from . import store as _store  # noqa: E402,F401

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the `memos` console script: an error is one line (exit 2), never a traceback
    (set MEMOS_DEBUG=1 to see it)."""
    from memos.exceptions import MemosError
    from ._app import console

    try:
        app()
    except (MemosError, OSError, RuntimeError) as exc:
        if os.environ.get("MEMOS_DEBUG"):
            raise
        from memos.store.lancedb.storage import storage_error

        error = exc if isinstance(exc, MemosError) else storage_error(exc, os.environ.get("MEMOS_DB", "the store"))
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        console.print(f"[red]error:[/red] " + (text if isinstance(error, MemosError)
                      else f"{type(exc).__name__}: {text[:300]} (MEMOS_DEBUG=1 shows the traceback)"))
        raise SystemExit(2) from None
