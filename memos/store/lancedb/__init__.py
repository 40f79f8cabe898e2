"""The LanceDB store: tables, the shared search index, compaction, purge, the turn journal.

Every module here imports LanceDB; this package runs `_lance` first, whatever module is imported,
so LanceDB's unused REST client is deferred (`memos.store.lancedb._lance`)."""

from . import _lance  # noqa: F401  (before any module of this package imports LanceDB)

__all__: list[str] = []
